"""The agent team as a cooperative environment with the project's protocol.

``TeamEnv`` has ``n_agents``, ``n_actions`` (6), ``obs_dim``, ``state_dim``, ``max_steps``
(= rounds), ``reset(seed=None) -> obs_dict`` and ``step(actions) -> (obs_dict, reward,
done, info)``. One ``step`` plays one round on the async runtime (one event loop per
environment). The reward is 0 until the last round, then SPEC §2.4's
``w_acc * score - w_tok * min(tokens / token_budget, 1)``; the final ``info`` holds the
:class:`EpisodeRecord` (``"episode"``), ``"score"`` and ``"tokens"``.

Episodes are indexed: ``reset(seed=k)`` plays episode ``k`` (task ``k`` of the seeded
benchmark, its own episode seed and random failures), ``reset()`` the next index. So
training, evaluation and :meth:`TeamEnv.run` see exactly the same episode for the same ``k``.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from core.actions import N_ACTIONS
from core.backends.base import Backend
from core.errors import UserError
from core.records import EpisodeRecord
from core.tasks.base import Task, TaskSource
from core.team.embedding import EMBEDDERS, make_embedder
from core.team.failures import FailureSpec, sample_failures
from core.team.observations import ObservationBuilder
from core.team.plan import RoundPlan, TeamPolicy
from core.team.runtime import DEFAULT_ROLES, EpisodeJob, RuntimeConfig, TeamEpisode, run_episodes
from core.team.society import PRESETS, SimBackend, get_preset

FALLBACK_TOKEN_BUDGET = 20000
"""Token budget for non-simulated back-ends when none is given."""


@dataclass
class TeamEnvConfig:
    """Everything that defines a team environment."""

    benchmark: str = "mixed"
    """Task source spec for ``core.tasks.registry.load_benchmark``."""
    split: str | None = None
    """``train`` or ``eval`` keeps that side of the held-out split; None keeps every task."""
    roles: tuple[str, ...] = DEFAULT_ROLES
    """One role per agent; the number of roles is the number of agents."""
    rounds: int = 3
    """Communication rounds per episode (= max_steps)."""
    backend: str = "sim"
    """Back-end name; ``sim`` is built here, others are passed in as objects."""
    preset: str = "flash-lite"
    """Synthetic-society preset (``sim`` only)."""
    token_weight: float = 0.1
    """w_tok in the reward."""
    accuracy_weight: float = 1.0
    """w_acc in the reward."""
    token_budget: float | None = None
    """Tokens at which the penalty saturates; None = the preset's full-mesh mean."""
    fail_prob: float = 0.0
    """Per episode, each agent independently fails with this probability (training curriculum)."""
    failures: tuple[FailureSpec, ...] = ()
    """Failures injected in every episode."""
    seed: int = 0
    """Seeds the task order, episode seeds and random failures."""
    embedding: str = "hash"
    """Task embedding: ``hash`` (offline word n-gram hashing) or ``minilm``."""
    embedding_dim: int = 96
    """Dimensions of the hash embedding (minilm is 384)."""

    def validate(self) -> None:
        if len(self.roles) < 1:
            raise ValueError("roles is empty: a team needs at least one agent")
        if self.rounds < 1:
            raise ValueError(f"rounds = {self.rounds} must be at least 1")
        if not 0.0 <= self.fail_prob < 1.0:
            raise ValueError(f"fail_prob = {self.fail_prob} is not in [0, 1)")
        if self.token_budget is not None and self.token_budget <= 0:
            raise ValueError(f"token_budget = {self.token_budget} must be positive")
        if self.token_weight < 0 or self.accuracy_weight < 0:
            raise ValueError(f"token_weight = {self.token_weight} must be non-negative")
        if self.embedding not in EMBEDDERS:
            raise ValueError(f"embedding = {self.embedding!r} is not one of {EMBEDDERS}")
        if self.backend == "sim" and self.preset not in PRESETS:
            raise ValueError(f"preset = {self.preset!r} is not one of {tuple(PRESETS)}")
        for spec in self.failures:
            spec.validate(len(self.roles))
        if len({s.agent for s in self.failures}) == len(self.roles):
            raise ValueError("failures fail every agent; at least one must stay healthy")


_SOURCES: dict[tuple[str, int, str | None], TaskSource] = {}


def _load_source(benchmark: str, seed: int, split: str | None) -> TaskSource:
    """The benchmark's task source; generated ones are shared between environments.

    Building a split of ``mixed`` generates every task (~0.7 s); training makes one
    environment per lockstep slot. Sources are read-only, so one copy serves all.
    ``jsonl:`` files are re-read each time (the user may edit them between runs).
    """
    from core.tasks.registry import load_benchmark

    if ":" in benchmark:
        return load_benchmark(benchmark, seed, split=split)
    key = (benchmark, seed, split)
    source = _SOURCES.get(key)
    if source is None:
        if len(_SOURCES) >= 16:
            _SOURCES.clear()
        source = _SOURCES[key] = load_benchmark(benchmark, seed, split=split)
    return source


def episode_seed(base_seed: int, index: int) -> int:
    """The seed of episode ``index`` (tuples of ints hash the same in every process)."""
    return hash((base_seed, index, 0x5EED)) & 0x7FFF_FFFF


