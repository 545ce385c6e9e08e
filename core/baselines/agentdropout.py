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
   optimised again, now with the low-rank (nuclear-norm) penalty AgentPrune introduced,
   and the ``β`` share of edges with the lowest weights is dropped (``β``, the
   edge-dropout ratio).

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
  learned, without penalty), the rest step 2; edge dropout runs when training ends;
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

from core.baselines.edges import count, nuclear_norm, off_diagonal, prune_lowest
from core.baselines.method import GraphMethod, MethodConfig, Stage, TeamShape
from core.baselines.plans import EpisodeGraph

NODES, EDGES, DONE = 0, 1, 2
"""Stages: learning for node dropout, learning for edge dropout, final."""


@dataclass
class AgentDropoutConfig(MethodConfig):
    """AgentDropout's matrices, ratios and stages."""

    node_dropout: float = 0.25
    """α: share of agents dropped in each round."""
    edge_dropout: float = 0.25
    """β: share of each kind of edge (intra, inter) dropped after step 2."""
    rank_weight: float = 0.02
    """Weight of the nuclear-norm penalty in step 2."""
    node_stage: float = 0.5
    """Share of the training episodes spent in step 1 (node dropout) before step 2."""
    temporal: bool = True
    """Learn inter-round (temporal) matrices too."""
    init_probability: float = 0.5
    """Starting value of every matrix entry."""
    decode: str = "sample"

    def validate(self) -> None:
        super().validate()
        self.check_ratio("node_dropout", self.node_dropout)
        self.check_ratio("edge_dropout", self.edge_dropout)
        if not 0.0 < self.node_stage < 1.0:
            raise ValueError(f"node_stage = {self.node_stage} is not in (0, 1)")
        if not (self.rank_weight >= 0 and math.isfinite(self.rank_weight)):
            raise ValueError(f"rank_weight = {self.rank_weight} must be a finite number >= 0")
        if not 0.0 < self.init_probability < 1.0:
            raise ValueError(f"init_probability = {self.init_probability} is not in (0, 1)")


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

    def graph_probs(self, context: dict[str, torch.Tensor], batch: int) -> dict[str, torch.Tensor]:
        shape = (batch, self.rounds, self.n, self.n)
        return {
            "intra": torch.sigmoid(self.intra_logits).expand(shape),
            "inter": torch.sigmoid(self.inter_logits).expand(shape),
        }

    def graph_supports(self) -> dict[str, torch.Tensor]:
        return {"intra": self.intra_support, "inter": self.inter_support}

    def regulariser(self, probs: dict[str, torch.Tensor]) -> torch.Tensor:
        if int(self.stage) != EDGES or self.config.rank_weight == 0:
            return torch.zeros(())
        supports = self.supports()
        return self.config.rank_weight * sum(
            nuclear_norm(p[0], supports[k]) for k, p in probs.items()
        )

    def layout(self, edges: dict[str, np.ndarray]) -> EpisodeGraph:
        return EpisodeGraph(
            spatial=edges["intra"].astype(bool),
            temporal=edges["inter"].astype(bool),
            active=self.active.cpu().numpy().copy(),
        )

    def frozen(self) -> bool:
        return int(self.stage) == DONE

    def contributions(self) -> torch.Tensor:
        """``(R, N)``: each agent's weighted degree (in + out) in each round's intra-round
        matrix, over the supported entries."""
        with torch.no_grad():
            a = torch.sigmoid(self.intra_logits) * self.intra_support
            return a.sum(dim=-1) + a.sum(dim=-2)

    def on_progress(self, done: int, total: int) -> Stage | None:
        if int(self.stage) != NODES or done < self.config.node_stage * total:
            return None
        return self.drop_nodes(done)

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
        """Step 2's end: each kind of edge loses its ``β`` share, lowest weight first."""
        events = []
        if int(self.stage) == NODES:
            events.append(self.drop_nodes(done).detail)
        if int(self.stage) != EDGES:
            return None
        with torch.no_grad():
            probs = self.edge_probs({}, 1)
            before = {k: int(s.sum()) for k, s in self.supports().items()}
            beta = self.config.edge_dropout
            self.intra_support.copy_(prune_lowest(probs["intra"][0], self.intra_support, beta))
            self.inter_support.copy_(prune_lowest(probs["inter"][0], self.inter_support, beta))
            self.stage.fill_(DONE)
        after = {k: int(s.sum()) for k, s in self.supports().items()}
        detail = {"edges_before": before, "edges_after": after}
        if events:
            detail["nodes"] = events[0]
        return Stage(done, "edges dropped", detail)
