"""Replay buffer of whole episodes in preallocated ``(capacity, T, ...)`` tensors.

Episodes shorter than ``max_steps`` are zero-padded; ``filled[b, t]`` marks real steps.
Time index ``t`` runs over the ``T + 1`` observations (the last one is the
observation after the final step) and over the ``T`` transitions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from core.qmix.env import EnvShapes


@dataclass
class EpisodeBatch:
    """A batch of episodes on one device.

    Shapes (``B`` episodes, ``T`` = max_steps, ``N`` agents, ``A`` actions):
    ``obs (B, T+1, N, obs_dim)``, ``state (B, T+1, S)``, ``adj (B, T+1, N, N)``,
    ``avail (B, T+1, N, A)`` bool, ``actions (B, T, N)`` long, ``reward (B, T)``,
    ``terminated (B, T)``, ``filled (B, T)``.
    """

    obs: torch.Tensor
    state: torch.Tensor
    adj: torch.Tensor
    avail: torch.Tensor
    actions: torch.Tensor
    reward: torch.Tensor
    terminated: torch.Tensor
    filled: torch.Tensor

    def to(self, device: torch.device) -> EpisodeBatch:
        return EpisodeBatch(**{k: v.to(device, non_blocking=True) for k, v in vars(self).items()})

    @property
    def size(self) -> int:
        return self.obs.shape[0]


class EpisodeRecorder:
    """Collects one episode's steps (numpy) before it goes into the buffer."""

    def __init__(self, shapes: EnvShapes):
        self.shapes = shapes
        self.obs: list[dict[str, np.ndarray]] = []
        self.actions: list[np.ndarray] = []
        self.rewards: list[float] = []
        self.terminated = False

    def observe(self, obs: dict[str, np.ndarray]) -> None:
        self.obs.append(obs)

    def act(self, actions: np.ndarray, reward: float, terminated: bool) -> None:
        self.actions.append(np.asarray(actions, dtype=np.int64))
        self.rewards.append(float(reward))
        self.terminated = terminated


class ReplayBuffer:
    """FIFO buffer of the latest ``capacity`` episodes, sampled uniformly."""

    def __init__(self, shapes: EnvShapes, capacity: int = 5000):
        if capacity < 1:
            raise ValueError(f"buffer capacity must be >= 1, got {capacity}")
        n, a, t = shapes.n_agents, shapes.n_actions, shapes.max_steps
        self.shapes, self.capacity = shapes, capacity
        self.data = EpisodeBatch(
            obs=torch.zeros(capacity, t + 1, n, shapes.obs_dim),
            state=torch.zeros(capacity, t + 1, shapes.state_dim),
            adj=torch.zeros(capacity, t + 1, n, n, dtype=torch.bool),
            avail=torch.zeros(capacity, t + 1, n, a, dtype=torch.bool),
            actions=torch.zeros(capacity, t, n, dtype=torch.long),
            reward=torch.zeros(capacity, t),
            terminated=torch.zeros(capacity, t),
            filled=torch.zeros(capacity, t),
        )
        self.next = 0
        self.size = 0

    def add(self, episode: EpisodeRecorder) -> None:
        """Copy one finished episode in, overwriting the oldest when full."""
        self.add_many([episode])

    def add_many(self, episodes: Sequence[EpisodeRecorder]) -> None:
        """Copy finished episodes in, in order, overwriting the oldest when full.

        The batch is assembled in NumPy and written with one indexed copy per field: a
        dozen tensor writes per rollout of ``E`` episodes instead of ~30 per episode.
        """
        episodes = list(episodes)
        count = len(episodes)
        episodes = episodes[-self.capacity :]  # older ones would be overwritten anyway
        if not episodes:
            return
        sh, e = self.shapes, len(episodes)
        n, t = sh.n_agents, sh.max_steps
        obs = np.zeros((e, t + 1, n, sh.obs_dim), dtype=np.float32)
        state = np.zeros((e, t + 1, sh.state_dim), dtype=np.float32)
        adj = np.zeros((e, t + 1, n, n), dtype=bool)
        # Padded steps keep every action available so target max() stays finite.
        avail = np.ones((e, t + 1, n, sh.n_actions), dtype=bool)
        actions = np.zeros((e, t, n), dtype=np.int64)
        reward = np.zeros((e, t), dtype=np.float32)
        terminated = np.zeros((e, t), dtype=np.float32)
        filled = np.zeros((e, t), dtype=np.float32)
        for k, ep in enumerate(episodes):
            steps = len(ep.actions)
            if steps == 0 or steps > t or len(ep.obs) != steps + 1:
                raise ValueError(
                    f"episode has {steps} steps and {len(ep.obs)} observations; "
                    f"expected 1..{t} steps and one more observation"
                )
            obs[k, : steps + 1] = [o["obs"] for o in ep.obs]
            state[k, : steps + 1] = [o["state"] for o in ep.obs]
            adj[k, : steps + 1] = [o["adj"] != 0 for o in ep.obs]
            avail[k, : steps + 1] = [o["avail"] for o in ep.obs]
            actions[k, :steps] = ep.actions
            reward[k, :steps] = ep.rewards
            terminated[k, steps - 1] = float(ep.terminated)
            filled[k, :steps] = 1.0
        first = self.next + count - e  # where the first kept episode lands
        slots = torch.arange(first, first + e) % self.capacity
        for name, value in (
            ("obs", obs),
            ("state", state),
            ("adj", adj),
            ("avail", avail),
            ("actions", actions),
            ("reward", reward),
            ("terminated", terminated),
            ("filled", filled),
        ):
            getattr(self.data, name)[slots] = torch.from_numpy(value)
        self.next = (self.next + count) % self.capacity
        self.size = min(self.size + count, self.capacity)

    def snapshot(self) -> dict[str, torch.Tensor]:
        """The buffered episodes, oldest first: ``{field: (size, ...)}`` (what a checkpoint
        of a run whose episodes cost money keeps, so that a resumed run learns from them)."""
        order = (torch.arange(self.size) + self.next - self.size) % self.capacity
        return {k: v[order].clone() for k, v in vars(self.data).items()}

    def restore(self, saved: dict[str, torch.Tensor]) -> None:
        """Refill an empty buffer from :meth:`snapshot` (its newest ``capacity`` episodes)."""
        if self.size:
            raise ValueError("restore fills an empty buffer")
        size = min(len(saved["reward"]), self.capacity)
        for name, value in vars(self.data).items():
            part = saved[name][len(saved[name]) - size :]
            if part.shape[1:] != value.shape[1:]:
                raise ValueError(f"saved {name} {tuple(part.shape)} does not fit {value.shape}")
            value[:size] = part
        self.size, self.next = size, size % self.capacity

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> EpisodeBatch:
        """``batch_size`` episodes drawn uniformly (with replacement when the buffer is small)."""
        if self.size == 0:
            raise ValueError("cannot sample from an empty buffer")
        idx = torch.randint(0, self.size, (batch_size,), generator=generator)
        return EpisodeBatch(**{k: v[idx] for k, v in vars(self.data).items()})
