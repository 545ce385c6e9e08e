"""GPTSwarm's edge optimiser (Zhuge et al., 2024, arXiv 2402.16823, §2.3 "Edge
optimization"): one edge-probability matrix for the whole task family.

The paper relaxes the choice of a graph to a distribution over graphs: every potential
edge ``e`` is present independently with probability ``p_e = σ(θ_e)`` (§2.3.2, the
parameterisation), and the expected utility ``E_{G ~ p_θ}[u(G)]`` is maximised with the
score-function gradient ``1/M Σ_i u(G_i) ∇θ log p_θ(G_i)`` over ``M`` sampled graphs
(§2.3.3), by a first-order optimiser. After optimisation the graph kept is the most
likely one (every edge with ``p_e > 0.5``) or a sample.

Choices where the paper is silent or differs from this runtime (docs/baselines.md):

* potential edges: every ordered pair of the ``N`` agents (the paper's composite graph
  connects the agents' output nodes); the runtime breaks cycles by its one rule, so the
  estimator is of ``E[u(resolve(G))]``, still unbiased;
* rounds: one graph is sampled per episode and played in every round (the paper runs one
  DAG per query; here the runtime's rounds repeat it, each agent remembering its own last
  answer);
* utility: the episode's reward, ``score − w_tok · token penalty`` — with ``--token-weight
  0`` exactly the paper's accuracy utility;
* baseline: leave-one-out batch mean (:func:`core.baselines.edges.reinforce_loss`) after a
  task regression (the released code subtracts the running mean of all utilities so far);
* start: every edge at ``init_probability`` (0.5: the paper's uniform start).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
from torch import nn

from core.baselines.edges import off_diagonal
from core.baselines.method import GraphMethod, MethodConfig, TeamShape
from core.baselines.plans import EpisodeGraph


@dataclass
class GPTSwarmConfig(MethodConfig):
    """GPTSwarm's edge optimiser."""

    init_probability: float = 0.5
    """Starting probability of every potential edge."""
    decodes: ClassVar[tuple[str, ...]] = ("threshold", "sample")

    def validate(self) -> None:
        super().validate()
        if not 0.0 < self.init_probability < 1.0:
            raise ValueError(f"init_probability = {self.init_probability} is not in (0, 1)")


class GPTSwarm(GraphMethod):
    """``θ (N, N)``: one logit per ordered pair of agents."""

    name = "gptswarm"
    config_class = GPTSwarmConfig
    paper = "2402.16823"

    def __init__(self, config: GPTSwarmConfig, shape: TeamShape):
        super().__init__(config, shape)
        start = math.log(config.init_probability / (1 - config.init_probability))
        self.logits = nn.Parameter(torch.full((self.n, self.n), start))
        self.register_buffer("support", off_diagonal(self.n))

    def graph_probs(self, context: dict[str, torch.Tensor], batch: int) -> dict[str, torch.Tensor]:
        return {"spatial": torch.sigmoid(self.logits).expand(batch, self.n, self.n)}

    def graph_supports(self) -> dict[str, torch.Tensor]:
        return {"spatial": self.support}

    def layout(self, edges: dict[str, np.ndarray]) -> EpisodeGraph:
        return EpisodeGraph.repeated(edges["spatial"], self.rounds)
