"""The protocol observation dict of a team episode (docs/team.md, Observations).

Local observation of agent ``i`` before round ``r`` (``obs_dim = E + N + R + 30``):

| slice | features |
|---|---|
| E | task embedding (hashed word n-grams, or MiniLM) |
| 3 | text statistics: log length, count of numbers, size of the largest number |
| 3 | domain one-hot (math, code, mcq) |
| 5 | role one-hot (solver, coder, analyst, verifier, other) |
| N | agent index one-hot |
| R | round one-hot (all zero after the last round) |
| 7 | previous action one-hot + "no previous action" |
| 5 | has answer, confidence, agreement with what it read, share of peers read, verified |
| 2 | team consensus: share of peers whose last answer equals its own, peers' mean confidence |
| 2 | own tokens so far / budget, team tokens so far / budget |
| 3 | failure signals: itself failing (silent next round, or its last output unreadable), a peer it read last round is now silent or unreadable, share of peers silent |

Global state (``state_dim = N * obs_dim + 10 + 3N``): every local observation, then
edge density, dropped edges / N and layers / N of the last graph, the task's difficulty
one-hot (1..5), the share of agents currently right, team tokens / budget, and per agent:
currently right, silent, byzantine.

``avail``: a silent agent (crashed / timed out in the coming round) can only take
``solo_process`` (it will not act anyway); everyone else can take all six actions.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from core.actions import N_ACTIONS
from core.tasks.base import DOMAINS
from core.team.embedding import Embedder, text_stats
from core.team.runtime import TeamEpisode

KNOWN_ROLES = ("solver", "coder", "analyst", "verifier")
_FIXED = 3 + 3 + (len(KNOWN_ROLES) + 1) + 7 + 5 + 2 + 2 + 3
_STATE_EXTRA = 3 + 5 + 1 + 1


class ObservationBuilder:
    """Turns a :class:`TeamEpisode` into the protocol's ``obs/state/adj/avail`` arrays."""

    def __init__(
        self, roles: Sequence[str], n_rounds: int, embedder: Embedder, token_budget: float
    ):
        self.roles = list(roles)
        self.n_agents = len(self.roles)
        self.n_rounds = n_rounds
        self.embedder = embedder
        self.token_budget = float(token_budget)
        self.obs_dim = embedder.dim + self.n_agents + n_rounds + _FIXED
        self.state_dim = self.n_agents * self.obs_dim + _STATE_EXTRA + 3 * self.n_agents
        self._static_cache: dict[tuple[str, str], np.ndarray] = {}

    def _static(self, episode: TeamEpisode) -> np.ndarray:
        """``(N, E + 3 + 3 + 5 + N)`` the features that do not change within an episode."""
        task = episode.task
        key = (task.benchmark, task.task_id)
        block = self._static_cache.get(key)
        if block is not None:
            return block
        n, e = self.n_agents, self.embedder.dim
        block = np.zeros((n, e + 3 + 3 + len(KNOWN_ROLES) + 1 + n), dtype=np.float32)
        block[:, :e] = self.embedder(task.question)
        block[:, e : e + 3] = text_stats(task.question)
        block[:, e + 3 + DOMAINS.index(task.domain)] = 1.0
        base = e + 6
        for i, role in enumerate(self.roles):
            r = KNOWN_ROLES.index(role) if role in KNOWN_ROLES else len(KNOWN_ROLES)
            block[i, base + r] = 1.0
            block[i, base + len(KNOWN_ROLES) + 1 + i] = 1.0
        if len(self._static_cache) > 4096:
            self._static_cache.clear()
        self._static_cache[key] = block
        return block

    def __call__(self, episode: TeamEpisode) -> dict[str, np.ndarray]:
        n, budget = self.n_agents, self.token_budget
        r = episode.round_index
        static = self._static(episode)
        obs = np.zeros((n, self.obs_dim), dtype=np.float32)
        obs[:, : static.shape[1]] = static
        col = static.shape[1]
        if r < self.n_rounds:
            obs[:, col + r] = 1.0
        col += self.n_rounds

        upcoming = min(r, self.n_rounds - 1)
        silent = episode.silent_at(upcoming)
        last = episode.last
        agent_tokens = episode.agent_tokens()
        team_tokens = sum(agent_tokens)
        for i in range(n):
            step = last[i]
            row = obs[i]
            if step is None:
                row[col + N_ACTIONS] = 1.0
            else:
                row[col + step.action] = 1.0
                has = step.answer is not None
                row[col + 7] = float(has)
                row[col + 8] = step.confidence
                row[col + 9] = step.agreement
                row[col + 10] = len(step.read_from) / max(n - 1, 1)
                row[col + 11] = float(step.verified)
                # The controller sees every agent's last answer (no tokens are spent on it):
                # whether the team already agrees is the cheapest signal of a task's difficulty.
                peers = [last[j] for j in range(n) if j != i and last[j] is not None]
                answered = [p for p in peers if p.answer is not None]
                if has and n > 1:
                    row[col + 12] = sum(p.answer == step.answer for p in answered) / (n - 1)
                if answered:
                    row[col + 13] = sum(p.confidence for p in answered) / len(answered)
            row[col + 14] = min(agent_tokens[i] / budget, 1.0)
            row[col + 15] = min(team_tokens / budget, 1.0)
            unreadable = step is not None and step.fault is not None and step.answer is None
            row[col + 16] = float(silent[i] or unreadable)
            if step is not None and step.read_from:
                row[col + 17] = float(
                    any(
                        silent[j] or last[j] is None or last[j].answer is None
                        for j in step.read_from
                    )
                )
            row[col + 18] = sum(silent[j] for j in range(n) if j != i) / max(n - 1, 1)

        adj = np.zeros((n, n), dtype=np.float32)
        graph = episode.graphs[-1] if episode.graphs else None
        edges = episode.rounds[-1].edges if episode.rounds else []
        for s, d in edges:
            adj[s, d] = 1.0
        avail = np.ones((n, N_ACTIONS), dtype=bool)
        for i in range(n):
            if silent[i]:
                avail[i, 1:] = False
        return {
            "obs": obs,
            "state": self._state(episode, obs, graph, len(edges), silent, team_tokens),
            "adj": adj,
            "avail": avail,
        }

    def _state(
        self, episode: TeamEpisode, obs: np.ndarray, graph, n_edges: int, silent, team_tokens: int
    ) -> np.ndarray:
        n = self.n_agents
        state = np.zeros(self.state_dim, dtype=np.float32)
        state[: n * self.obs_dim] = obs.reshape(-1)
        k = n * self.obs_dim
        if graph is not None and n > 1:
            state[k] = n_edges / (n * (n - 1))
            state[k + 1] = len(graph.dropped) / n
            state[k + 2] = len(graph.layers) / n
        state[k + 3 + min(max(episode.task.difficulty, 1), 5) - 1] = 1.0
        right = [bool(s is not None and s.correct) for s in episode.last]
        state[k + 8] = sum(right) / n
        state[k + 9] = min(team_tokens / self.token_budget, 1.0)
        k += _STATE_EXTRA
        upcoming = min(episode.round_index, self.n_rounds - 1)
        for i in range(n):
            state[k + i] = float(right[i])
            state[k + n + i] = float(silent[i])
            state[k + 2 * n + i] = float(episode.fault_at(i, upcoming) == "byzantine")
        return state
