"""AgentDropout (Wang et al., 2025, arXiv 2503.18891, ACL 2025): per-round node and edge
dropout learned from each agent's contribution.

The paper keeps one intra-round (spatial) adjacency matrix per communication round and
one inter-round (temporal) matrix per pair of consecutive rounds, all trainable. Two steps:

1. **Node dropout.** The intra-round matrices are optimised by the policy gradient of
   the utility of graphs sampled from them; an agent's contribution in round ``t`` is
   its weighted degree in that round's matrix (the sum of its in- and out-edge weights);
   in every round the ``α`` share of agents that contribute least is dropped from that
   round (``α``, the node-dropout ratio).
2. **Edge dropout.** On the remaining agents the intra- and inter-round matrices are
   optimised again, now with the low-rank (nuclear-norm) penalty AgentPrune introduced
   and — in the released code — a closeness term, ``ReLU(||A_full − A||_F − δ)``, that
   keeps each matrix within ``δ`` of the full graph it started from (our
   ``closeness_weight``, ``delta``), and the ``β`` share of edges with the lowest weights is
   dropped (``β``, the edge-dropout ratio; the released code drops 0.25 of the remaining
   edges twice, our ``edge_steps`` 2).

The thinned per-round graphs then serve every query. Mapping onto this runtime
(docs/baselines.md):

* matrices: ``A = σ(θ)``, ``θ^intra (R, N, N)``, ``θ^inter (R, N, N)`` (row 0 of the
  inter-round matrices has no previous round and is never supported); self-loops never
  (an agent's own last answer is its memory);
* a dropped agent is *inactive* in that round (``RoundPlan.active``): no call, it keeps
  what it held; its history can still be read along a temporal edge of a later round
  only if it answered in the round before;
* utility: the episode reward (``score − w_tok · token penalty``); budget: the first
  ``node_stage`` share of the training episodes is step 1 (both matrices are sampled and
  learned, without penalty), the rest step 2; edge dropout runs in ``edge_steps`` steps
  spread evenly over step 2, the last when training ends;
* step 1 as released (*skip sampling*, ``skip_sampling``): in every round of a training
  episode one agent, drawn by a softmax of its weighted degree in the round's sampled
  graph (the sum of the logits of its sampled in- and out-edges), sits out; the step's
  log-probability is the released surrogate ``Σ_t [SKIP_WEIGHT · Σ_{e ∋ k_t} log(1 − σ_e)
  + Σ_{i ≠ k_t} Σ_{e ∋ i} log σ_e]`` over the round's sampled intra-round edges ``e``
  (``k_t`` the agent that sat out), so an episode that went well without ``k_t`` lowers
  ``k_t``'s edges — its weighted degree, by which node dropout ranks — and raises the
  others'. The inter-round matrices get no gradient in step 1 (as released). Off: every
  agent plays and step 1 is the plain policy gradient of the sampled graphs;
* the penalties act on the probabilities ``σ(θ)``, as every penalty here does (the released
  code applies them to the raw logits, with weight 1 each);
* counts: ``round(α · N)`` agents per round (at most ``N − 1``), ``round(β · |edges|)``
  edges of each kind;
* after dropout (``decode``): ``sample`` draws the kept edges with their learned
  probabilities, ``mask`` keeps them all, ``threshold`` those above 0.5.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from core.baselines.edges import (
    count,
    nuclear_norm,
    off_diagonal,
    prune_lowest,
    steps_due,
    total_log_prob,
)
from core.baselines.method import VERIFY, GraphMethod, MethodConfig, Stage, TeamShape
from core.baselines.plans import EpisodeGraph

NODES, EDGES, DONE = 0, 1, 2
"""Stages: learning for node dropout, learning for edge dropout, final."""
SKIP = "skip"
"""The key of the agents drawn to sit out ``(B, R, N)`` (step 1, skip sampling)."""
SKIP_WEIGHT = 4.0
"""Weight of the agent that sat out in the released surrogate (released: 4.0, five agents)."""


@dataclass
class AgentDropoutConfig(MethodConfig):
    """AgentDropout's matrices, ratios and stages."""

    node_dropout: float = 0.25
    """α: share of agents dropped in each round."""
    edge_dropout: float = 0.25
    """β: share of each kind of edge's remaining edges (intra, inter) dropped at each step."""
    edge_steps: int = 2
    """Edge-dropout steps spread evenly over step 2, the last at its end (released: 2)."""
    rank_weight: float = 0.02
    """Weight of the nuclear-norm penalty in step 2."""
    closeness_weight: float = 0.02
    """Weight of the released closeness term ``ReLU(||A_full − A||_F − δ)`` in step 2 (0:
    the paper's loss, which does not state it)."""
    delta: float = 0.1
    """δ of the closeness term (released: 0.1)."""
    node_stage: float = 0.5
    """Share of the training episodes spent in step 1 (node dropout) before step 2."""
    skip_sampling: bool = True
    """Step 1 as released: one agent per round drawn to sit out, learned through the
    released surrogate log-probability (False: every agent plays, plain policy gradient)."""
    temporal: bool = True
    """Learn inter-round (temporal) matrices too."""
    init_probability: float = 0.5
    """Starting value of every matrix entry."""
    decode: str = "sample"

    def validate(self) -> None:
        super().validate()
        self.check_ratio("node_dropout", self.node_dropout)
        self.check_ratio("edge_dropout", self.edge_dropout)
        self.check_steps("edge_steps", self.edge_steps)
        self.check_probability("node_stage", self.node_stage)
        self.check_weight("rank_weight", self.rank_weight)
        self.check_weight("closeness_weight", self.closeness_weight)
        self.check_weight("delta", self.delta)
        self.check_probability("init_probability", self.init_probability)


