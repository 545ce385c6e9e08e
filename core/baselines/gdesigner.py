"""G-Designer (Zhang et al., 2024, arXiv 2410.11782, ICML 2025): a communication graph
designed per query by a variational graph auto-encoder.

The paper builds a *multi-agent network*: one node per agent, its features the text
embedding of the agent's profile (role, backbone, tools), plus a virtual *task node*
whose features are the query's embedding, linked to every agent, over an *anchor*
topology. A VGAE encoder (graph convolutions) gives every agent a Gaussian latent
``q(z_i | X, A) = N(μ_i, σ_i²)``; the decoder scores every ordered pair of agents from
their latents and yields the query's communication topology; training maximises the
utility of the sampled topologies with the policy gradient, regularised towards the
anchor and towards a sparse graph (the sparsity weight is its knob).

Mapping onto this runtime (docs/baselines.md):

* agent features: the embedding (the environment's embedder: ``hash``, or ``minilm`` —
  all-MiniLM-L6-v2, the paper's kind of encoder) of the agent's role prompt
  (:func:`core.backends.prompts.role_prompt`), plus a learned identity vector so two
  agents with one role can differ, plus the query's projection (as released, where each
  agent's profile is concatenated with the query);
* task node: the task features every policy in the lab observes (the task embedding —
  hashed word n-grams on the simulator by default, a documented stand-in for a sentence
  encoder — its text statistics and domain);
* encoder: two graph convolutions ``μ = Â tanh(Â X W1) W_μ + tanh(X) W_s`` and ``log σ =
  Â tanh(Â X W1) W_σ`` with ``Â`` the symmetrically normalised anchor + task-node
  adjacency with self-loops (dense: a team is a handful of nodes); the skip ``tanh(X) W_s``
  is ours (without it the averaging over five nodes made every agent's latent alike, so
  every edge moved together; its ``tanh`` lets an agent's profile and the query interact,
  as the released code's MLP after its GCN does); ``z = μ + σ ε`` while training, ``z = μ``
  when evaluated;
* decoder: scores ``s_ij = z_i^T W z_j`` for ``i ≠ j`` (directed: ``W`` starts at the identity,
  the released inner product ``z z^T``, and may become asymmetric). ``decoder = released``
  (default): as the released code, the query's scores are min-max normalised to [−1, 1]
  and ``p_ij = σ(ŝ_ij / T)``, so every query's graph is its own ranking of the pairs (p in
  [0.27, 0.73] at T = 1); as released the range spans the diagonal too (an agent's score
  with itself, the maximum while ``W`` is the identity), so no pair need reach 0.73 and the
  empty graph can be played (``minmax_diagonal=false``: the off-diagonal pairs only); ``bilinear`` (the earlier reading): ``p_ij = σ(6 tanh((s_ij +
  b) / 6))``, absolute logits — which in the contest drove every edge of every query to
  the −6 bound (p ≈ 0.0025), one empty graph for all queries (docs/baselines.md);
* loss: REINFORCE on the episode reward (utility − cost: ``score − w_tok · token
  penalty``) with the leave-one-out baseline, sampled latents re-used for the log-
  probability (reparameterised), plus ``ζ ||P||_*`` (sparsity weight ζ), the anchor term
  ``λ_a · BCE(P, A_anchor)`` and the VGAE's ``λ_kl · KL(q(z) || N(0, I))``;
* one topology per episode, played in every round (spatial edges only).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from core.backends.prompts import role_prompt
from core.baselines.edges import nuclear_norm, off_diagonal
from core.baselines.method import GraphMethod, MethodConfig, TeamShape
from core.baselines.plans import EpisodeGraph
from core.team.observations import TASK_EXTRA

LOGIT_BOUND = 6.0
"""Decoded logits are soft-bounded to ±6 (p in [0.0025, 0.9975])."""
ANCHORS = ("chain", "star", "full", "none")
DECODERS = ("released", "bilinear")
"""How latents become edge probabilities (:attr:`GDesignerConfig.decoder`)."""
"""Anchor topologies among the agents (``none``: the task node alone links them)."""


def anchor_adjacency(name: str, n: int) -> torch.Tensor:
    """``(N, N)`` float 0/1, ``[src, dst]``: chain 0→1→…, star spokes → 0, full, none."""
    a = torch.zeros(n, n)
    if name == "chain":
        for i in range(n - 1):
            a[i, i + 1] = 1.0
    elif name == "star":
        a[1:, 0] = 1.0
    elif name == "full":
        a = off_diagonal(n).float()
    elif name != "none":
        raise ValueError(f"anchor = {name!r} is not one of {', '.join(ANCHORS)}")
    return a


@dataclass
class GDesignerConfig(MethodConfig):
    """G-Designer's network and regularisers."""

    learning_rate: float = 0.01
    hidden: int = 32
    """Width of the graph convolutions."""
    latent: int = 16
    """Width of each agent's latent ``z``."""
    sparsity_weight: float = 0.01
    """ζ: weight of the nuclear-norm sparsity penalty on the decoded probabilities."""
    anchor: str = "full"
    """Anchor topology: the encoder's adjacency and the anchor term's target. Released code:
    a hand-written role-connection list per domain, which our roles lack; ``full`` (every
    pair) is the nearest for a team of four."""
    anchor_weight: float = 0.0
    """λ_a: weight of the paper's anchor term (BCE of the decoded probabilities to the
    anchor); the released code has none (0)."""
    kl_weight: float = 0.001
    """λ_kl: weight of the VGAE's KL term."""
    init_log_std: float = -2.0
    """``log σ`` of every latent at the start (the bias of the ``log σ`` head)."""
    decoder: str = "released"
    """``released``: each query's pair scores min-max normalised to [−1, 1], then ``σ(· /
    temperature)`` (the released code; the graph is the query's ranking of the pairs);
    ``bilinear``: ``σ(6 tanh((z_i^T W z_j + b) / 6))`` (absolute logits, the earlier reading)."""
    temperature: float = 1.0
    """T of the released decoder (released: 1, "must be >= 1")."""
    minmax_diagonal: bool = True
    """Released decoder: the query's min-max spans the diagonal too (an agent with itself,
    never an edge), as released — with ``W`` the identity the diagonal holds the maximum, so
    no pair need reach p = 0.73 and the empty graph can be played. Off: the off-diagonal
    pairs only (the top pair always at 0.73), the reading under which the tests' per-query
    family is solved (docs/baselines.md)."""
    decodes: ClassVar[tuple[str, ...]] = ("threshold", "sample")

    def validate(self) -> None:
        super().validate()
        for name in ("hidden", "latent"):
            value = getattr(self, name)
            if not (isinstance(value, int) and 1 <= value <= 4096):
                raise ValueError(f"{name} = {value} is not a width between 1 and 4096")
        for name in ("sparsity_weight", "anchor_weight", "kl_weight"):
            self.check_weight(name, getattr(self, name))
        if not -10.0 <= self.init_log_std <= 2.0:
            raise ValueError(f"init_log_std = {self.init_log_std} is not in [-10, 2]")
        if self.decoder not in DECODERS:
            raise ValueError(f"decoder = {self.decoder!r} is not one of {', '.join(DECODERS)}")
        if not (np.isfinite(self.temperature) and self.temperature >= 1.0):
            raise ValueError(f"temperature = {self.temperature} is not a number >= 1")
        if self.anchor not in ANCHORS:
            raise ValueError(f"anchor = {self.anchor!r} is not one of {', '.join(ANCHORS)}")


