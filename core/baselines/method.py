"""The contract every learned-topology method fulfils, and the team facts it is built for.

A method is a small ``torch.nn.Module`` whose parameters (and buffers: pruned supports,
dropped nodes, stage flags) *are* its learned topology. It turns a batch of episodes'
contexts (the task's features; G-Designer's latent noise) into edge probabilities, says
which entries are random (its *supports*), lays a sampled edge set out as the graphs of
one episode (:class:`~core.baselines.plans.EpisodeGraph`), adds its regulariser to the
loss, and changes stage as training goes (AgentPrune prunes, AgentDropout drops nodes,
then edges). :mod:`core.baselines.training` trains any of them the same way.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from core.baselines.edges import sample_edges, threshold_edges, total_log_prob
from core.baselines.plans import EpisodeGraph

VERIFY = "verify"
"""The key of the verify bits ``(B, R, N)`` among a method's edge tensors (``tools``)."""
DECODES = ("threshold", "sample", "mask")
"""How a trained method picks its graph when it is evaluated: ``threshold`` keeps the
supported edges with probability > 0.5 (the most likely graph), ``sample`` draws them,
``mask`` keeps every supported edge (the pruned graph as a fixed topology)."""


@dataclass(frozen=True)
class TeamShape:
    """What a method needs to know of the team it learns a topology for."""

    n_agents: int
    n_rounds: int
    feature_width: int
    """Width of the task features a policy reads from each observation (the task's
    embedding, text statistics and domain; :func:`core.team.observations.task_features`)."""
    roles: tuple[str, ...] = ()

    def validate(self) -> None:
        if self.n_agents < 1 or self.n_rounds < 1 or self.feature_width < 1:
            raise ValueError(f"not a team shape: {self}")
        if self.roles and len(self.roles) != self.n_agents:
            raise ValueError(f"{len(self.roles)} roles for {self.n_agents} agents")

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)} | {"roles": list(self.roles)}


@dataclass
class MethodConfig:
    """Fields every method has; each method's config adds its own."""

    learning_rate: float = 0.1
    """Adam's step size on the edge parameters."""
    decode: str = "threshold"
    """How the trained method picks its graph when evaluated (:data:`DECODES`)."""
    tools: bool = False
    """The with-tools protocol (our extension, docs/baselines.md "Protocols"): besides its
    graph the method learns a verify bit per agent and round, a Bernoulli variable trained
    by the same REINFORCE step as its edges; an agent whose bit is set takes
    ``execute_verify`` that round. False: the method as published (graphs only)."""
    decodes: ClassVar[tuple[str, ...]] = DECODES

    def validate(self) -> None:
        if not (self.learning_rate > 0 and np.isfinite(self.learning_rate)):
            raise ValueError(f"learning_rate = {self.learning_rate} must be a finite number > 0")
        if self.decode not in self.decodes:
            raise ValueError(f"decode = {self.decode!r} is not one of {', '.join(self.decodes)}")

    @staticmethod
    def check_ratio(name: str, value: float, top: float = 1.0) -> None:
        if not 0.0 <= value <= top:
            raise ValueError(f"{name} = {value} is not in [0, {top:g}]")

    @staticmethod
    def check_weight(name: str, value: float) -> None:
        """A regulariser's weight: finite and >= 0."""
        if not (value >= 0 and math.isfinite(value)):
            raise ValueError(f"{name} = {value} must be a finite number >= 0")

    @staticmethod
    def check_probability(name: str, value: float) -> None:
        """A starting probability: strictly inside (0, 1), so its logit is finite."""
        if not 0.0 < value < 1.0:
            raise ValueError(f"{name} = {value} is not in (0, 1)")

    @staticmethod
    def check_steps(name: str, value: int) -> None:
        if not (isinstance(value, int) and 1 <= value <= 100):
            raise ValueError(f"{name} = {value} is not a whole number between 1 and 100")


@dataclass
class Stage:
    """What happened at a stage change, for the run's log and the checkpoint's meta."""

    episode: int
    what: str
    detail: dict[str, Any] = field(default_factory=dict)