class AgentDropout(GraphMethod):
    """``θ^intra, θ^inter (R, N, N)``; buffers: supports, active agents ``(R, N)``, stage."""

    name = "agentdropout"
    config_class = AgentDropoutConfig
    knob = "edge_dropout"
    paper = "2503.18891"

    def __init__(self, config: AgentDropoutConfig, shape: TeamShape):
        super().__init__(config, shape)
        r, n = self.rounds, self.n
        start = math.log(config.init_probability / (1 - config.init_probability))
        self.intra_logits = nn.Parameter(torch.full((r, n, n), start))
        self.inter_logits = nn.Parameter(torch.full((r, n, n), start))
        pairs = off_diagonal(n).expand(r, n, n).clone()
        inter = pairs.clone()
        inter[0] = False
        self.register_buffer("intra_support", pairs)
        self.register_buffer("inter_support", inter & config.temporal)
        self.register_buffer("active", torch.ones(r, n, dtype=torch.bool))
        self.register_buffer("stage", torch.tensor(NODES))
        self.steps_done = 0
        """Edge-dropout steps taken so far in this training run."""

    def graph_probs(self, context: dict[str, torch.Tensor], batch: int) -> dict[str, torch.Tensor]:
        shape = (batch, self.rounds, self.n, self.n)
        return {
            "intra": torch.sigmoid(self.intra_logits).expand(shape),
            "inter": torch.sigmoid(self.inter_logits).expand(shape),
        }

    def graph_supports(self) -> dict[str, torch.Tensor]:
        return {"intra": self.intra_support, "inter": self.inter_support}

    def regulariser(self, probs: dict[str, torch.Tensor]) -> torch.Tensor:
        """Step 2: ``rank_weight · Σ ||A||_* + closeness_weight · Σ ReLU(||A_full − A||_F −
        δ)`` over each round's matrix (the batch repeats them)."""
        c = self.config
        if int(self.stage) != EDGES:
            return torch.zeros(())
        supports = self.supports()
        loss = torch.zeros(())
        if c.rank_weight:
            loss = loss + c.rank_weight * sum(
                nuclear_norm(p[0], supports[k]) for k, p in probs.items()
            )
        if c.closeness_weight:
            # A_full: every edge the matrix may still have (the full graph, less the dropped
            # agents' edges, which no longer count).
            for key, p in probs.items():
                full = supports[key].to(p.dtype)
                gap = torch.linalg.matrix_norm(full - p[0] * full, ord="fro")
                loss = loss + c.closeness_weight * torch.relu(gap - c.delta).sum()
        return loss

    def layout(self, edges: dict[str, np.ndarray]) -> EpisodeGraph:
        active = self.active.cpu().numpy().copy()
        if SKIP in edges:  # step 1's training episodes: the drawn agent sits the round out
            active &= ~edges[SKIP].astype(bool)
        return EpisodeGraph(
            spatial=edges["intra"].astype(bool),
            temporal=edges["inter"].astype(bool),
            active=active,
        )

    def skipping(self, explore: bool) -> bool:
        """Whether graphs drawn now carry step 1's skipped agents."""
        return explore and self.config.skip_sampling and int(self.stage) == NODES

    def decide(
        self,
        probs: dict[str, torch.Tensor],
        explore: bool,
        generator: torch.Generator | None,
    ) -> dict[str, torch.Tensor]:
        """The base's edges plus, in step 1's training episodes, :data:`SKIP` ``(B, R, N)``:
        one agent per round, drawn by a softmax of its weighted degree in the sampled
        intra-round graph (the sum of its sampled in- and out-edges' logits; no gradient)."""
        out = super().decide(probs, explore, generator)
        if not self.skipping(explore):
            return out
        intra = out["intra"]  # (B, R, N, N)
        logits = self.intra_logits.detach().expand_as(intra) * intra
        degree = logits.sum(dim=-1) + logits.sum(dim=-2)  # (B, R, N)
        weights = torch.softmax(degree, dim=-1).reshape(-1, self.n)
        drawn = torch.multinomial(weights, 1, generator=generator).reshape(degree.shape[:-1])
        out[SKIP] = nn.functional.one_hot(drawn, self.n).bool()
        return out

    def log_prob(
        self, probs: dict[str, torch.Tensor], edges: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        """``(B,)``; with skipped agents (step 1), the released surrogate ``Σ_t [SKIP_WEIGHT ·
        Σ_{e ∋ k_t} log(1 − σ_e) + Σ_{i ≠ k_t} Σ_{e ∋ i} log σ_e]`` over each round's
        sampled intra-round edges (an edge counts once for each end), else the base's."""
        if SKIP not in edges:
            return super().log_prob(probs, edges)
        p = probs["intra"].clamp(1e-6, 1 - 1e-6)  # (B, R, N, N)
        sampled = edges["intra"].to(p.dtype)
        kept, left = sampled * p.log(), sampled * (1 - p).log()
        per_agent_kept = kept.sum(dim=-1) + kept.sum(dim=-2)  # (B, R, N)
        per_agent_left = left.sum(dim=-1) + left.sum(dim=-2)
        skip = edges[SKIP].to(p.dtype)
        terms = skip * SKIP_WEIGHT * per_agent_left + (1 - skip) * per_agent_kept
        total = terms.sum(dim=(1, 2))
        if VERIFY in probs:  # the with-tools protocol's bits keep their own log-probability
            total = total + total_log_prob(
                {VERIFY: probs[VERIFY]}, edges, {VERIFY: self.supports()[VERIFY]}
            )
        return total

    def frozen(self) -> bool:
        return int(self.stage) == DONE

    def contributions(self) -> torch.Tensor:
        """``(R, N)``: each agent's weighted degree (in + out) in each round's intra-round
        matrix, over the supported entries."""
        with torch.no_grad():
            a = torch.sigmoid(self.intra_logits) * self.intra_support
            return a.sum(dim=-1) + a.sum(dim=-2)

    def on_progress(self, done: int, total: int) -> Stage | None:
        if int(self.stage) == NODES:
            return self.drop_nodes(done) if done >= self.config.node_stage * total else None
        if int(self.stage) != EDGES:
            return None
        start = int(self.config.node_stage * total)
        due = steps_due(done - start, total - start, self.config.edge_steps)
        return self.drop_edges(done) if self.steps_done < due else None

    def drop_nodes(self, done: int) -> Stage:
        """Step 1's end: per round, the ``round(α N)`` least contributing agents leave."""
        k = min(count(self.config.node_dropout, self.n), self.n - 1)
        weight = self.contributions()
        with torch.no_grad():
            for t in range(self.rounds):
                order = sorted(range(self.n), key=lambda i: (float(weight[t, i]), i))
                self.active[t, order[:k]] = False
            live = self.active
            self.intra_support &= live[:, :, None] & live[:, None, :]
            # An inter-round edge needs a source that answered in the round before.
            before = torch.roll(live, 1, dims=0)
            self.inter_support &= before[:, :, None] & live[:, None, :]
            self.stage.fill_(EDGES)
        dropped = [[i for i in range(self.n) if not bool(live[t, i])] for t in range(self.rounds)]
        return Stage(done, "nodes dropped", {"dropped_per_round": dropped})

    def finish(self, done: int) -> Stage | None:
        """Step 2's end: the last edge-dropout step (and any not taken)."""
        events = []
        if int(self.stage) == NODES:
            events.append(self.drop_nodes(done).detail)
        if int(self.stage) != EDGES:
            return None
        while self.steps_done < self.config.edge_steps - 1:
            self.drop_edges(done)
        stage = self.drop_edges(done)
        self.stage.fill_(DONE)
        if events:
            stage.detail["nodes"] = events[0]
        return stage

    def drop_edges(self, done: int) -> Stage:
        """One edge-dropout step: each kind of edge loses ``β`` of its remaining edges,
        lowest weight first."""
        with torch.no_grad():
            probs = self.graph_probs({}, 1)
            before = {k: int(s.sum()) for k, s in self.graph_supports().items()}
            beta = self.config.edge_dropout
            self.intra_support.copy_(prune_lowest(probs["intra"][0], self.intra_support, beta))
            self.inter_support.copy_(prune_lowest(probs["inter"][0], self.inter_support, beta))
        self.steps_done += 1
        after = {k: int(s.sum()) for k, s in self.graph_supports().items()}
        detail = {"step": self.steps_done, "edges_before": before, "edges_after": after}
        return Stage(done, "edges dropped", detail)