class TeamEnv:
    """A team of LLM agents on a benchmark, one round per step."""

    def __init__(
        self,
        config: TeamEnvConfig | None = None,
        *,
        backend: Backend | None = None,
        source: TaskSource | None = None,
    ):
        self.config = config or TeamEnvConfig()
        self.config.validate()
        c = self.config
        if backend is None:
            if c.backend != "sim":
                raise UserError(
                    f"Back-end {c.backend!r} must be built by the caller; only 'sim' is built-in here."
                )
            backend = SimBackend(get_preset(c.preset))
        self.backend = backend
        if source is None:
            source = _load_source(c.benchmark, c.seed, c.split)
        if len(source) == 0:
            raise UserError(f"Benchmark {c.benchmark!r} has no tasks.")
        self.source = source
        budget = c.token_budget
        if budget is None:
            budget = (
                backend.config.token_budget
                if isinstance(backend, SimBackend)
                else FALLBACK_TOKEN_BUDGET
            )
        self.runtime_config = RuntimeConfig(
            n_rounds=c.rounds,
            accuracy_weight=c.accuracy_weight,
            token_weight=c.token_weight,
            token_budget=float(budget),
        )
        self.observe = ObservationBuilder(
            c.roles, c.rounds, make_embedder(c.embedding, c.embedding_dim), budget
        )
        self.n_agents = len(c.roles)
        self.n_actions = N_ACTIONS
        self.obs_dim = self.observe.obs_dim
        self.state_dim = self.observe.state_dim
        self.max_steps = c.rounds
        self._loop = asyncio.new_event_loop()
        self._next_index = 0
        self._tasks: dict[int, Task] = {}
        self.episode: TeamEpisode | None = None

    # -- episodes ----------------------------------------------------------------------

    def job(self, index: int) -> EpisodeJob:
        """Episode ``index``: its task, seed and failures (fixed ones + the curriculum draw)."""
        c = self.config
        seed = episode_seed(c.seed, index)
        failures = list(c.failures)
        if c.fail_prob > 0:
            taken = {f.agent for f in failures}
            drawn = sample_failures(
                self.n_agents, c.rounds, c.fail_prob, random.Random(seed ^ 0xFA11)
            )
            failures += [f for f in drawn if f.agent not in taken]
            if len({f.agent for f in failures}) == self.n_agents:
                failures = failures[:-1]
        return EpisodeJob(task=self._task(index % len(self.source)), seed=seed, failures=failures)

    def _task(self, index: int) -> Task:
        # Generated sources rebuild a task on every get(); training revisits the same ones.
        task = self._tasks.get(index)
        if task is None:
            if len(self._tasks) >= 50_000:
                self._tasks.clear()
            task = self._tasks[index] = self.source.get(index)
        return task

    def reset(self, seed: int | None = None) -> dict[str, np.ndarray]:
        index = self._next_index if seed is None else int(seed)
        self._next_index = index + 1
        job = self.job(index)
        self.episode = TeamEpisode(
            job.task,
            self.config.roles,
            self.backend,
            config=self.runtime_config,
            failures=job.failures,
            seed=job.seed,
            policy_name="env",
        )
        return self.observe(self.episode)

    def step(
        self, actions: Sequence[int], plan: RoundPlan | None = None
    ) -> tuple[dict[str, np.ndarray], float, bool, dict]:
        """Play one round. ``plan`` optionally carries the policy's view (Q-values, ε, mixer)
        to be recorded; its actions must equal ``actions``."""
        if self.episode is None or self.episode.done:
            raise RuntimeError("step() before reset() or after the episode ended")
        actions = [int(a) for a in actions]
        if plan is None:
            plan = RoundPlan(actions=actions)
        elif [int(a) for a in plan.actions] != actions:
            raise ValueError(f"plan actions {plan.actions} differ from actions {actions}")
        self._loop.run_until_complete(self.episode.play_round(plan))
        obs = self.observe(self.episode)
        if not self.episode.done:
            return obs, 0.0, False, {}
        record: EpisodeRecord = self._loop.run_until_complete(self.episode.finish())
        return (
            obs,
            float(record.reward),
            True,
            {"episode": record, "score": record.score, "tokens": record.tokens},
        )

    def run(
        self,
        policy: TeamPolicy,
        indices: Sequence[int],
        *,
        concurrency: int = 8,
        failures: Sequence[FailureSpec] | None = None,
    ) -> list[EpisodeRecord]:
        """Play episodes ``indices`` with ``policy`` (fixed topology or learned) concurrently.

        ``failures`` replaces the episodes' own failures (used by robustness sweeps).
        """
        jobs = [self.job(k) for k in indices]
        if failures is not None:
            jobs = [EpisodeJob(j.task, j.seed, list(failures)) for j in jobs]
        return self._loop.run_until_complete(
            run_episodes(
                policy,
                jobs,
                self.config.roles,
                self.backend,
                observe=self.observe,
                config=self.runtime_config,
                concurrency=concurrency,
            )
        )

    def close(self) -> None:
        if not self._loop.is_closed():
            self._loop.run_until_complete(self.backend.aclose())
            self._loop.close()
