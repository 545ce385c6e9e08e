"""The agent team as a cooperative environment: the protocol of :mod:`core.qmix.env`.

:class:`TeamEnv` is one team on one benchmark split. As a protocol environment it plays one
episode at a time (``reset(seed) -> obs``, ``step(actions) -> (obs, reward, done, info)``);
:meth:`TeamEnv.vectorized` gives the runner a :class:`TeamVecEnv` that plays a round of
``E`` episodes concurrently on one event loop (so an OpenAI-compatible server sees their
calls in flight together; the synthetic society, which never waits, skips the loop). Training, evaluation, comparisons and the lab all play episodes
through :func:`core.qmix.runner.rollout` on a :class:`TeamVecEnv`.

The reward is 0 until the last round, then :func:`core.team.runtime.reward`; the final
``info`` holds the :class:`EpisodeRecord` (``"episode"``), ``"score"`` and ``"tokens"``.

Names: an *episode index* ``k`` names episode ``k`` of the split's stream (task ``k`` of
the seeded benchmark, its own random seed and curriculum failures), so training,
evaluation and the lab see exactly the same episode for the same ``k``; a *seed* is only
ever a random seed (``reset(seed=s)`` draws the episode from ``s``).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Coroutine, Iterable, Sequence
from typing import Any

import numpy as np

from core.actions import N_ACTIONS, action_mask
from core.backends.base import Backend
from core.errors import BudgetReached, EndpointGone, UserError
from core.qmix.env import Transition
from core.qmix.runner import rollout_all
from core.records import EpisodeRecord
from core.tasks.base import Task, TaskSource
from core.team.embedding import make_embedder
from core.team.failures import FailureSpec, sample_failures
from core.team.observations import ObservationBuilder
from core.team.options import TeamOptions
from core.team.plan import TeamPolicy, as_actor, plan_for
from core.team.runtime import EpisodeJob, TeamEpisode, run_sync

_SOURCES: dict[tuple[str, int, str | None], TaskSource] = {}


def _load_source(benchmark: str, seed: int, split: str | None) -> TaskSource:
    """The benchmark's task source; generated ones are shared between environments.

    Building a split of ``mixed`` generates every task (~0.7 s); sources are read-only, so
    one copy serves all. ``jsonl:`` files are re-read each time (the user may edit them
    between runs).
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
    """The random seed of episode ``index`` (tuples of ints hash the same in every process)."""
    return hash((base_seed, index, 0x5EED)) & 0x7FFF_FFFF


