"""Continuing a simulator-trained policy on a real model, within a budget (``train --init``).

* :func:`initial_state` starts the learner from a checkpoint's weights (target networks
  copied, a fresh optimiser) instead of random ones.
* :class:`Budget` caps the tokens and calls a run may spend; :class:`BudgetHooks` stops the
  training loop between two batches, cleanly (every played episode logged, the checkpoint
  written, the run resumable with ``train --resume``), before a batch that would, at the
  mean cost per episode so far, go past the budget — or once it is reached.
* :func:`probe` plays one real episode first (the most talkative fixed topology) so that a
  run can print an estimate of calls, tokens and wall time before it starts, and size its
  first batch by it.
* :func:`needs_budget`: an endpoint that may bill (``--backend openai`` anywhere but this
  machine) does not start without a budget.
* :func:`simulated_episodes` plays the episodes that start a fine-tune's replay buffer
  (``TrainConfig.prefill_episodes``, the ``finetune`` recipe) on the simulator, so that a
  real run updates from its first episode on.

Spending counts what the episodes logged: tokens as the server reported them, and calls
not served from the response cache (a repeated run is free; a cache hit counts neither).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import torch

from core.backends.spend import SpendMeter
from core.errors import UserError
from core.qmix.checkpoint import load_checkpoint
from core.qmix.env import EnvShapes
from core.qmix.runner import EpisodeResult
from core.qmix.training import TrainConfig, TrainHooks, TrainState, build_state
from core.records import EpisodeRecord
from core.team.options import TeamOptions

LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


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

    def run_config(self) -> dict[str, Any]:
        """What a run stores of its budget (``config["budget"]``; nothing without one): the
        lab and ``agentqmix runs`` show its spend against it."""
        return {"budget": asdict(self)} if self.given else {}


def episode_spend(record: EpisodeRecord) -> tuple[int, int]:
    """(tokens, calls) an episode cost: its logged tokens, its calls not served from the cache."""
    tokens = sum(c.prompt_tokens + c.completion_tokens for c in record.calls)
    calls = sum(not c.cache_hit for c in record.calls)
    return tokens, calls


class BudgetMeter:
    """Running spend of one run against its :class:`Budget`, and how many episodes the next
    batch may hold.

    ``spend`` is the run's hard cap on a real back-end (:mod:`core.backends.spend`): what
    the server billed, live, probe and unlogged episodes included; without one (the
    simulator), the logged episodes' spend. ``prior`` is a probe's estimate of one
    episode's (tokens, calls), used until episodes of the run have been counted; without
    either, the run plays one episode at a time until the mean is known."""

    def __init__(
        self,
        budget: Budget,
        tokens: int = 0,
        calls: int = 0,
        spend: SpendMeter | None = None,
        prior: tuple[float, float] | None = None,
    ):
        self.budget, self.spend, self.prior = budget, spend, prior
        self._tokens, self._calls = tokens, calls
        self.episodes = 0
        self.episode_tokens = 0
        self.episode_calls = 0
        self.reason: str | None = None
        """Why the run stopped at its budget (None while it has not)."""

    @property
    def tokens(self) -> int:
        return self.spend.read().tokens if self.spend is not None else self._tokens

    @property
    def calls(self) -> int:
        return self.spend.read().calls if self.spend is not None else self._calls

    def freeze(self) -> None:
        """Keep the spend as it is now, and let go of the spend file (it is removed)."""
        if self.spend is not None:
            self._tokens, self._calls = self.tokens, self.calls
            self.spend = None

    def add(self, records: Sequence[EpisodeRecord]) -> None:
        for rec in records:
            tokens, calls = episode_spend(rec)
            self._tokens += tokens
            self._calls += calls
            self.episode_tokens += tokens
            self.episode_calls += calls
            self.episodes += 1

    def per_episode(self) -> tuple[float, float] | None:
        """(tokens, calls) one episode costs: the mean so far, else the prior, else None."""
        if self.episodes:
            return self.episode_tokens / self.episodes, self.episode_calls / self.episodes
        return self.prior

    def batch_size(self, n: int) -> int:
        """How many of ``n`` episodes fit what is left of the budget at :meth:`per_episode`
        (1 while that is unknown); 0 = stop, with :attr:`reason` set."""
        fit, why = self._fit(n)
        if fit == 0:
            self.reason = why
        return fit

    def should_stop(self, next_batch: int = 1) -> bool:
        """True once ``next_batch`` more episodes (at the mean cost, when it is known) would
        pass the budget, or it is spent; :attr:`reason` says which."""
        fit, why = self._fit(next_batch)
        if fit == 0 or (self.per_episode() is not None and fit < next_batch):
            self.reason = why
            return True
        return False

    def _fit(self, n: int) -> tuple[int, str | None]:
        per = self.per_episode()
        fit, why = (n if per is not None else min(n, 1)), None
        for name, cap, spent, cost in self._caps(per):
            if cap is None:
                continue
            room = n if cost <= 0 else int(max(cap - spent, 0) // cost)
            if spent >= cap:
                room = 0
            if room < n:
                why = f"stopped at its {name} budget: spent {spent:,} of {cap:,} {name}s"
                if spent < cap:
                    why += f" (an episode costs ~{cost:,.0f})"
            fit = min(fit, room)
        return fit, why

    def _caps(self, per: tuple[float, float] | None) -> list[tuple[str, int | None, int, float]]:
        tokens, calls = per or (0.0, 0.0)
        return [
            ("token", self.budget.tokens, self.tokens, tokens),
            ("call", self.budget.calls, self.calls, calls),
        ]

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

    def __init__(self, inner: TrainHooks, meter: BudgetMeter):
        self.inner, self.meter = inner, meter

    def on_episodes(
        self, results: Sequence[EpisodeResult], state: TrainState, epsilon: float
    ) -> None:
        self.meter.add([r.info["episode"] for r in results])
        self.inner.on_episodes(results, state, epsilon)

    def on_update(self, stats: dict[str, float], state: TrainState) -> None:
        self.inner.on_update(stats, state)

    def should_stop(self) -> bool:
        return self.inner.should_stop() or self.meter.should_stop()

    def batch_size(self, n: int) -> int:
        return self.meter.batch_size(self.inner.batch_size(n))


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
        (state.learner.policy_agent, ckpt.agent), (state.learner.policy_mixer, ckpt.mixer),
    ):  # fmt: skip
        net.load_state_dict(weights.state_dict())
    return state


PREFILL_FIRST = 1_000_000_000
"""Index of the first simulated episode of a buffer's prefill: far past any run's own
episodes, so that they draw other seeds than the real episodes that follow."""


def simulated_episodes(opts: TeamOptions, state: TrainState, config: TrainConfig) -> list[Any]:
    """``config.prefill_episodes`` episodes of ``opts``'s training stream played on the
    simulator — ``opts``'s society: its preset, or the calibrated society of ``--society`` —
    by ``state``'s policy at the run's first ε; their recorders, for the replay buffer.

    The simulator stands in for the real model's episodes until enough of those are
    buffered; nothing is sent to a server and nothing is logged."""
    from core.qmix.policy import QMixPolicy
    from core.qmix.runner import rollout_all
    from core.team.env import TeamEnv

    n = config.prefill_episodes
    if n < 1:
        return []
    sim = TeamEnv(replace(opts, backend="sim"), "train")
    try:
        explore = torch.Generator().manual_seed(config.seed + 7_919)
        policy = QMixPolicy(
            state.agent, state.mixer, state.device, config.exploration.start, explore
        )
        width = min(n, 32)
        episodes = range(PREFILL_FIRST, PREFILL_FIRST + n)
        results = rollout_all(sim.vectorized(width), policy, episodes, width)
    finally:
        sim.close()
    return [r.recorder for r in results]


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

PROBE_POLICY = "full"
"""The fixed topology a probe episode is played with: every agent reads every other in
every round, the most talkative team, so the estimate is one a run should stay under."""


@dataclass
class Estimate:
    """What a run on a real back-end will cost, from one probe episode it played first."""

    episodes: int
    """Episodes the run will play."""
    tokens_per_episode: float
    """The probe episode's tokens (as the server reported them, cache hits included)."""
    calls_per_episode: int
    """The probe episode's calls (every round's, the decision agent's and checks')."""
    seconds_per_episode: float
    """The probe episode's wall time (NaN when every call came from the cache)."""
    at_once: int
    """Episodes the run plays at once (1 on a server that decodes one call at a time)."""
    probed: str
    """What played the probe episode, in words."""
    probe_tokens: int
    """Tokens the probe was billed (counted against the budget)."""
    probe_calls: int
    """Calls the probe sent (the rest came from the response cache)."""

    @property
    def calls(self) -> int:
        return self.calls_per_episode * self.episodes

    @property
    def tokens(self) -> float:
        return self.tokens_per_episode * self.episodes

    @property
    def seconds(self) -> float:
        return self.seconds_per_episode * math.ceil(self.episodes / self.at_once)

    def describe(self, budget: Budget) -> str:
        line = (
            f"estimate for {self.episodes:,} episodes: ~{self.calls:,} calls, "
            f"~{self.tokens:,.0f} tokens, ~{_duration(self.seconds)} (measured: one probe "
            f"episode of {self.probed}, cost "
            f"{self.calls_per_episode} calls, {self.tokens_per_episode:,.0f} tokens and "
            f"{_duration(self.seconds_per_episode)}; times {self.episodes:,} episodes, "
            f"{self.at_once} at once"
        )
        if self.probe_calls < self.calls_per_episode:
            line += (
                f"; {self.calls_per_episode - self.probe_calls} of its calls came from the cache"
            )
        line += ")"
        if budget.tokens is not None and self.tokens_per_episode > 0:
            line += (
                f"; the token budget covers ~{budget.tokens / self.tokens_per_episode:,.0f} "
                "episodes"
            )
        if budget.calls is not None and self.calls_per_episode > 0:
            line += f"; the call budget ~{budget.calls / self.calls_per_episode:,.0f}"
        return line

    def prior(self) -> tuple[float, float]:
        """One episode's (tokens, calls): what a :class:`BudgetMeter` sizes its first batch by."""
        return self.tokens_per_episode, float(self.calls_per_episode)


