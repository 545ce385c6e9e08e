"""ε schedule and decentralised ε-greedy action selection."""

from __future__ import annotations

import pytest
import torch

from core.qmix.controller import ExplorationConfig, epsilon_at, select_actions
from tests.core.torch_threads import one_torch_thread  # noqa: F401


def test_epsilon_anneals_linearly_then_stays():
    cfg = ExplorationConfig(start=1.0, finish=0.05, anneal_fraction=0.5)
    assert epsilon_at(cfg, 0, 1000) == pytest.approx(1.0)
    assert epsilon_at(cfg, 250, 1000) == pytest.approx(0.525)
    assert epsilon_at(cfg, 500, 1000) == pytest.approx(0.05)
    assert epsilon_at(cfg, 999, 1000) == pytest.approx(0.05)
    values = [epsilon_at(cfg, e, 1000) for e in range(0, 1000, 10)]
    assert all(a >= b for a, b in zip(values, values[1:], strict=False))


def test_epsilon_with_tiny_runs_does_not_divide_by_zero():
    cfg = ExplorationConfig(anneal_fraction=0.1)
    assert epsilon_at(cfg, 0, 3) == pytest.approx(1.0)
    assert epsilon_at(cfg, 1, 3) == pytest.approx(cfg.finish)


@pytest.mark.parametrize(
    ("field", "value"), [("start", 1.5), ("finish", -0.1), ("anneal_fraction", 0.0)]
)
def test_exploration_validation(field, value):
    with pytest.raises(ValueError, match=field):
        ExplorationConfig(**{field: value}).validate()


def masked_setup(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(64, 5, 6, generator=g) * 10
    avail = torch.rand(64, 5, 6, generator=g) < 0.4
    avail[..., 3] |= ~avail.any(-1)  # every agent keeps at least one action
    q[..., 0] = 1e6  # the best Q is often on an unavailable action
    return q, avail, g


@pytest.mark.parametrize("epsilon", [0.0, 0.3, 1.0])
def test_never_picks_unavailable_actions(epsilon):
    q, avail, g = masked_setup()
    for _ in range(20):
        actions, greedy = select_actions(q, avail, epsilon, g)
        assert actions.shape == (64, 5) and greedy.shape == (64, 5)
        assert avail.gather(-1, actions.unsqueeze(-1)).all()


def test_greedy_is_argmax_over_available_actions():
    q, avail, g = masked_setup()
    actions, greedy = select_actions(q, avail, 0.0, g)
    assert greedy.all()
    expected = q.masked_fill(~avail, float("-inf")).argmax(-1)
    assert torch.equal(actions, expected)


def test_epsilon_one_explores_uniformly_over_available():
    q = torch.zeros(1, 1, 4)
    q[..., 2] = 5.0
    avail = torch.tensor([[[True, False, True, True]]])
    g = torch.Generator().manual_seed(1)
    counts = torch.zeros(4)
    for _ in range(3000):
        a, _ = select_actions(q, avail, 1.0, g)
        counts[a.item()] += 1
    assert counts[1] == 0
    freq = counts[[0, 2, 3]] / counts.sum()
    assert (freq - 1 / 3).abs().max() < 0.04


def test_intermediate_epsilon_explores_at_that_rate():
    q = torch.zeros(2000, 1, 2)
    q[..., 0] = 1.0
    avail = torch.ones(2000, 1, 2, dtype=torch.bool)
    actions, greedy = select_actions(q, avail, 0.4, torch.Generator().manual_seed(2))
    # Exploration picks the non-greedy action half the time: expected rate 0.4 / 2.
    rate = float((actions == 1).float().mean())
    assert abs(rate - 0.2) < 0.03
    assert torch.equal(greedy, actions == 0)