class TeamEnv:
    """A team of LLM agents on one split of a benchmark, one round per step."""

    def __init__(
        self,
        opts: TeamOptions | None = None,
        split: str | None = None,
        *,
        backend: Backend | None = None,
        source: TaskSource | None = None,
    ):
        self.opts = opts = opts or TeamOptions()
        opts.validate()
        self.split = split
        # Before anything starts: generated code runs in the sandbox asked for, or not at all.
        self.sandbox = opts.code_sandbox()
        self.backend = backend if backend is not None else opts.make_backend()
        self.source = (
            source if source is not None else _load_source(opts.benchmark, opts.seed, split)
        )
        if len(self.source) == 0:
            raise UserError(f"Benchmark {opts.benchmark!r} has no tasks.")
        self.runtime_config = opts.runtime_config()
        self.failures = opts.failure_specs()
        self.observe = ObservationBuilder(
            opts.roles,
            opts.rounds,
            make_embedder(opts.embedding, opts.embedding_dim),
            self.runtime_config.token_budget,
            action_mask(opts.actions),
        )
        self.n_agents = len(opts.roles)
        self.n_actions = N_ACTIONS
        self.obs_dim = self.observe.obs_dim
        self.state_dim = self.observe.state_dim
        self.max_steps = opts.rounds
        self.loop = asyncio.new_event_loop()
        self._next_index = 0
        self._tasks: dict[int, Task] = {}
        self._single: TeamVecEnv | None = None

    # -- episodes ----------------------------------------------------------------------

    def job(self, index: int) -> EpisodeJob:
        """Episode ``index`` of the stream: its task, seed and failures."""
        seed = episode_seed(self.opts.seed, index)
        return EpisodeJob(self._task(index % len(self.source)), seed, self._failures(seed))

    def job_from_seed(self, seed: int) -> EpisodeJob:
        """The episode a random ``seed`` draws: a task of the split, the seed, its failures."""
        index = random.Random(seed).randrange(len(self.source))
        return EpisodeJob(self._task(index), seed, self._failures(seed))

    def _failures(self, seed: int) -> list[FailureSpec]:
        """The injected failures plus this episode's draw from the random curriculum."""
        failures = list(self.failures)
        p = self.opts.fail_prob
        if p > 0:
            taken = {f.agent for f in failures}
            drawn = sample_failures(self.n_agents, self.max_steps, p, random.Random(seed ^ 0xFA11))
            failures += [f for f in drawn if f.agent not in taken]
            if len({f.agent for f in failures}) == self.n_agents:
                failures = failures[:-1]
        return failures

    def _task(self, index: int) -> Task:
        # Generated sources rebuild a task on every get(); training revisits the same ones.
        task = self._tasks.get(index)
        if task is None:
            if len(self._tasks) >= 50_000:
                self._tasks.clear()
            task = self._tasks[index] = self.source.get(index)
        return task

    # -- the protocol, one episode at a time ----------------------------------------------

    def reset(self, seed: int | None = None) -> dict[str, np.ndarray]:
        """Start the next episode of the stream, or the one ``seed`` draws."""
        if seed is None:
            job = self.job(self._next_index)
            self._next_index += 1
        else:
            job = self.job_from_seed(int(seed))
        if self._single is None:
            self._single = self.vectorized(1)
        return self._single.start([job])[0]

    @property
    def episode(self) -> TeamEpisode | None:
        """The episode in progress under the one-at-a-time protocol."""
        return self._single.episodes[0] if self._single and self._single.episodes else None

    def step(self, actions: Sequence[int]) -> Transition:
        if self._single is None:
            raise RuntimeError("step() before reset()")
        return self._single.step([0], np.asarray([actions]))[0]

    # -- many episodes ------------------------------------------------------------------

    def vectorized(
        self,
        width: int,
        policy_name: str = "env",
        failures: Sequence[FailureSpec] | None = None,
    ) -> TeamVecEnv:
        """A vec env of up to ``width`` episodes of this stream; ``failures`` replaces every
        episode's own failures (robustness sweeps, the failure lab)."""
        return TeamVecEnv(self, width, policy_name, failures)

    def run(
        self,
        policy: TeamPolicy | Any,
        indices: Sequence[int],
        *,
        failures: Sequence[FailureSpec] | None = None,
        width: int | None = None,
    ) -> list[EpisodeRecord]:
        """Play episodes ``indices`` with ``policy`` (a fixed topology, or any actor such as
        the learned policy), ``width`` (default: the options' concurrency) in lockstep."""
        actor = as_actor(policy, lambda k: self.job(k).seed, self.n_agents)
        # A serial server gains nothing from episodes in lockstep, and each episode's
        # calls back to back share their task's prompt prefix.
        width = width or (1 if in_turn(self.backend) else self.opts.concurrency)
        venv = self.vectorized(width, actor.name, failures)
        results = rollout_all(venv, actor, indices, width, explain=True)
        return [r.info["episode"] for r in results]

    def close(self) -> None:
        if not self.loop.is_closed():
            self.loop.run_until_complete(self.backend.aclose())
            self.loop.close()