def arithmetic_estimate(opts: TeamOptions, episodes: int) -> str:
    """What a run of ``episodes`` episodes can cost at most, by arithmetic alone (nothing is
    sent): every agent calls in every round, each call followed by a check call
    (execute_verify), and the decision agent; each completion at its cap. Prompts and wall
    time need a probe episode, which a budget brings."""
    from core.backends.registry import prompt_settings
    from core.tasks.registry import benchmark_domains

    caps = (prompt_settings(opts) or {}).get("max_tokens", {})
    domains = benchmark_domains(opts.benchmark, opts.seed)

    def cap(kind: str) -> int:
        return max(caps.get(f"{d}/{kind}", opts.max_tokens or 256) for d in domains)

    turns = len(opts.roles) * opts.rounds
    calls = 2 * turns + 1
    completion = turns * (cap("agent") + cap("check")) + cap("decision")
    return (
        f"estimate for {episodes:,} episodes (arithmetic, nothing sent): at most "
        f"{calls * episodes:,} calls and {completion * episodes:,} completion tokens (every "
        f"agent in every round with a check call, the decision agent, each reply at its cap), "
        "plus the prompts; prompts and wall time are measured by a probe episode, which "
        "--budget-tokens/--budget-calls bring"
    )


def _duration(seconds: float) -> str:
    if math.isnan(seconds):
        return "? s"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def probe(
    opts: TeamOptions,
    episodes: int,
    split: str = "train",
    policy: Any = None,
    probed: str = f"the {PROBE_POLICY} topology (the most talkative)",
    in_flight: int | None = None,
) -> Estimate:
    """Play episode 0 of ``split`` once with ``policy`` (what the run will play, when there
    is one; None = :data:`PROBE_POLICY`), not logged, and scale it up. Its requests are the
    run's own for that episode, so the response cache keeps them for the run.
    ``in_flight``: how many episodes the run plays at once (a training recipe's
    ``n_envs``); None = as many as ``--concurrency`` allows (an evaluation)."""
    from core.team.env import TeamEnv
    from core.team.topologies import make_policy

    env = TeamEnv(opts, split)
    try:
        t0 = time.monotonic()
        record = env.run(policy or make_policy(PROBE_POLICY), [0], width=1)[0]
        elapsed = time.monotonic() - t0
    finally:
        env.close()
    calls = record.calls
    failed = [c for c in calls if c.error is not None]
    if calls and len(failed) == len(calls):
        # --model, --base-url and the key are openai's; a local server's error names its log.
        hint = "; check --model, --base-url and the API key" if opts.backend == "openai" else ""
        raise UserError(f"the back-end's first calls failed ({failed[0].error}){hint}.")
    billed, sent = episode_spend(record)
    serial = bool(getattr(env.backend, "serial", False))
    return Estimate(
        episodes=episodes,
        tokens_per_episode=billed + _cached_usage(env.backend),
        calls_per_episode=len(calls),
        seconds_per_episode=elapsed if sent else math.nan,
        at_once=1 if serial else min(opts.concurrency, in_flight or opts.concurrency),
        probed=probed,
        probe_tokens=billed,
        probe_calls=sent,
    )


def _cached_usage(backend: Any) -> int:
    """Usage the back-end served from its cache without counting it (a repeat is free, but
    the estimate should still know what the calls cost the first time)."""
    stats = getattr(backend, "stats", {})
    if getattr(getattr(backend, "config", None), "cache_counts_tokens", False):
        return 0
    return int(stats.get("cached_prompt_tokens", 0) + stats.get("cached_completion_tokens", 0))
