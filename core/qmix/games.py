"""Classic cooperative games on the environment protocol: what the engine's textbook
defaults must solve, and where QMIX's monotonic mixing is known to fail (docs/games.md).

``TwoStepGame`` (Rashid et al. 2018, QMIX, Fig. 3): in step 1 only agent 0's action
matters; it picks which matrix game step 2 plays. Game 2A pays 7 whatever the agents do;
game 2B pays ``[[0, 1], [1, 8]]``. Both agents see the state (1, 2A or 2B). The optimum is
8 (go to 2B, both play action 1). Under uniform exploration VDN's additive Q cannot
represent 2B's payoffs — its best fit there is 6.5 < 7 — so it settles on 7; QMIX's
monotonic mixing represents them and reaches 8 (the paper's contrast).

``RelayGame``: a signal in 0..A-1 is shown to agent 0 only; agent 0 sends to every
other agent (a fixed star graph, ``adj[0, j] = 1``). The team scores 1 in a round
when *every* agent picks the action equal to the signal, else 0; a new signal is
drawn each round. The others can only win by reading agent 0 through the graph,
so a policy that ignores the topology cannot beat chance (1/A per agent).
Optimal greedy return = ``max_steps``.

``ClimbingGame`` (Claus & Boutilier 1998): one step, two agents, three actions each,
payoff ``[[11, -30, 0], [-30, 7, 6], [0, 0, 5]]``. The optimum (11) sits next to the
worst penalties, so no monotonic function of per-agent utilities ranks the joint actions
right: if action 0 is each agent's best then monotonicity forces
``Q_tot(0, 1) >= Q_tot(1, 1)``, i.e. -30 >= 7. QMIX and VDN settle on a safe joint action
(5, 6 or 7): the method's known limit, kept here as a teaching example.

:data:`GAMES` lists them with the training budget the textbook defaults need;
:func:`greedy_return` trains on one and plays the greedy policy (the tests and
``agentqmix bench games`` use it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from core.qmix.config import TrainConfig
from core.qmix.env import SerialVecEnv
from core.qmix.runner import rollout_all, summarize
from core.qmix.training import train


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


TWO_STEP_PAYOFF_2B = ((0.0, 1.0), (1.0, 8.0))
"""Game 2B of the two-step game (game 2A pays 7 for every joint action)."""


class TwoStepGame:
    """The QMIX paper's two-step game; see the module docstring.

    States: 0 = the first step, 1 = game 2A, 2 = game 2B; obs and state are their one-hot.
    No agent sends to another (``adj`` is all zeros): both see the state themselves.
    """

    n_agents, n_actions, obs_dim, state_dim, max_steps = 2, 2, 3, 3, 2

    def __init__(self) -> None:
        self.where = 0

    def _obs(self) -> dict:
        state = np.zeros(3, dtype=np.float32)
        state[self.where] = 1.0
        return {
            "obs": np.stack([state, state]),
            "state": state,
            "adj": np.zeros((2, 2), dtype=np.float32),
            "avail": np.ones((2, 2), dtype=bool),
        }

    def reset(self, seed: int | None = None) -> dict:
        self.where = 0
        return self._obs()

    def step(self, actions: Sequence[int]) -> tuple[dict, float, bool, dict]:
        a0, a1 = (int(a) for a in actions)
        if self.where == 0:
            self.where = 1 if a0 == 0 else 2
            return self._obs(), 0.0, False, {}
        reward = 7.0 if self.where == 1 else TWO_STEP_PAYOFF_2B[a0][a1]
        return self._obs(), reward, True, {"game": "2A" if self.where == 1 else "2B"}


CLIMBING_PAYOFF = ((11.0, -30.0, 0.0), (-30.0, 7.0, 6.0), (0.0, 0.0, 5.0))
"""Claus & Boutilier's (1998) climbing game; agent 0 picks the row, agent 1 the column."""


class MatrixGame:
    """A one-step game of two agents: the team gets ``payoff[a0][a1]``. The single state is
    a constant 1 (nothing to observe); no agent sends to another."""

    n_agents, obs_dim, state_dim, max_steps = 2, 1, 1, 1

    def __init__(self, payoff: Sequence[Sequence[float]]):
        self.payoff = np.asarray(payoff, dtype=np.float64)
        rows, cols = self.payoff.shape
        if rows != cols or rows < 2:
            raise ValueError(f"MatrixGame needs a square payoff of size >= 2, got {rows}x{cols}")
        self.n_actions = rows

    def _obs(self) -> dict:
        return {
            "obs": np.ones((2, 1), dtype=np.float32),
            "state": np.ones(1, dtype=np.float32),
            "adj": np.zeros((2, 2), dtype=np.float32),
            "avail": np.ones((2, self.n_actions), dtype=bool),
        }

    def reset(self, seed: int | None = None) -> dict:
        return self._obs()

    def step(self, actions: Sequence[int]) -> tuple[dict, float, bool, dict]:
        a0, a1 = (int(a) for a in actions)
        return self._obs(), float(self.payoff[a0, a1]), True, {}


def relay_game() -> RelayGame:
    """Factory for ``--env core.qmix.games:relay_game``."""
    return RelayGame()


def two_step_game() -> TwoStepGame:
    """Factory for ``--env core.qmix.games:two_step_game``."""
    return TwoStepGame()


def climbing_game() -> MatrixGame:
    """Factory for ``--env core.qmix.games:climbing_game``."""
    return MatrixGame(CLIMBING_PAYOFF)


@dataclass(frozen=True)
class ClassicGame:
    """One game of the suite: how to make it, what the best team scores, and the training
    budget with which the textbook defaults solve it (or show the known limit)."""

    factory: Callable[[], object]
    optimum: float
    """Greedy return of the best joint policy."""
    episodes: int
    """Training episodes (everything else at the engine's defaults)."""
    monotonic_solves: bool
    """Whether monotonic mixing (QMIX) can reach the optimum (False: the method's limit)."""


GAMES: dict[str, ClassicGame] = {
    "two_step": ClassicGame(two_step_game, optimum=8.0, episodes=600, monotonic_solves=True),
    "relay": ClassicGame(relay_game, optimum=3.0, episodes=1500, monotonic_solves=True),
    "climbing": ClassicGame(climbing_game, optimum=11.0, episodes=600, monotonic_solves=False),
}
"""The classic-games suite (``--env core.qmix.games:<name>_game``)."""


def greedy_return(game: str, seed: int, **settings: Any) -> float:
    """Train on ``game`` with the engine's defaults (its budget of episodes, ``settings`` —
    ``TrainConfig`` fields — on top), then the greedy policy's mean return on 16 held-out
    episodes (stream ``eval``)."""
    spec = GAMES[game]
    config = TrainConfig(episodes=spec.episodes, seed=seed, device="cpu", **settings)

    def venv(width: int) -> SerialVecEnv:
        return SerialVecEnv([spec.factory() for _ in range(width)], seed, "train")

    state = train(venv, config)
    policy = state.greedy_policy()
    held_out = SerialVecEnv([spec.factory() for _ in range(8)], seed, "eval")
    return float(summarize(rollout_all(held_out, policy, range(16), 8))["mean_return"])