class GDesigner(GraphMethod):
    """VGAE over ``N`` agent nodes and one task node. Buffers: the agents' profile
    embeddings ``(N, E)`` (:func:`role_profiles`), the normalised encoder adjacency
    ``(N+1, N+1)``, the anchor ``(N, N)``."""

    name = "gdesigner"
    config_class = GDesignerConfig
    knob = "sparsity_weight"
    paper = "2410.11782"

    def __init__(
        self, config: GDesignerConfig, shape: TeamShape, profiles: np.ndarray | None = None
    ):
        super().__init__(config, shape)
        n, h, z = self.n, config.hidden, config.latent
        width = shape.feature_width - TASK_EXTRA  # a profile is embedded like the task
        profiles = np.zeros((n, width), dtype=np.float32) if profiles is None else profiles
        if profiles.shape != (n, width):
            raise ValueError(f"profiles {profiles.shape} for {n} agents of width {width}")
        self.register_buffer("profiles", torch.as_tensor(profiles, dtype=torch.float32))
        anchor = anchor_adjacency(config.anchor, n)
        self.register_buffer("anchor", anchor)
        self.register_buffer("adjacency", _normalised(anchor))
        self.agent_in = nn.Linear(width, h)
        self.identity = nn.Parameter(torch.randn(n, h))
        self.task_in = nn.Linear(shape.feature_width, h)
        self.conv = nn.Linear(h, h)
        self.conv_mu = nn.Linear(h, z)
        self.conv_logstd = nn.Linear(h, z)
        self.skip = nn.Linear(h, z, bias=False)
        # σ starts at e^-2: with σ = 1 the latent noise swamped the decoded logits and the
        # policy gradient could not even learn to drop costly edges; with e^-3 too little
        # exploration was left to find a graph that only pays when three edges are present
        # together (docs/baselines.md).
        nn.init.constant_(self.conv_logstd.bias, config.init_log_std)
        # Released: the identity (the inner product z z^T), learned so edges can be directed.
        # Bilinear: zero, so every edge starts at p = 0.5 (the other methods' start); a random
        # decoder started some seeds' needed edges at p ≈ 0.2 and the graph collapsed to none.
        start = torch.eye(z) if config.decoder == "released" else torch.zeros(z, z)
        self.decoder = nn.Parameter(start)
        self.bias = nn.Parameter(torch.zeros(()))
        self.register_buffer("support", off_diagonal(n))
        if config.tools:
            # With tools the verify bits are decoded from each agent's latent, so they too are
            # designed per query, on top of the base's per-agent logits (the latents of
            # agents alike are alike: without them one agent's bit dragged the others');
            # zero so every bit starts at p = 0.5.
            self.verify_head = nn.Linear(z, self.rounds)
            nn.init.zeros_(self.verify_head.weight)
            nn.init.zeros_(self.verify_head.bias)
        self._kl: torch.Tensor | None = None
        self._z: torch.Tensor | None = None

    def context(
        self, features: torch.Tensor, explore: bool, generator: torch.Generator | None
    ) -> dict[str, torch.Tensor]:
        """``task (B, F)``; ``noise (B, N, latent)``: ε while training, zeros (``z = μ``)
        when evaluated."""
        b = features.shape[0]
        shape = (b, self.n, self.config.latent)
        noise = torch.randn(shape, generator=generator) if explore else torch.zeros(shape)
        return {"task": features.float(), "noise": noise}

    def encode(self, task: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``task (B, F)`` -> ``μ, log σ`` of the agents, ``(B, N, latent)`` each."""
        agents = self.agent_in(self.profiles) + self.identity  # (N, H)
        query = self.task_in(task).unsqueeze(1)  # (B, 1, H)
        # As released, every agent's features carry the query too (its profile concatenated
        # with the query; a linear layer of a concatenation is this sum), besides the task
        # node: the query then reaches each agent's latent through its own features.
        nodes = torch.cat([agents + query, query], dim=1)  # (B, N+1, H)
        hidden = torch.tanh(self.adjacency @ self.conv(nodes))
        # The skip keeps each agent's own features: two averaging convolutions over a graph
        # of five nodes leave the agents' latents nearly equal (and every edge alike). Its
        # tanh lets agent and query interact per agent (the released code's MLP).
        mu = (self.adjacency @ self.conv_mu(hidden) + self.skip(torch.tanh(nodes)))[:, : self.n]
        logstd = (self.adjacency @ self.conv_logstd(hidden))[:, : self.n].clamp(-6.0, 2.0)
        return mu, logstd

    def graph_probs(self, context: dict[str, torch.Tensor], batch: int) -> dict[str, torch.Tensor]:
        task = context["task"]
        mu, logstd = self.encode(task)
        z = mu + logstd.exp() * context["noise"]
        self._z = z
        raw = z @ self.decoder @ z.transpose(1, 2)  # (B, N, N)
        if self.config.decoder == "released":
            span = torch.ones_like(self.support) if self.config.minmax_diagonal else self.support
            logits = _min_max(raw, span) / self.config.temperature
        else:
            # Soft-bounded to ±LOGIT_BOUND: a saturated edge (p = 0 or 1) would stop learning.
            logits = LOGIT_BOUND * torch.tanh((raw + self.bias) / LOGIT_BOUND)
        # KL(q(z) || N(0, I)) per episode, kept for the regulariser of this forward.
        self._kl = 0.5 * (mu.pow(2) + (2 * logstd).exp() - 2 * logstd - 1).sum(dim=(1, 2))
        return {"spatial": torch.sigmoid(logits)}

    def verify_probs(self, context: dict[str, torch.Tensor], batch: int) -> torch.Tensor:
        """``(B, R, N)`` from the latents of this forward's :meth:`graph_probs`."""
        return torch.sigmoid(self.verify_head(self._z).transpose(1, 2) + self.verify_logits)

    def graph_supports(self) -> dict[str, torch.Tensor]:
        return {"spatial": self.support}

    def regulariser(self, probs: dict[str, torch.Tensor]) -> torch.Tensor:
        c = self.config
        p = probs["spatial"]
        loss = c.sparsity_weight * nuclear_norm(p, self.support) / p.shape[0]
        if c.anchor_weight:
            target = self.anchor.expand_as(p)
            bce = F.binary_cross_entropy(p.clamp(1e-6, 1 - 1e-6), target, reduction="none")
            loss = loss + c.anchor_weight * (bce * self.support).sum(dim=(1, 2)).mean()
        if c.kl_weight and self._kl is not None:
            loss = loss + c.kl_weight * self._kl.mean()
        return loss

    def layout(self, edges: dict[str, np.ndarray]) -> EpisodeGraph:
        return EpisodeGraph.repeated(edges["spatial"], self.rounds)


def role_profiles(roles: tuple[str, ...], embed: Callable[[str], np.ndarray]) -> np.ndarray:
    """``(N, E)``: each agent's profile — its role prompt, as the back-ends send it —
    embedded by the team's task embedder."""
    return np.stack([embed(role_prompt(role)) for role in roles]).astype(np.float32)


def _min_max(raw: torch.Tensor, support: torch.Tensor) -> torch.Tensor:
    """``raw (B, N, N)`` rescaled per episode so that the entries of ``support (N, N)``
    span [−1, 1] (the released code's ``min_max_norm``: over every entry, the diagonal
    included, with an all-ones support). A query whose scores are all equal maps to 0
    (p = 0.5)."""
    mask = support.bool().expand_as(raw)
    big = torch.finfo(raw.dtype).max
    low = raw.masked_fill(~mask, big).amin(dim=(1, 2), keepdim=True)
    high = raw.masked_fill(~mask, -big).amax(dim=(1, 2), keepdim=True)
    span = high - low
    scaled = 2 * (raw - low) / span.clamp_min(1e-8) - 1
    return torch.where(span > 1e-8, scaled, torch.zeros_like(raw))


def _normalised(anchor: torch.Tensor) -> torch.Tensor:
    """``D^-1/2 (A + I) D^-1/2`` of the undirected anchor among the agents plus a task node
    linked to every agent: ``(N+1, N+1)``."""
    n = anchor.shape[0]
    a = torch.zeros(n + 1, n + 1)
    a[:n, :n] = ((anchor + anchor.t()) > 0).float()
    a[n, :n] = a[:n, n] = 1.0
    a = a + torch.eye(n + 1)
    d = a.sum(dim=1).rsqrt()
    return d[:, None] * a * d[None, :]