class TeamVecEnv:
    """Up to ``width`` team episodes in lockstep (the :class:`~core.qmix.env.VecEnv` protocol).

    One ``step`` plays one round of every listed episode concurrently (``asyncio.gather``
    on the team's event loop), then, for episodes that played their last round, the
    decision agent. On a synchronous back-end (the synthetic society) the same coroutines
    run one after the other without the loop; the records are the same.
    """

    def __init__(
        self,
        team: TeamEnv,
        width: int,
        policy_name: str = "env",
        failures: Sequence[FailureSpec] | None = None,
    ):
        if width < 1:
            raise ValueError(f"width = {width} must be at least 1")
        self.team, self.width, self.policy_name = team, width, policy_name
        self.failures = None if failures is None else list(failures)
        self.synchronous = bool(getattr(team.backend, "synchronous", False))
        self.in_turn = in_turn(team.backend)
        for k in ("n_agents", "n_actions", "obs_dim", "state_dim", "max_steps"):
            setattr(self, k, getattr(team, k))
        self.episodes: list[TeamEpisode] = []

    def reset(self, episodes: Sequence[int]) -> list[dict[str, np.ndarray]]:
        return self.start([self.team.job(int(k)) for k in episodes])

    def start(self, jobs: Sequence[EpisodeJob]) -> list[dict[str, np.ndarray]]:
        """Start ``jobs`` in slots ``0..len-1``."""
        if len(jobs) > self.width:
            raise ValueError(f"{len(jobs)} episodes for a vec env of width {self.width}")
        team = self.team
        self.episodes = [
            TeamEpisode(
                job.task,
                team.opts.roles,
                team.backend,
                config=team.runtime_config,
                failures=job.failures if self.failures is None else self.failures,
                seed=job.seed,
                policy_name=self.policy_name,
            )
            for job in jobs
        ]
        return team.observe.many(self.episodes)

    def step(
        self, slots: Sequence[int], actions: np.ndarray, directives: Sequence[Any] | None = None
    ) -> list[Transition]:
        episodes = [self.episodes[s] for s in slots]
        if any(ep.done for ep in episodes):
            raise RuntimeError("step() after the episode ended")
        plans = [
            plan_for(a, None if directives is None else directives[i])
            for i, a in enumerate(actions)
        ]
        self._play(ep.play_round(p) for ep, p in zip(episodes, plans, strict=True))
        self._check_endpoint()
        finished = [ep for ep in episodes if ep.done]
        if finished:
            self._play(ep.finish() for ep in finished)
            self._check_endpoint()
        out: list[Transition] = []
        for ep, obs in zip(episodes, self.team.observe.many(episodes), strict=True):
            if not ep.done:
                out.append((obs, 0.0, False, {}))
                continue
            record = ep.record
            info = {"episode": record, "score": record.score, "tokens": record.tokens}
            out.append((obs, float(record.reward), True, info))
        return out

    def _check_endpoint(self) -> None:
        """Stop the run when the back-end knows its server is gone for good (the local
        model's process exited: ``endpoint_down``): the round's calls failed as any failed
        call does, and every later one would too. Raised before the batch's episodes reach
        their caller, so a run logs none of them and can be resumed."""
        budget = getattr(self.team.backend, "budget_stop", None)
        reason = budget() if budget is not None else None
        if reason is not None:
            raise BudgetReached(f"stopped at budget: {reason}")
        down = getattr(self.team.backend, "endpoint_down", None)
        reason = down() if down is not None else None
        if reason is not None:
            raise EndpointGone(reason)

    def _play(self, coros: Iterable[Coroutine[Any, Any, Any]]) -> None:
        """Run the episodes' coroutines: one after the other when the back-end never waits
        (no event loop: ~2x faster episodes on the synthetic society), else concurrently on
        the team's event loop so that a server sees every call in flight together."""
        if self.synchronous:
            for coro in coros:
                run_sync(coro)
        elif self.in_turn:
            for coro in coros:
                self.team.loop.run_until_complete(coro)
        else:
            self.team.loop.run_until_complete(_gather(coros))

    def close(self) -> None:
        """The team owns the back-end and the loop; closing the team closes them."""


def in_turn(backend: Any) -> bool:
    """Whether the back-end plays the episodes of a batch one after the other: it sends one
    call at a time (``serial``), or it keeps per-agent state on its server (the local
    model's slots: ``one_episode_at_a_time``)."""
    return bool(
        getattr(backend, "serial", False) or getattr(backend, "one_episode_at_a_time", False)
    )


async def _gather(coros: Any) -> list:
    return list(await asyncio.gather(*coros))
