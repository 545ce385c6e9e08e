"""Replay buffer: padding and masks for episodes of different lengths; FIFO overwrite."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from core.qmix.buffer import EpisodeRecorder, ReplayBuffer
from core.qmix.env import EnvShapes
from tests.core.torch_threads import one_torch_thread  # noqa: F401

SHAPES = EnvShapes(n_agents=2, n_actions=3, obs_dim=2, state_dim=3, max_steps=4)


def obs_at(tag: float, t: int) -> dict[str, np.ndarray]:
    """An observation whose values encode (episode tag, time) so we can find it again."""
    avail = np.ones((2, 3), dtype=bool)
    avail[1, 2] = t % 2 == 0  # agent 1 may not pick action 2 at odd times
    adj = np.zeros((2, 2), dtype=np.float32)
    adj[0, 1] = float(t % 2)
    return {
        "obs": np.full((2, 2), tag + t, dtype=np.float32),
        "state": np.full(3, tag * 10 + t, dtype=np.float32),
        "adj": adj,
        "avail": avail,
    }


def episode(tag: float, steps: int, terminated: bool = True) -> EpisodeRecorder:
    rec = EpisodeRecorder(SHAPES)
    rec.observe(obs_at(tag, 0))
    for t in range(steps):
        rec.act(
            np.array([t % 3, (t + 1) % 3]), reward=tag + t, terminated=terminated and t == steps - 1
        )
        rec.observe(obs_at(tag, t + 1))
    return rec


def test_padding_and_masks_for_different_lengths():
    buf = ReplayBuffer(SHAPES, capacity=4)
    buf.add(episode(1.0, steps=4))
    buf.add(episode(2.0, steps=2))
    buf.add(episode(3.0, steps=3, terminated=False))  # cut by the time limit, not terminal
    d = buf.data
    assert buf.size == 3
    assert d.filled[:3].tolist() == [[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0]]
    assert d.terminated[:3].tolist() == [[0, 0, 0, 1], [0, 1, 0, 0], [0, 0, 0, 0]]
    assert d.reward[1].tolist() == [2.0, 3.0, 0.0, 0.0]
    # Observations 0..steps are real, later ones zero; actions past the end are zero.
    assert d.obs[1, :3, 0, 0].tolist() == [2.0, 3.0, 4.0] and d.obs[1, 3:].abs().sum() == 0
    assert d.state[1, :3, 0].tolist() == [20.0, 21.0, 22.0] and d.state[1, 3:].abs().sum() == 0
    assert d.actions[1].tolist() == [[0, 1], [1, 2], [0, 0], [0, 0]]
    assert d.adj.dtype == torch.bool and d.adj[1, 1, 0, 1] and not d.adj[1, 2, 0, 1]
    # Real availability is kept; padded observations allow every action.
    assert not d.avail[1, 1, 1, 2] and d.avail[1, 2, 1, 2]
    assert d.avail[1, 3:].all()
    # Shapes: (capacity, T+1, ...) for observations, (capacity, T, ...) for transitions.
    assert d.obs.shape == (4, 5, 2, 2) and d.actions.shape == (4, 4, 2)


def test_fifo_overwrite_replaces_the_oldest_and_clears_its_padding():
    buf = ReplayBuffer(SHAPES, capacity=2)
    buf.add(episode(1.0, steps=4))
    buf.add(episode(2.0, steps=4))
    buf.add(episode(3.0, steps=1))  # overwrites slot 0 (episode 1)
    assert buf.size == 2 and buf.next == 1
    d = buf.data
    assert d.obs[0, 0, 0, 0] == 3.0 and d.obs[1, 0, 0, 0] == 2.0
    # Nothing of the long episode 1 survives behind the short one.
    assert d.filled[0].tolist() == [1, 0, 0, 0]
    assert d.reward[0].tolist() == [3.0, 0.0, 0.0, 0.0]
    assert d.obs[0, 2:].abs().sum() == 0 and d.state[0, 2:].abs().sum() == 0
    assert d.actions[0, 1:].abs().sum() == 0 and d.terminated[0].tolist() == [1, 0, 0, 0]
    buf.add(episode(4.0, steps=2))  # overwrites slot 1 (episode 2)
    tags = sorted(float(x) for x in buf.data.obs[:, 0, 0, 0])
    assert tags == [3.0, 4.0]


def test_sample_draws_only_filled_slots():
    buf = ReplayBuffer(SHAPES, capacity=10)
    buf.add(episode(5.0, steps=2))
    buf.add(episode(6.0, steps=3))
    batch = buf.sample(64, torch.Generator().manual_seed(0))
    assert batch.size == 64 and batch.obs.shape == (64, 5, 2, 2)
    tags = set(batch.obs[:, 0, 0, 0].tolist())
    assert tags == {5.0, 6.0}
    # Each sampled row is a whole, consistent episode.
    for row in range(64):
        steps = int(batch.filled[row].sum())
        assert steps == (2 if batch.obs[row, 0, 0, 0] == 5.0 else 3)


def test_bad_episodes_and_empty_buffer():
    buf = ReplayBuffer(SHAPES, capacity=2)
    with pytest.raises(ValueError, match="empty"):
        buf.sample(1)
    with pytest.raises(ValueError, match="steps"):
        buf.add(episode(1.0, steps=5))  # longer than max_steps
    with pytest.raises(ValueError, match="steps"):
        buf.add(EpisodeRecorder(SHAPES))  # no steps at all
    with pytest.raises(ValueError, match="capacity"):
        ReplayBuffer(SHAPES, capacity=0)


@pytest.mark.parametrize("capacity", [3, 5, 16])
def test_add_many_equals_adding_one_at_a_time(capacity):
    """The batched write (wrapping around, more episodes than slots) leaves exactly the
    buffer that adding the same episodes one by one leaves."""
    eps = [episode(float(k), steps=1 + k % 4, terminated=k % 3 != 0) for k in range(7)]
    one, many = ReplayBuffer(SHAPES, capacity), ReplayBuffer(SHAPES, capacity)
    for first in (0, 2):  # two batches, so the second starts mid-buffer
        for ep in eps[first:]:
            one.add(ep)
        many.add_many(eps[first:])
    assert (many.size, many.next) == (one.size, one.next)
    for name, value in vars(one.data).items():
        assert torch.equal(getattr(many.data, name), value), name


def test_a_snapshot_restores_the_newest_episodes_oldest_first() -> None:
    buf = ReplayBuffer(SHAPES, capacity=3)
    buf.add_many([episode(float(tag), 2) for tag in range(5)])  # wraps: keeps tags 2, 3, 4
    saved = buf.snapshot()
    assert saved["reward"][:, 0].tolist() == [2.0, 3.0, 4.0]  # oldest first
    again = ReplayBuffer(SHAPES, capacity=2)
    again.restore(saved)  # a smaller buffer keeps the newest
    assert again.size == 2 and again.snapshot()["reward"][:, 0].tolist() == [3.0, 4.0]
    again.add(episode(9.0, 1))  # FIFO goes on where it stopped: 3 is overwritten
    assert sorted(again.snapshot()["reward"][:, 0].tolist()) == [4.0, 9.0]
    with pytest.raises(ValueError, match="empty"):
        again.restore(saved)
