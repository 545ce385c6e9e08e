"""Small cooperative games that follow the environment protocol (tests, demos, docs).

``RelayGame``: a signal in 0..A-1 is shown to agent 0 only; agent 0 sends to every
other agent (a fixed star graph, ``adj[0, j] = 1``). The team scores 1 in a round
when *every* agent picks the action equal to the signal, else 0; a new signal is
drawn each round. The others can only win by reading agent 0 through the graph,
so a policy that ignores the topology cannot beat chance (1/A per agent).
Optimal greedy return = ``max_steps``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class RelayGame:
    """A seeded relay coordination game; see the module docstring."""

    def __init__(self, n_agents: int = 3, n_actions: int = 3, max_steps: int = 3, seed: int = 0):
        if n_agents < 2 or n_actions < 2 or max_steps < 1:
            raise ValueError(
                f"RelayGame needs n_agents >= 2, n_actions >= 2, max_steps >= 1; got "
                f"n_agents={n_agents}, n_actions={n_actions}, max_steps={max_steps}"
            )
        self.n_agents, self.n_actions, self.max_steps = n_agents, n_actions, max_steps
        self.obs_dim = n_actions + 1
        self.state_dim = n_actions + 1
        self.rng = np.random.default_rng(seed)
        self.t = 0
        self.signal = 0
        self.adj = np.zeros((n_agents, n_agents), dtype=np.float32)
        self.adj[0, 1:] = 1.0

    def _obs(self) -> dict:
        obs = np.zeros((self.n_agents, self.obs_dim), dtype=np.float32)
        obs[0, self.signal] = 1.0
        obs[:, -1] = self.t / self.max_steps
        state = np.zeros(self.state_dim, dtype=np.float32)
        state[self.signal] = 1.0
        state[-1] = self.t / self.max_steps
        return {
            "obs": obs,
            "state": state,
            "adj": self.adj.copy(),
            "avail": np.ones((self.n_agents, self.n_actions), dtype=bool),
        }

    def reset(self, seed: int | None = None) -> dict:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.t = 0
        self.signal = int(self.rng.integers(self.n_actions))
        return self._obs()

    def step(self, actions: Sequence[int]) -> tuple[dict, float, bool, dict]:
        reward = float(all(int(a) == self.signal for a in actions))
        self.t += 1
        self.signal = int(self.rng.integers(self.n_actions))
        done = self.t >= self.max_steps
        return self._obs(), reward, done, {"won": reward == 1.0}


def relay_game() -> RelayGame:
    """Factory for ``--env core.qmix.games:relay_game``."""
    return RelayGame()
