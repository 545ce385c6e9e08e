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
``solo_process`` (it will not act anyway); everyone else can take every action of the
team's action set (``--actions``: all six, or ``graph`` without ``execute_verify``).
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
_DYNAMIC = 7 + 5 + 2 + 2 + 3
"""Features per agent from the previous action on: everything that changes each round."""


TASK_EXTRA = 3 + 3
"""Task features after the embedding: text statistics (3) and domain one-hot (3)."""


def task_feature_width(obs_dim: int, n_agents: int, n_rounds: int) -> int:
    """How many leading features of every local observation describe the task alone: the
    embedding (E), text statistics (3) and domain (3) — ``E + 6``."""
    return obs_dim - n_agents - n_rounds - (_FIXED - TASK_EXTRA)


def task_features(obs: np.ndarray, n_agents: int, n_rounds: int) -> np.ndarray:
    """``(E + 6,)`` the task's features from a team's observation ``obs (N, obs_dim)``: the
    same for every agent, so agent 0's row."""
    return obs[0, : task_feature_width(obs.shape[-1], n_agents, n_rounds)]


class ObservationBuilder:
    """Turns a :class:`TeamEpisode` into the protocol's ``obs/state/adj/avail`` arrays."""

    def __init__(
        self,
        roles: Sequence[str],
        n_rounds: int,
        embedder: Embedder,
        token_budget: float,
        allowed: Sequence[bool] | None = None,
    ):
        self.roles = list(roles)
        self.n_agents = len(self.roles)
        self.n_rounds = n_rounds
        self.embedder = embedder
        self.token_budget = float(token_budget)
        self.obs_dim = embedder.dim + self.n_agents + n_rounds + _FIXED
        self.state_dim = self.n_agents * self.obs_dim + _STATE_EXTRA + 3 * self.n_agents
        self._static_cache: dict[tuple[str, str], np.ndarray] = {}
        # The team's action set (``--actions``): every agent's avail row starts from it.
        self.allowed = np.ones(N_ACTIONS, dtype=bool) if allowed is None else np.asarray(allowed)

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
        return self.many([episode])[0]

    def many(self, episodes: Sequence[TeamEpisode]) -> list[dict[str, np.ndarray]]:
        """The observation dicts of ``M`` episodes, built together.

        One array per field for all of them (each dict holds row views); the per-agent
        features are gathered as Python floats and written as one block: the same float32
        values as writing them one by one, with a few array writes per call instead of
        ~40 per episode.
        """
        m, n, d = len(episodes), self.n_agents, self.obs_dim
        width = self.embedder.dim + 6 + len(KNOWN_ROLES) + 1 + n
        obs = np.zeros((m, n, d), dtype=np.float32)
        obs[:, :, :width] = [self._static(ep) for ep in episodes]
        adj = np.zeros((m, n, n), dtype=np.float32)
        avail = np.broadcast_to(self.allowed, (m, n, N_ACTIONS)).copy()
        dynamic, extra = [], []
        for k, ep in enumerate(episodes):
            r = ep.round_index
            if r < self.n_rounds:
                obs[k, :, width + r] = 1.0
            edges = ep.rounds[-1].edges if ep.rounds else []
            if edges:
                src, dst = zip(*edges, strict=True)
                adj[k, src, dst] = 1.0
            silent = ep.silent_at(min(r, self.n_rounds - 1))
            avail[k, [i for i in range(n) if silent[i]], 1:] = False
            tokens = ep.agent_tokens()
            dynamic.append(self._dynamic(ep, silent, tokens))
            extra.append(self._state_extra(ep, len(edges), silent, sum(tokens)))
        obs[:, :, width + self.n_rounds :] = np.asarray(dynamic).reshape(m, n, _DYNAMIC)
        state = np.zeros((m, self.state_dim), dtype=np.float32)
        state[:, : n * d] = obs.reshape(m, n * d)
        state[:, n * d :] = extra
        return [
            {"obs": obs[k], "state": state[k], "adj": adj[k], "avail": avail[k]} for k in range(m)
        ]

    def _dynamic(self, episode: TeamEpisode, silent: list[bool], tokens: list[int]) -> list[float]:
        """``N * 19`` features of the agents' last steps (the previous action onwards in the
        table of the module docstring), agent after agent."""
        n, budget = self.n_agents, self.token_budget
        last = episode.last
        team_tokens, n_silent = sum(tokens), sum(silent)
        answered_all = [
            (j, s) for j, s in enumerate(last) if s is not None and s.answer is not None
        ]
        out: list[float] = []
        for i in range(n):
            step = last[i]
            row = [0.0] * _DYNAMIC
            if step is None:
                row[N_ACTIONS] = 1.0
            else:
                row[step.action] = 1.0
                has = step.answer is not None
                row[7] = float(has)
                row[8] = step.confidence
                row[9] = step.agreement
                row[10] = len(step.read_from) / max(n - 1, 1)
                row[11] = float(step.verified)
                # The controller sees every agent's last answer (no tokens are spent on it):
                # whether the team already agrees is the cheapest signal of a task's difficulty.
                answered = [p for j, p in answered_all if j != i]
                if has and n > 1:
                    row[12] = sum(p.answer == step.answer for p in answered) / (n - 1)
                if answered:
                    row[13] = sum(p.confidence for p in answered) / len(answered)
            row[14] = min(tokens[i] / budget, 1.0)
            row[15] = min(team_tokens / budget, 1.0)
            unreadable = step is not None and step.fault is not None and step.answer is None
            row[16] = float(silent[i] or unreadable)
            if step is not None and step.read_from:
                row[17] = float(
                    any(
                        silent[j] or last[j] is None or last[j].answer is None
                        for j in step.read_from
                    )
                )
            row[18] = (n_silent - silent[i]) / max(n - 1, 1)
            out += row
        return out

    def _state_extra(
        self, episode: TeamEpisode, n_edges: int, silent: list[bool], team_tokens: int
    ) -> list[float]:
        """The state after the agents' observations: graph, difficulty, progress, per agent."""
        n = self.n_agents
        extra = [0.0] * (_STATE_EXTRA + 3 * n)
        graph = episode.graphs[-1] if episode.graphs else None
        if graph is not None and n > 1:
            extra[0] = n_edges / (n * (n - 1))
            extra[1] = len(graph.dropped) / n
            extra[2] = len(graph.layers) / n
        extra[3 + min(max(episode.task.difficulty, 1), 5) - 1] = 1.0
        right = [bool(s is not None and s.correct) for s in episode.last]
        extra[8] = sum(right) / n
        extra[9] = min(team_tokens / self.token_budget, 1.0)
        upcoming = min(episode.round_index, self.n_rounds - 1)
        k = _STATE_EXTRA
        for i in range(n):
            extra[k + i] = float(right[i])
            extra[k + n + i] = float(silent[i])
            extra[k + 2 * n + i] = float(episode.fault_at(i, upcoming) == "byzantine")
        return extra
