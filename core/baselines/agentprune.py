"""AgentPrune (Zhang et al., 2024, arXiv 2410.02506, ICLR 2025): one-shot pruning of a
low-rank-regularised spatial-temporal communication graph.

The paper models a multi-round multi-agent dialogue as a *spatial-temporal* message-passing
graph: spatial edges between agents within a round, temporal edges from an agent's
output in round ``t − 1`` to another agent in round ``t``. Two soft masks, ``S^S`` and
``S^T`` (shared by all rounds), weigh the edges; they are optimised for a few iterations
by the policy gradient of the utility of graphs sampled from them, with a low-rank
penalty on the masks (the nuclear norm ``||S||_*``, the convex surrogate of the rank, so
that few independent "directions" of talk survive — the paper's graph-sparsity argument);
then the graph is pruned: the ``p`` share of edges with the lowest mask values is removed
(``p``, the pruning ratio, is its knob) and the pruned graph serves every following query
without further optimisation.

Paper and released code differ, and the defaults follow the code (docs/baselines.md, the
AgentPrune table): the code has no nuclear-norm term (``rank_weight`` 0; the paper's
penalty is a setting) and prunes *iteratively* — 0.25 of the remaining edges every 5 of
its 10 iterations, so twice (``prune_ratio`` 0.25, ``prune_steps`` 2; the paper's one-shot
reading is ``prune_steps=1``).

Mapping onto this runtime (docs/baselines.md):

* masks: ``S = σ(θ)`` (``N × N`` each, no self-loops: an agent's own last answer is
  already its memory); edges sampled as independent Bernoulli(``S``) while optimising;
* temporal edges are the runtime's :attr:`~core.team.plan.RoundPlan.temporal` edges
  (``dst`` reads what ``src`` held after the previous round), from round 1 on;
* objective: ``E[u(G)] − η (||S^S||_* + ||S^T||_*)`` with ``u`` the episode reward
  (``score − w_tok · token penalty``), ``η`` = ``rank_weight``;
* pruning: at each of ``prune_steps`` steps spread evenly over the budget (the last when
  training ends; the budget is the training run's episodes) each mask loses ``p`` of its
  remaining (supported) edges, lowest ``σ(θ)`` first;
* after pruning (``decode``): ``sample`` draws the kept edges with their learned
  probabilities, ``mask`` keeps every kept edge, ``threshold`` those above 0.5.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from core.baselines.edges import nuclear_norm, off_diagonal, prune_lowest, steps_due
from core.baselines.method import GraphMethod, MethodConfig, Stage, TeamShape
from core.baselines.plans import EpisodeGraph


@dataclass
class AgentPruneConfig(MethodConfig):
    """AgentPrune's masks, penalty and pruning."""

    prune_ratio: float = 0.25
    """p: share of each mask's remaining edges removed at each pruning step (released: 0.25)."""
    prune_steps: int = 2
    """Pruning steps, spread evenly over the budget, the last at its end (released: every 5 of
    10 iterations, so 2; 1 = the paper's one-shot pruning)."""
    rank_weight: float = 0.0
    """η: weight of the paper's nuclear-norm (low-rank) penalty on the masks (released: none)."""
    temporal: bool = True
    """Learn the temporal mask too (False: spatial edges only)."""
    init_probability: float = 0.5
    """Starting value of every mask entry."""
    decode: str = "sample"

    def validate(self) -> None:
        super().validate()
        self.check_ratio("prune_ratio", self.prune_ratio)
        self.check_steps("prune_steps", self.prune_steps)
        self.check_weight("rank_weight", self.rank_weight)
        self.check_probability("init_probability", self.init_probability)


class AgentPrune(GraphMethod):
    """``θ^S, θ^T (N, N)``; buffers: the supports left after pruning and whether it ran."""

    name = "agentprune"
    config_class = AgentPruneConfig
    knob = "prune_ratio"
    paper = "2410.02506"

    def __init__(self, config: AgentPruneConfig, shape: TeamShape):
        super().__init__(config, shape)
        start = math.log(config.init_probability / (1 - config.init_probability))
        self.spatial_logits = nn.Parameter(torch.full((self.n, self.n), start))
        self.temporal_logits = nn.Parameter(torch.full((self.n, self.n), start))
        pairs = off_diagonal(self.n)
        self.register_buffer("spatial_support", pairs.clone())
        self.register_buffer("temporal_support", pairs & config.temporal & (self.rounds > 1))
        self.register_buffer("pruned", torch.zeros((), dtype=torch.bool))
        self.steps_done = 0
        """Pruning steps taken so far in this training run (a run is not resumed)."""

    def graph_probs(self, context: dict[str, torch.Tensor], batch: int) -> dict[str, torch.Tensor]:
        shape = (batch, self.n, self.n)
        return {
            "spatial": torch.sigmoid(self.spatial_logits).expand(shape),
            "temporal": torch.sigmoid(self.temporal_logits).expand(shape),
        }

    def graph_supports(self) -> dict[str, torch.Tensor]:
        return {"spatial": self.spatial_support, "temporal": self.temporal_support}

    def regulariser(self, probs: dict[str, torch.Tensor]) -> torch.Tensor:
        if self.config.rank_weight == 0:
            return torch.zeros(())
        supports = self.supports()
        # One matrix per mask (the batch repeats it).
        return self.config.rank_weight * sum(
            nuclear_norm(p[0], supports[k]) for k, p in probs.items()
        )

    def layout(self, edges: dict[str, np.ndarray]) -> EpisodeGraph:
        return EpisodeGraph.repeated(edges["spatial"], self.rounds, edges["temporal"])

    def frozen(self) -> bool:
        return bool(self.pruned)

    def on_progress(self, done: int, total: int) -> Stage | None:
        """The pruning steps due before the last (at most one per batch)."""
        if self.pruned or self.steps_done >= steps_due(done, total, self.config.prune_steps):
            return None
        return self.prune(done)

    def finish(self, done: int) -> Stage | None:
        """The last pruning step (and any not taken, when a token budget ended early)."""
        if self.pruned:
            return None
        while self.steps_done < self.config.prune_steps - 1:
            self.prune(done)
        stage = self.prune(done)
        self.pruned.fill_(True)
        return stage

    def prune(self, done: int) -> Stage:
        """One pruning step: each mask loses ``prune_ratio`` of its remaining edges."""
        with torch.no_grad():
            probs = self.graph_probs({}, 1)
            before = {k: int(s.sum()) for k, s in self.graph_supports().items()}
            self.spatial_support.copy_(
                prune_lowest(probs["spatial"][0], self.spatial_support, self.config.prune_ratio)
            )
            self.temporal_support.copy_(
                prune_lowest(probs["temporal"][0], self.temporal_support, self.config.prune_ratio)
            )
        self.steps_done += 1
        after = {k: int(s.sum()) for k, s in self.graph_supports().items()}
        detail = {"step": self.steps_done, "edges_before": before, "edges_after": after}
        return Stage(done, "pruned", detail)