class GraphMethod(nn.Module, ABC):
    """Base of the four methods. Subclasses set the class attributes and define the
    abstract methods (a subclass missing one cannot be built)."""

    name: ClassVar[str] = ""
    config_class: ClassVar[type[MethodConfig]] = MethodConfig
    knob: ClassVar[str | None] = None
    """The config field a sweep varies besides the token weight (None: only the weight)."""
    paper: ClassVar[str] = ""
    """arXiv id of the method's paper."""

    def __init__(self, config: MethodConfig, shape: TeamShape):
        super().__init__()
        config.validate()
        shape.validate()
        self.config, self.shape = config, shape
        self.n, self.rounds = shape.n_agents, shape.n_rounds
        if config.tools:
            # Every bit starts at p = 0.5, like every edge: the uniform start.
            self.verify_logits = nn.Parameter(torch.zeros(self.rounds, self.n))

    # -- what a subclass defines ------------------------------------------------------

    @abstractmethod
    def graph_probs(self, context: dict[str, torch.Tensor], batch: int) -> dict[str, torch.Tensor]:
        """Edge probabilities per named edge tensor, ``(batch, *shape)``, with grad."""

    @abstractmethod
    def graph_supports(self) -> dict[str, torch.Tensor]:
        """Per named edge tensor, the bool ``(*shape)`` of entries that can be present."""

    @abstractmethod
    def layout(self, edges: dict[str, np.ndarray]) -> EpisodeGraph:
        """One episode's graphs from its edge tensors (``(*shape)`` bool each)."""

    def verify_probs(self, context: dict[str, torch.Tensor], batch: int) -> torch.Tensor:
        """``(batch, R, N)``: the probability that agent ``i`` verifies in round ``r``
        (``tools`` only). One logit per agent and round; G-Designer decodes them from the
        query's latents instead."""
        return torch.sigmoid(self.verify_logits).expand(batch, self.rounds, self.n)

    # -- the graph and, with tools, the verify bits -------------------------------------

    def edge_probs(self, context: dict[str, torch.Tensor], batch: int) -> dict[str, torch.Tensor]:
        """:meth:`graph_probs` plus, with ``tools``, the verify bits under :data:`VERIFY`."""
        probs = self.graph_probs(context, batch)
        if self.config.tools:
            probs[VERIFY] = self.verify_probs(context, batch)
        return probs

    def supports(self) -> dict[str, torch.Tensor]:
        """:meth:`graph_supports` plus, with ``tools``, every verify bit (always random)."""
        supports = self.graph_supports()
        if self.config.tools:
            supports[VERIFY] = torch.ones(self.rounds, self.n, dtype=torch.bool)
        return supports

    def episode_graph(self, edges: dict[str, np.ndarray]) -> EpisodeGraph:
        """One episode's graphs (:meth:`layout`) with its verify bits, if any."""
        graph = self.layout(edges)
        if VERIFY in edges:
            graph.verify = edges[VERIFY].astype(bool)
        return graph

    def log_prob(
        self, probs: dict[str, torch.Tensor], edges: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        """``(B,)``: the log-probability the REINFORCE step weighs by each episode's
        advantage — by default that of the sampled graphs (AgentDropout's skip sampling
        replaces it by the released surrogate)."""
        return total_log_prob(probs, edges, self.supports())

    def regulariser(self, probs: dict[str, torch.Tensor]) -> torch.Tensor:
        """Added to the REINFORCE loss (a low-rank or sparsity penalty); default none."""
        return torch.zeros(())

    def context(
        self, features: torch.Tensor, explore: bool, generator: torch.Generator | None
    ) -> dict[str, torch.Tensor]:
        """Per-episode inputs of :meth:`edge_probs` from the task features ``(B, F)``;
        methods whose graph ignores the task keep none."""
        return {}

    def on_progress(self, done: int, total: int) -> Stage | None:
        """Called before each training batch (``done`` of ``total`` episodes played): the
        place for a stage change. Returns what changed, if anything."""
        return None

    def finish(self, done: int) -> Stage | None:
        """Called once when training ends (AgentPrune's one-shot pruning, AgentDropout's
        edge dropout)."""
        return None

    # -- shared ---------------------------------------------------------------------

    @property
    def trainable(self) -> bool:
        """Whether any edge is still random (after the last pruning step nothing is)."""
        return any(bool(s.any()) for s in self.supports().values()) and not self.frozen()

    def frozen(self) -> bool:
        """True once the method's topology is final (pruned / dropped); default never."""
        return False

    def decide(
        self,
        probs: dict[str, torch.Tensor],
        explore: bool,
        generator: torch.Generator | None,
    ) -> dict[str, torch.Tensor]:
        """Edge sets ``(B, *shape)`` bool: sampled while training (``explore``), else as
        :attr:`MethodConfig.decode` says."""
        supports = self.supports()
        mode = "sample" if explore else self.config.decode
        out = {}
        for key, p in probs.items():
            support = supports[key].expand_as(p)
            if mode == "sample":
                out[key] = sample_edges(p, support, generator)
            elif mode == "threshold" or key == VERIFY:  # ``mask`` would verify everywhere
                out[key] = threshold_edges(p, support)
            else:
                out[key] = support.clone()
        return out

    def knob_value(self) -> float | None:
        return None if self.knob is None else float(getattr(self.config, self.knob))

    def summary(self) -> dict[str, Any]:
        """The learned topology in plain numbers: every edge probability and support (for
        the docs, the lab and the checkpoint's meta)."""
        probs = self.edge_probs(self.context(self._zero_features(), False, None), 1)
        supports = self.supports()
        return {
            key: {
                "probability": np.round(p[0].detach().cpu().numpy(), 4).tolist(),
                "support": supports[key].cpu().numpy().tolist(),
            }
            for key, p in probs.items()
        }

    def _zero_features(self) -> torch.Tensor:
        return torch.zeros(1, self.shape.feature_width)
