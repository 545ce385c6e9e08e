"""Logged training runs of the learned-topology methods (:mod:`core.baselines`), made like
Agent Q-Mix's (:mod:`core.experiment.train`): the same team options, the same training
split, every training episode and optimiser step in the store, a checkpoint, then the
greedy policy on held-out episodes.

A run stores ``config = {"team": ..., "method": {"name", "config"}, "train": ..., "out": ...}``
and ``policy`` = the method's name; its checkpoint is listed by the lab like any other.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from core.baselines.checkpoint import save_method
from core.baselines.method import GraphMethod, MethodConfig, Stage
from core.baselines.names import METHOD_NAMES
from core.baselines.registry import build_method, check_protocol
from core.baselines.training import BaselineHooks, BaselineState, BaselineTrainConfig, train_method
from core.errors import EndpointGone, UserError
from core.experiment.finetune import BudgetMeter
from core.experiment.policies import baseline_policy, team_shape
from core.qmix.checkpoint import ensure_writable
from core.qmix.runner import EpisodeResult
from core.team.embedding import make_embedder
from core.team.env import TeamEnv
from core.team.options import TeamOptions
from core.team.summary import summarize_records

LEARNED_METHODS = ("qmix", *METHOD_NAMES)
"""``agentqmix train --method``: Agent Q-Mix (the default) or a learned-topology method."""


class BaselineStoreHooks(BaselineHooks):
    """Logs every training episode and optimiser step to the store; notes stage changes."""

    def __init__(self, logger: Any, stop: Callable[[], bool] | None = None):
        self.logger, self.stop = logger, stop
        self.rewards: deque[float] = deque(maxlen=100)
        self.scores: deque[float] = deque(maxlen=100)
        self.tokens: deque[float] = deque(maxlen=100)
        self.started = time.perf_counter()

    def on_episodes(self, results: Sequence[EpisodeResult], state: BaselineState) -> None:
        records = [r.info["episode"] for r in results]
        for rec in records:
            self.rewards.append(rec.reward)
            self.scores.append(rec.score)
            self.tokens.append(rec.tokens)
        self.logger.log_episodes(records)

    def on_update(self, stats: dict[str, float], state: BaselineState) -> None:
        self.logger.log_metrics(
            [
                {
                    "step": state.updates,
                    "episode": state.episodes_done - 1,
                    "loss": stats["loss"],
                    "reward_ma": float(np.mean(self.rewards)),
                    "accuracy_ma": float(np.mean(self.scores)),
                    "tokens_ma": float(np.mean(self.tokens)),
                    "grad_norm": stats["grad_norm"],
                    "wall_time": time.perf_counter() - self.started,
                }
            ]
        )

    def should_stop(self) -> bool:
        return bool(self.stop and self.stop())


class BaselineBudgetHooks(BaselineHooks):
    """Wraps a run's hooks: counts each batch's spend and stops training at the budget
    (what :class:`~core.experiment.finetune.BudgetHooks` does for Agent Q-Mix)."""

    def __init__(self, inner: BaselineHooks, meter: BudgetMeter):
        self.inner, self.meter = inner, meter

    def on_episodes(self, results: Sequence[EpisodeResult], state: BaselineState) -> None:
        self.meter.add([r.info["episode"] for r in results])
        self.inner.on_episodes(results, state)

    def on_update(self, stats: dict[str, float], state: BaselineState) -> None:
        self.inner.on_update(stats, state)

    def on_stage(self, stage: Stage, state: BaselineState) -> None:
        self.inner.on_stage(stage, state)

    def should_stop(self) -> bool:
        return self.inner.should_stop() or self.meter.should_stop()

    def batch_size(self, n: int) -> int:
        return self.meter.batch_size(self.inner.batch_size(n))


@dataclass
class BaselineOutcome:
    """What a finished (or stopped) training run of a learned-topology method leaves."""

    state: BaselineState
    run_id: str | None
    checkpoint: Path
    evaluation: dict[str, Any] = field(default_factory=dict)
    stopped: str | None = None
    """Why training stopped before its budget in episodes, when it was ``meter``'s budget."""


