"""A learned-topology method as an actor of the one rollout path (:mod:`core.qmix.runner`).

In the first round of a batch of episodes the actor reads each episode's task features
from its observation, asks the method for edge probabilities (one batched forward), and
samples (training) or decodes (evaluation) every episode's graphs at once; each round it
hands the runtime that round's :class:`~core.team.plan.RoundPlan` as the directive. What
it drew stays in :attr:`GraphPolicy.memory` so that the trainer can score it afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from core.baselines.method import GraphMethod
from core.baselines.plans import EpisodeGraph
from core.qmix.decisions import StepOutput
from core.team.observations import task_features


@dataclass
class EpisodeDraw:
    """What the actor drew for one episode: the edge tensors, the context they were drawn
    under (G-Designer's latent noise), the graphs, and the round to play next."""

    edges: dict[str, np.ndarray] = field(default_factory=dict)
    context: dict[str, np.ndarray] = field(default_factory=dict)
    features: np.ndarray | None = None
    """``(F,)`` the task features the episode was decided on."""
    graph: EpisodeGraph | None = None
    round: int = 0


class GraphPolicy:
    """The actor of a :class:`GraphMethod`: ``explore`` samples graphs (training), else the
    method's decode rule picks them (evaluation)."""

    def __init__(
        self,
        method: GraphMethod,
        explore: bool = False,
        generator: torch.Generator | None = None,
        label: str | None = None,
    ):
        self.method, self.explore, self.generator = method, explore, generator
        self.name = label or method.name
        self.memory: list[EpisodeDraw] = []

    def start(self, episodes: list[int]) -> list[EpisodeDraw]:
        self.memory = [EpisodeDraw() for _ in episodes]
        return self.memory

    @torch.no_grad()
    def act(
        self, obs: list[dict[str, np.ndarray]], memory: list[EpisodeDraw], explain: bool = False
    ) -> tuple[StepOutput, list[EpisodeDraw]]:
        fresh = [e for e, m in enumerate(memory) if m.graph is None]
        if fresh:
            self._draw([obs[e] for e in fresh], [memory[e] for e in fresh])
        plans = []
        for m in memory:
            plans.append(m.graph.plan(min(m.round, m.graph.spatial.shape[0] - 1)))
            m.round += 1
        actions = np.asarray([p.actions for p in plans], dtype=np.int64)
        return StepOutput(actions=actions, directives=plans), memory

    def _draw(self, obs: list[dict[str, np.ndarray]], slots: list[EpisodeDraw]) -> None:
        method = self.method
        shape = method.shape
        features = np.stack(
            [task_features(o["obs"], shape.n_agents, shape.n_rounds) for o in obs]
        ).astype(np.float32)
        context = method.context(torch.from_numpy(features), self.explore, self.generator)
        probs = method.edge_probs(context, len(slots))
        edges = method.decide(probs, self.explore, self.generator)
        for b, slot in enumerate(slots):
            slot.edges = {k: v[b].cpu().numpy() for k, v in edges.items()}
            slot.context = {k: v[b].cpu().numpy() for k, v in context.items()}
            slot.features = features[b]
            slot.graph = method.episode_graph(slot.edges)

    def graphs(self) -> list[EpisodeGraph]:
        """The graphs of the episodes last played."""
        return [m.graph for m in self.memory if m.graph is not None]


def stacked(
    draws: list[EpisodeDraw],
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], torch.Tensor]:
    """The draws of ``B`` episodes as batched tensors: ``(edges, context, features)``, the
    first two dicts of ``(B, ...)`` tensors (edges bool), features ``(B, F)``."""

    def stack(parts: list[dict[str, np.ndarray]]) -> dict[str, torch.Tensor]:
        keys = parts[0].keys() if parts else ()
        return {k: torch.from_numpy(np.stack([p[k] for p in parts])) for k in keys}

    features = torch.from_numpy(np.stack([d.features for d in draws]))
    return stack([d.edges for d in draws]), stack([d.context for d in draws]), features


def describe_graphs(graphs: list[EpisodeGraph]) -> dict[str, Any]:
    """Mean edges per round (spatial, temporal) and active agents over some episodes."""
    if not graphs:
        return {
            "spatial_edges": 0.0,
            "temporal_edges": 0.0,
            "active_agents": 0.0,
            "verifying_agents": 0.0,
        }
    parts = [g.density() for g in graphs]
    return {k: float(np.mean([p[k] for p in parts])) for k in parts[0]}
