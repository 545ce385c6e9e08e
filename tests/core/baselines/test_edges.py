"""The shared part: Bernoulli edges, the REINFORCE gradient (against a finite difference of
the exact expectation on a two-edge family), the low-rank penalty, pruning, and plans."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from core.actions import Action
from core.baselines.edges import (
    count,
    log_prob,
    nuclear_norm,
    off_diagonal,
    prune_lowest,
    reinforce_loss,
    sample_edges,
)
from core.baselines.plans import EpisodeGraph

# Two edges of a 2-agent team: 0 -> 1 and 1 -> 0, with a utility for each of the 4 graphs.
SUPPORT = off_diagonal(2)
UTILITY = {(0, 0): 0.1, (1, 0): 0.9, (0, 1): -0.3, (1, 1): 0.4}
"""u(e01, e10)."""


def exact_utility(theta: np.ndarray) -> float:
    """E[u(G)] by enumeration, ``theta (2,)`` = logits of edges 0->1 and 1->0."""
    p = 1 / (1 + np.exp(-theta))
    total = 0.0
    for e01, e10 in itertools.product((0, 1), repeat=2):
        prob = (p[0] if e01 else 1 - p[0]) * (p[1] if e10 else 1 - p[1])
        total += prob * UTILITY[(e01, e10)]
    return total


def finite_difference(theta: np.ndarray, h: float = 1e-5) -> np.ndarray:
    grad = np.zeros(2)
    for k in range(2):
        step = np.zeros(2)
        step[k] = h
        grad[k] = (exact_utility(theta + step) - exact_utility(theta - step)) / (2 * h)
    return grad


def logits_matrix(theta: torch.Tensor) -> torch.Tensor:
    m = torch.zeros(2, 2, dtype=theta.dtype)
    return m.index_put((torch.tensor([0, 1]), torch.tensor([1, 0])), theta)


@pytest.mark.parametrize("theta", [(0.0, 0.0), (1.2, -0.7), (-2.0, 0.5)])
def test_score_function_expectation_equals_the_finite_difference(theta):
    """Σ_G p(G) u(G) ∇ log p(G), enumerated exactly with :func:`log_prob`, is ∇ E[u]."""
    th = torch.tensor(theta, dtype=torch.float64, requires_grad=True)
    p = torch.sigmoid(logits_matrix(th))
    expected = torch.zeros((), dtype=torch.float64)
    for e01, e10 in itertools.product((0, 1), repeat=2):
        edges = torch.tensor([[False, bool(e01)], [bool(e10), False]])
        lp = log_prob(p, edges, SUPPORT)
        expected = expected + lp.exp().detach() * UTILITY[(e01, e10)] * lp
    (grad,) = torch.autograd.grad(expected, th)
    assert np.allclose(grad.numpy(), finite_difference(np.array(theta)), atol=1e-7)


@pytest.mark.parametrize("theta", [(0.0, 0.0), (1.2, -0.7)])
def test_reinforce_estimator_with_its_baseline_matches_the_finite_difference(theta):
    """The training loss's gradient (leave-one-out baseline, batches of 16) averages to the
    exact gradient: within 4 standard errors over 400 batches."""
    generator = torch.Generator().manual_seed(7)
    th = torch.tensor(theta, dtype=torch.float64, requires_grad=True)
    grads = []
    for _ in range(400):
        p = torch.sigmoid(logits_matrix(th)).expand(16, 2, 2)
        edges = sample_edges(p, SUPPORT, generator)
        u = torch.tensor(
            [UTILITY[(int(e[0, 1]), int(e[1, 0]))] for e in edges], dtype=torch.float64
        )
        loss = reinforce_loss(log_prob(p, edges, SUPPORT), u)
        (g,) = torch.autograd.grad(loss, th)
        grads.append(-g.numpy())  # the loss descends; the estimate ascends E[u]
    grads = np.array(grads)
    mean, se = grads.mean(0), grads.std(0, ddof=1) / np.sqrt(len(grads))
    exact = finite_difference(np.array(theta))
    assert np.all(np.abs(mean - exact) < 4 * se + 1e-9), (mean, exact, se)
    assert np.all(se < 0.25 * np.abs(exact) + 0.01)  # precise enough to mean something


def test_reinforce_loss_rejects_mismatched_shapes():
    with pytest.raises(ValueError):
        reinforce_loss(torch.zeros(3), torch.zeros(4))


def test_nuclear_norm_is_the_sum_of_singular_values_on_the_support():
    p = torch.tensor([[0.0, 0.8, 0.2], [0.5, 0.0, 0.9], [0.1, 0.3, 0.0]])
    support = off_diagonal(3)
    want = np.linalg.svd(p.numpy(), compute_uv=False).sum()
    assert float(nuclear_norm(p, support)) == pytest.approx(want, rel=1e-5)
    # Entries off the support do not count.
    assert float(nuclear_norm(p + torch.eye(3), support)) == pytest.approx(want, rel=1e-5)


def test_pruning_removes_the_lowest_share_of_the_support_only():
    p = torch.tensor([[0.0, 0.9, 0.1], [0.2, 0.0, 0.8], [0.3, 0.05, 0.0]])
    support = off_diagonal(3)
    support[2, 1] = False  # already gone: not counted, not removed again
    kept = prune_lowest(p, support, 0.4)  # round(0.4 * 5) = 2 of the 5 left
    assert kept.sum() == 3
    assert not kept[0, 2] and not kept[1, 0] and kept[0, 1] and kept[1, 2] and kept[2, 0]
    assert count(0.5, 3) == 2 and count(0.25, 4) == 1 and count(0.0, 4) == 0


def test_an_episode_graph_makes_plans_the_runtime_reads():
    n, rounds = 4, 3
    spatial = np.zeros((n, n), dtype=bool)
    spatial[1, 0] = spatial[2, 0] = spatial[3, 1] = True  # 0 reads two, 1 reads one
    temporal = np.zeros((n, n), dtype=bool)
    temporal[0, 2] = True
    graph = EpisodeGraph.repeated(spatial, rounds, temporal)
    graph.active[1, 3] = False  # agent 3 sits out round 1
    first = graph.plan(0)
    assert first.actions == [
        int(Action.AGGREGATE_REFINE), int(Action.SELECTIVE_QUERY), int(Action.SOLO_PROCESS),
        int(Action.SOLO_PROCESS),
    ]  # fmt: skip
    assert sorted(first.edges) == [(1, 0), (2, 0), (3, 1)]
    assert first.temporal is None and first.active is None  # no round before round 0
    second = graph.plan(1)
    # 3 is inactive: its edge to 1 goes, so 1 reads nobody; 2 reads 0's last answer.
    assert sorted(second.edges) == [(1, 0), (2, 0)]
    assert second.actions[1] == int(Action.SOLO_PROCESS)
    assert second.actions[2] == int(Action.SELECTIVE_QUERY)
    assert second.temporal == [(0, 2)] and second.active == [True, True, True, False]
    assert graph.density()["temporal_edges"] == 1.0