def train_baseline(
    opts: TeamOptions,
    method_name: str,
    method_config: MethodConfig,
    config: BaselineTrainConfig,
    out: Path,
    db: str | None = None,
    log: bool = True,
    progress: Callable[[int, int, dict[str, float]], None] | None = None,
    stop: Callable[[], bool] | None = None,
    eval_episodes: int = 100,
    hooks: BaselineHooks | None = None,
    meter: BudgetMeter | None = None,
) -> BaselineOutcome:
    """Train ``method_name`` on the team's training split, log it, write ``out``, then play
    its decoded graphs on ``eval_episodes`` held-out episodes (stream ``opts.seed``).
    ``hooks`` replaces the store's (a sweep trial keeps its episodes in memory). ``meter``
    stops training cleanly at its budget (the checkpoint written, no held-out evaluation:
    it would spend past the budget), as it does Agent Q-Mix's."""
    from core.store.writer import RunLogger, redact_config

    opts.validate()
    try:
        config.validate()
    except ValueError as exc:
        raise UserError(f"{exc}.") from None
    ensure_writable(out)
    check_protocol(method_config, opts.actions)
    method = new_method(method_name, method_config, opts, config.seed)
    logger = None
    if log and hooks is None:
        budget = {"finetune": {"init": None, "budget": asdict(meter.budget)}} if meter else {}
        logger = RunLogger(
            db,
            "train",
            {
                **opts.run_config(),
                "method": {"name": method_name, "config": config_dict(method_config)},
                "train": asdict(config),
                "out": str(out.absolute()),
                **budget,
            },
            backend=opts.backend,
            model=opts.model_name(),
            policy=method_name,
            benchmark=opts.benchmark,
            seed=config.seed,
        )
        hooks = BaselineStoreHooks(logger, stop)
    hooks = hooks or BaselineHooks()
    if meter is not None:
        hooks = BaselineBudgetHooks(hooks, meter)
    team = TeamEnv(opts, "train")
    status, stopped, saved = "interrupted", None, False
    try:
        state = train_method(team.vectorized, method, config, hooks, progress)
        meta = {
            "run_id": logger.run_id if logger else None,
            "episodes": state.episodes_done,
            "updates": state.updates,
            "train_tokens": state.tokens,
            "seed": config.seed,
            "stages": [stage_dict(s) for s in state.stages],
            "graph": method.summary(),
        }
        save_method(out, method, redact_config(asdict(opts)), meta)
        saved = True
        if logger:
            logger.set_checkpoint(out, logger.next_episode - 1)
        evaluation = {}
        if eval_episodes > 0 and meter is None:
            from core.experiment.evaluate import run_policy

            records = run_policy(opts, baseline_policy(out, opts), eval_episodes, opts.seed)
            evaluation = summarize_records(records)
        status = "finished" if state.budget_used(config) >= config.episodes else "interrupted"
        stopped = meter.reason if meter is not None and status == "interrupted" else None
        run_id = logger.run_id if logger else None
        return BaselineOutcome(state, run_id, out, evaluation, stopped)
    except EndpointGone as err:
        stopped = f"stopped: {err}"
        if logger is None:
            raise
        # The batch in flight was not logged; a method keeps no learner state to resume.
        after = (
            f"its checkpoint is written: `agentqmix eval --checkpoint {out}` evaluates it"
            if saved
            else "a learned-topology method does not resume: train it again"
        )
        raise EndpointGone(
            f"{err}; run {logger.run_id} stopped with {logger.next_episode} training episodes "
            f"logged; {after}."
        ) from err
    finally:
        team.close()
        if logger:
            logger.close(status, stopped)


def new_method(name: str, config: MethodConfig, opts: TeamOptions, seed: int) -> GraphMethod:
    """A freshly initialised method for the team of ``opts`` (seeded: G-Designer's weights)."""
    import torch

    torch.manual_seed(seed)
    embed = make_embedder(opts.embedding, opts.embedding_dim) if name == "gdesigner" else None
    return build_method(name, config, team_shape(opts), embed)


def config_dict(config: MethodConfig) -> dict[str, Any]:
    return {f.name: getattr(config, f.name) for f in fields(config)}


def stage_dict(stage: Stage) -> dict[str, Any]:
    return {"episode": stage.episode, "what": stage.what, **stage.detail}
