"""Replay buffer of whole episodes in preallocated ``(capacity, T, ...)`` tensors.

Episodes shorter than ``max_steps`` are zero-padded; ``filled[b, t]`` marks real steps.
Time index ``t`` runs over the ``T + 1`` observations (the last one is the
observation after the final step) and over the ``T`` transitions.
"""

from __future__ import annotations

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
        steps = len(episode.actions)
        if steps == 0 or steps > self.shapes.max_steps or len(episode.obs) != steps + 1:
            raise ValueError(
                f"episode has {steps} steps and {len(episode.obs)} observations; "
                f"expected 1..{self.shapes.max_steps} steps and one more observation"
            )
        i, d = self.next, self.data
        for field_name in ("obs", "state", "adj", "avail"):
            getattr(d, field_name)[i].zero_()
        for t, o in enumerate(episode.obs):
            d.obs[i, t] = torch.from_numpy(o["obs"])
            d.state[i, t] = torch.from_numpy(o["state"])
            d.adj[i, t] = torch.from_numpy(o["adj"] != 0)
            d.avail[i, t] = torch.from_numpy(o["avail"])
        # Padded steps keep every action available so target max() stays finite.
        d.avail[i, steps + 1 :] = True
        d.actions[i].zero_()
        d.actions[i, :steps] = torch.from_numpy(np.stack(episode.actions))
        d.reward[i].zero_()
        d.reward[i, :steps] = torch.tensor(episode.rewards)
        d.terminated[i].zero_()
        d.terminated[i, steps - 1] = float(episode.terminated)
        d.filled[i].zero_()
        d.filled[i, :steps] = 1.0
        self.next = (i + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> EpisodeBatch:
        """``batch_size`` episodes drawn uniformly (with replacement when the buffer is small)."""
        if self.size == 0:
            raise ValueError("cannot sample from an empty buffer")
        idx = torch.randint(0, self.size, (batch_size,), generator=generator)
        return EpisodeBatch(**{k: v[idx] for k, v in vars(self.data).items()})
