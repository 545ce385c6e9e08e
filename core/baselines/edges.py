"""What the four learned-topology methods share: independent Bernoulli edges, the
score-function (REINFORCE) gradient with a baseline, the low-rank penalty and one-shot
pruning (docs/baselines.md, "The shared part").

Every method describes a team's graphs by a few *edge tensors* (a spatial matrix, a
temporal one, one per round...). An entry ``p[..., src, dst]`` is the probability that the
edge ``src -> dst`` is present (``dst`` reads ``src``, the project's convention); a boolean
``support`` of the same shape says which entries are random at all. Entries off the
support are absent (pruned, dropped, or a self-loop) and add nothing to the log-probability.

The gradient is GPTSwarm's estimator (arXiv 2402.16823, §2.3, the score-function
gradient of the expected utility over sampled graphs) with a leave-one-out baseline:

    ∇θ E[u(G)] ≈ 1/B Σ_b (u_b − ū_{−b}) ∇θ log p_θ(G_b),   ū_{−b} = mean of the other B−1

The baseline is our choice (GPTSwarm's paper writes the plain average of ``u_b ∇ log p``;
its released code subtracts the mean utility of every episode so far); it is unbiased
(each ``ū_{−b}`` is independent of ``G_b``) and removes most of the variance a 0/1
outcome brings. The tests check this estimator against a finite difference of the exact
expectation on a two-edge family.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch

EPS = 1e-6
"""Probabilities are clamped to ``[EPS, 1 − EPS]`` inside logarithms."""


def off_diagonal(n: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """``(n, n)`` bool: every ordered pair of distinct agents (no self-loops)."""
    return ~torch.eye(n, dtype=torch.bool, device=device)


def sample_edges(
    p: torch.Tensor, support: torch.Tensor, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Bernoulli(``p``) on the support, False elsewhere. Shapes: ``p (..., N, N)``,
    ``support`` broadcastable to it; returns bool of ``p``'s shape."""
    u = torch.rand(p.shape, generator=generator, device=p.device)
    return (u < p.detach()) & support


def threshold_edges(p: torch.Tensor, support: torch.Tensor, at: float = 0.5) -> torch.Tensor:
    """The most likely graph: every supported edge with ``p > at``."""
    return (p.detach() > at) & support


def log_prob(p: torch.Tensor, edges: torch.Tensor, support: torch.Tensor) -> torch.Tensor:
    """``log p(edges)`` under independent Bernoulli(``p``) on the support, summed over the
    last two dims. ``p (B, ..., N, N)`` with grad, ``edges`` bool of the same shape;
    returns ``(B, ...)``."""
    q = p.clamp(EPS, 1 - EPS)
    e = edges.to(q.dtype)
    terms = e * q.log() + (1 - e) * (1 - q).log()
    return (terms * support.to(q.dtype)).sum(dim=(-2, -1))


def reinforce_loss(log_probs: torch.Tensor, utility: torch.Tensor) -> torch.Tensor:
    """``−1/B Σ_b (u_b − ū_{−b}) log p(G_b)``: its gradient is the estimator of the module
    docstring. ``log_probs (B,)`` with grad (one graph per episode, all its random edges
    summed), ``utility (B,)``. With one episode the baseline is 0 (plain REINFORCE)."""
    b = utility.shape[0]
    if log_probs.shape != utility.shape:
        raise ValueError(f"log_probs {tuple(log_probs.shape)} vs utility {tuple(utility.shape)}")
    utility = utility.to(log_probs.dtype)
    baseline = (utility.sum() - utility) / (b - 1) if b > 1 else torch.zeros_like(utility)
    return -((utility - baseline).detach() * log_probs).mean()


def nuclear_norm(p: torch.Tensor, support: torch.Tensor) -> torch.Tensor:
    """``Σ ||P||_*`` over the matrices of ``p (..., N, N)`` with entries off the support
    zeroed: the convex surrogate of the rank that AgentPrune (arXiv 2410.02506) and
    AgentDropout (arXiv 2503.18891) penalise so that few "directions" of talk survive."""
    masked = p * support.to(p.dtype)
    return torch.linalg.matrix_norm(masked, ord="nuc").sum()


def prune_lowest(p: torch.Tensor, support: torch.Tensor, ratio: float) -> torch.Tensor:
    """One-shot magnitude pruning: the support without its ``round(ratio · |support|)``
    entries of lowest ``p`` (ties: the lower flat index first, so it is deterministic).
    Shapes: ``p`` and ``support`` alike; returns the new bool support."""
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"pruning ratio {ratio} is not in [0, 1]")
    flat_p, flat_s = p.detach().reshape(-1), support.reshape(-1)
    candidates = flat_s.nonzero().squeeze(-1)
    k = count(ratio, candidates.numel())
    keep = flat_s.clone()
    if k:
        order = sorted(candidates.tolist(), key=lambda i: (float(flat_p[i]), i))
        keep[order[:k]] = False
    return keep.reshape(support.shape)


def count(ratio: float, n: int) -> int:
    """How many of ``n`` a ratio removes: ``round(ratio · n)`` (half away from zero, not
    Python's banker's rounding, so 0.5 of 3 is 2)."""
    return min(n, int(math.floor(ratio * n + 0.5)))


def total_log_prob(
    probs: Mapping[str, torch.Tensor],
    edges: Mapping[str, torch.Tensor],
    supports: Mapping[str, torch.Tensor],
) -> torch.Tensor:
    """The log-probability of whole sampled graphs: :func:`log_prob` of every named edge
    tensor, summed down to ``(B,)``."""
    total = None
    for name, p in probs.items():
        lp = log_prob(p, edges[name], supports[name])
        lp = lp.reshape(lp.shape[0], -1).sum(-1)
        total = lp if total is None else total + lp
    if total is None:
        raise ValueError("no edge tensors")
    return total


def steps_due(done: int, total: int, steps: int) -> int:
    """How many of ``steps`` pruning steps spread evenly over a budget of ``total`` are due
    after ``done``: step ``k`` (1-based) at ``k/steps`` of the budget, the last one only
    when training ends (so at most ``steps − 1`` before). AgentPrune's released schedule —
    10 iterations, pruning every 5 — is ``steps = 2``: half way, and at the end."""
    if total <= 0:
        return 0
    return min(steps - 1, (done * steps) // total)
