"""Continuing a simulator-trained policy on a real model, within a budget (``train --init``).

* :func:`initial_state` starts the learner from a checkpoint's weights (target networks
  copied, a fresh optimiser) instead of random ones.
* :class:`Budget` caps the tokens and calls a run may spend; :class:`BudgetHooks` stops the
  training loop between two batches, cleanly (every played episode logged, the checkpoint
  written, the run resumable with ``train --resume``), before a batch that would, at the
  mean cost per episode so far, go past the budget — or once it is reached.
* :func:`probe` times a few real calls (the first training tasks, round 0, solo) so that
  ``train`` can print an estimate of calls, tokens and wall time before it starts.
* :func:`needs_budget`: an endpoint that may bill (``--backend openai`` anywhere but this
  machine) does not start without a budget.

Spending counts what the episodes logged: tokens as the server reported them, and calls
not served from the response cache (a repeated run is free; a cache hit counts neither).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from core.actions import Action
from core.backends.base import AgentTurn
from core.errors import UserError
from core.qmix.checkpoint import load_checkpoint
from core.qmix.env import EnvShapes
from core.qmix.runner import EpisodeResult
from core.qmix.training import TrainConfig, TrainHooks, TrainState, build_state
from core.records import EpisodeRecord
from core.team.options import TeamOptions

LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
PROBE_CALLS = 3
"""Real calls timed before a run on a real back-end starts (its estimate)."""


@dataclass
class Budget:
    """What a run may spend on a real back-end (``None`` = no cap)."""

    tokens: int | None = None
    """Prompt + completion tokens, as the server reported them."""
    calls: int | None = None
    """Calls sent to the server (cache hits are free)."""

    def validate(self) -> None:
        for name in ("tokens", "calls"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise UserError(f"--budget-{name} must be at least 1, not {value}.")

    @property
    def given(self) -> bool:
        return self.tokens is not None or self.calls is not None


def episode_spend(record: EpisodeRecord) -> tuple[int, int]:
    """(tokens, calls) an episode cost: its logged tokens, its calls not served from the cache."""
    tokens = sum(c.prompt_tokens + c.completion_tokens for c in record.calls)
    calls = sum(not c.cache_hit for c in record.calls)
    return tokens, calls


class BudgetMeter:
    """Running spend of one run against its :class:`Budget`."""

    def __init__(self, budget: Budget, tokens: int = 0, calls: int = 0):
        self.budget, self.tokens, self.calls = budget, tokens, calls
        self.episodes = 0
        self.episode_tokens = 0
        self.episode_calls = 0
        self.reason: str | None = None
        """Why the run stopped at its budget (None while it has not)."""

    def add(self, records: Sequence[EpisodeRecord]) -> None:
        for rec in records:
            tokens, calls = episode_spend(rec)
            self.tokens += tokens
            self.calls += calls
            self.episode_tokens += tokens
            self.episode_calls += calls
            self.episodes += 1

    def should_stop(self, next_batch: int) -> bool:
        """True once the budget is reached, or when ``next_batch`` more episodes would pass it
        at the mean cost per episode so far."""
        for name, cap, spent, per in (
            ("token", self.budget.tokens, self.tokens, self.episode_tokens),
            ("call", self.budget.calls, self.calls, self.episode_calls),
        ):
            if cap is None:
                continue
            mean = per / self.episodes if self.episodes else 0.0
            if spent >= cap or spent + mean * next_batch > cap:
                self.reason = (
                    f"stopped at its {name} budget: spent {spent:,} of {cap:,} {name}s"
                    + (
                        f" (the next {next_batch} episodes would cost ~{mean * next_batch:,.0f})"
                        if spent < cap
                        else ""
                    )
                )
                return True
        return False

    def describe(self) -> str:
        parts = []
        if self.budget.tokens is not None:
            parts.append(f"tokens {self.tokens:,}/{self.budget.tokens:,}")
        else:
            parts.append(f"tokens {self.tokens:,}")
        if self.budget.calls is not None:
            parts.append(f"calls {self.calls:,}/{self.budget.calls:,}")
        return "  ".join(parts)


class BudgetHooks(TrainHooks):
    """Wraps the run's hooks: counts each batch's spend, stops the loop at the budget."""

    def __init__(self, inner: TrainHooks, meter: BudgetMeter, batch: int):
        self.inner, self.meter, self.batch = inner, meter, batch

    def on_episodes(
        self, results: Sequence[EpisodeResult], state: TrainState, epsilon: float
    ) -> None:
        self.meter.add([r.info["episode"] for r in results])
        self.inner.on_episodes(results, state, epsilon)

    def on_update(self, stats: dict[str, float], state: TrainState) -> None:
        self.inner.on_update(stats, state)

    def should_stop(self) -> bool:
        return self.inner.should_stop() or self.meter.should_stop(self.batch)


# ----------------------------------------------------------------------------- starting points


def init_config(path: Path, config: TrainConfig) -> TrainConfig:
    """``config`` for continuing ``path``'s policy: its network and mixer shapes, and
    exploration that starts where a finished run ends (ε = ``exploration.finish``): the
    policy already knows the simulator, and real episodes are too dear to act at random."""
    ckpt = load_checkpoint(path, "cpu")
    return replace(
        config,
        agent=ckpt.agent_config,
        mixer=ckpt.mixer_config,
        exploration=replace(config.exploration, start=config.exploration.finish),
    )


def initial_state(path: Path, shapes: EnvShapes, config: TrainConfig) -> TrainState:
    """A learner whose networks and target networks start from ``path``'s weights (a fresh
    optimiser); ``config`` comes from :func:`init_config`."""
    ckpt = load_checkpoint(path, "cpu", expect=shapes)
    state = build_state(shapes, config)
    for net, weights in (
        (state.agent, ckpt.agent), (state.mixer, ckpt.mixer),
        (state.learner.target_agent, ckpt.agent), (state.learner.target_mixer, ckpt.mixer),
    ):  # fmt: skip
        net.load_state_dict(weights.state_dict())
    return state


# ----------------------------------------------------------------------------- paid endpoints


def is_local_url(url: str | None) -> bool:
    """True for an endpoint on this machine (127.0.0.1, localhost, ::1)."""
    if not url:
        return False
    try:
        host = urlsplit(url).hostname
    except ValueError:
        return False
    return host in LOCAL_HOSTS


def needs_budget(opts: TeamOptions) -> bool:
    """An OpenAI-compatible endpoint off this machine may bill: it needs a budget."""
    if opts.backend != "openai":
        return False
    return not is_local_url(opts.base_url or os.environ.get("OPENAI_BASE_URL"))


# ----------------------------------------------------------------------------- the estimate


@dataclass
class Estimate:
    """What a run on a real back-end will cost, from :data:`PROBE_CALLS` timed calls."""

    probe_calls: int
    probe_tokens: int
    """Tokens the timed calls cost (counted against the budget)."""
    probe_sent: int
    """Timed calls actually sent (the rest came from the response cache)."""
    tokens_per_call: float
    seconds_per_call: float
    calls_per_episode: int
    """At most: every agent every round, plus the decision agent."""
    episodes: int

    @property
    def calls(self) -> int:
        return self.calls_per_episode * self.episodes

    @property
    def tokens(self) -> float:
        return self.tokens_per_call * self.calls

    @property
    def seconds(self) -> float:
        return self.seconds_per_call * self.calls

    def describe(self, budget: Budget) -> str:
        line = (
            f"estimate for {self.episodes:,} episodes: at most {self.calls:,} calls, "
            f"~{self.tokens:,.0f} tokens, ~{_duration(self.seconds)} "
            f"(from {self.probe_calls} timed first-round calls: {self.tokens_per_call:,.0f} "
            f"tokens and {self.seconds_per_call:.2f} s each; later rounds read peers and cost more"
        )
        if self.probe_sent < self.probe_calls:
            line += f"; {self.probe_calls - self.probe_sent} came from the cache"
        line += ")"
        if budget.tokens is not None and self.tokens_per_call > 0:
            per_episode = self.tokens_per_call * self.calls_per_episode
            line += f"; the token budget covers ~{budget.tokens / per_episode:,.0f} episodes"
        return line


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def probe(opts: TeamOptions, episodes: int, calls: int = PROBE_CALLS) -> Estimate:
    """Time ``calls`` real calls: round 0, solo, agent 0, on the first training tasks (the
    same requests training would send for them, so the cache keeps them)."""
    from core.experiment.options import make_team_env

    env = make_team_env(opts, "train")
    try:
        tokens, sent, seconds, timed = 0, 0, 0.0, 0
        for k in range(calls):
            job = env.job(k)
            turn = AgentTurn(
                task=job.task, agent=0, role=opts.roles[0], round=0, n_rounds=opts.rounds,
                action=Action.SOLO_PROCESS, previous=None, episode_seed=job.seed,
            )  # fmt: skip
            t0 = time.monotonic()
            result = env.loop.run_until_complete(env.backend.agent_turn(turn))
            elapsed = time.monotonic() - t0
            call = result.call
            if call.error is not None:
                # --model, --base-url and the key are openai's; a local server's error
                # names its log.
                hint = ""
                if opts.backend == "openai":
                    hint = "; check --model, --base-url and the API key"
                raise UserError(f"the back-end's first call failed ({call.error}){hint}.")
            if not call.cache_hit:
                sent += 1
                seconds += elapsed
                timed += 1
            tokens += call.prompt_tokens + call.completion_tokens
    finally:
        env.close()
    cached = _cached_usage(env.backend)
    per_call_tokens = (tokens + cached) / calls
    return Estimate(
        probe_calls=calls,
        probe_tokens=tokens,
        probe_sent=sent,
        tokens_per_call=per_call_tokens,
        seconds_per_call=seconds / timed if timed else math.nan,
        calls_per_episode=len(opts.roles) * opts.rounds + 1,
        episodes=episodes,
    )


def _cached_usage(backend: Any) -> int:
    """Usage the back-end served from its cache without counting it (a repeat is free, but
    the estimate should still know what the calls cost the first time)."""
    stats = getattr(backend, "stats", {})
    if getattr(getattr(backend, "config", None), "cache_counts_tokens", False):
        return 0
    return int(stats.get("cached_prompt_tokens", 0) + stats.get("cached_completion_tokens", 0))
