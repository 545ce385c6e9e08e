"""Training runs: the learned policy on the agent team, logged to the episode store.

Training and the held-out evaluation after it play their episodes through the same
rollout path (:func:`core.qmix.runner.rollout`); the store logs every episode and every
learner update, and checkpoints let ``--resume`` continue the same run.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from core.errors import BudgetReached, DiskFull, EndpointGone, UserError
from core.experiment.evaluate import EVAL_THREADS, run_policy
from core.experiment.finetune import (
    BudgetHooks,
    BudgetMeter,
    init_config,
    initial_state,
    simulated_episodes,
)
from core.qmix.buffer import ReplayBuffer
from core.qmix.checkpoint import ensure_writable, load_checkpoint, save_checkpoint
from core.qmix.env import EnvShapes, SerialVecEnv, load_env
from core.qmix.runner import EpisodeResult, rollout_all, summarize
from core.qmix.seeding import seed_everything, torch_threads
from core.qmix.training import TrainConfig, TrainHooks, TrainState, build_state, train
from core.team.env import TeamEnv
from core.team.options import TeamOptions
from core.team.recipes import ENV_RECIPE, TEAM_RECIPE
from core.team.summary import summarize_records

HELD_OUT_ENV_EPISODES = 32
"""Greedy held-out episodes played after training on a protocol environment (``--env``)."""
CHECKPOINT_EVERY_S = 30.0
"""Seconds between checkpoints of a logged run (besides one every 10 % of its episodes), so
that a run killed early still has a learner to resume (``--checkpoint-every-s``)."""


class StoreHooks(TrainHooks):
    """Logs every episode and every update to the episode store; writes checkpoints."""

    def __init__(
        self,
        logger: Any,
        checkpoint_path: Path,
        checkpoint_every: int,
        save: Callable[[TrainState], None],
        stop: Callable[[], bool] | None = None,
        checkpoint_every_s: float = CHECKPOINT_EVERY_S,
    ):
        """Checkpoints every ``checkpoint_every`` episodes and every ``checkpoint_every_s``
        seconds, whichever comes first."""
        self.logger, self.checkpoint_path = logger, checkpoint_path
        self.checkpoint_every, self.save, self.stop = checkpoint_every, save, stop
        self.checkpoint_every_s = checkpoint_every_s
        self.last_save = time.monotonic()
        self.rewards: deque[float] = deque(maxlen=100)
        self.scores: deque[float] = deque(maxlen=100)
        self.tokens: deque[float] = deque(maxlen=100)
        self.pending: list[dict[str, Any]] = []
        self.started = time.perf_counter()
        self.next_checkpoint = checkpoint_every
        self.train_tokens = 0
        self.state: TrainState | None = None
        """The learner, once a batch was logged (a run the server's end stops saves it)."""

    def on_episodes(
        self, results: Sequence[EpisodeResult], state: TrainState, epsilon: float
    ) -> None:
        self.state = state
        records = [r.info["episode"] for r in results]
        self.train_tokens += sum(rec.tokens for rec in records)
        for rec in records:
            self.rewards.append(rec.reward)
            self.scores.append(rec.score)
            self.tokens.append(rec.tokens)
        # The logger numbers the episodes: after a resume, on from the last one stored.
        self.logger.log_episodes(records)
        self.flush()
        due = time.monotonic() - self.last_save >= self.checkpoint_every_s
        if due or state.episodes_done >= self.next_checkpoint:
            self.save(state)
            self.logger.set_checkpoint(self.checkpoint_path, self.logger.next_episode - 1)
            self.next_checkpoint = state.episodes_done + self.checkpoint_every
            self.last_save = time.monotonic()

    def on_update(self, stats: dict[str, float], state: TrainState) -> None:
        self.pending.append(
            {
                "step": state.learner.updates,
                "episode": int(stats["episode"]) - 1,
                "loss": stats["loss"],
                "td_error": stats["td_error"],
                "q_tot_mean": stats["q_tot_mean"],
                "epsilon": stats["epsilon"],
                "reward_ma": float(np.mean(self.rewards)) if self.rewards else None,
                "accuracy_ma": float(np.mean(self.scores)) if self.scores else None,
                "tokens_ma": float(np.mean(self.tokens)) if self.tokens else None,
                "grad_norm": stats["grad_norm"],
                "wall_time": time.perf_counter() - self.started,
            }
        )

    def should_stop(self) -> bool:
        return bool(self.stop and self.stop())

    def flush(self) -> None:
        """Log the update rows still waiting (the last batch's have no next batch)."""
        if self.pending:
            self.logger.log_metrics(self.pending)
            self.pending = []


class StopHooks(TrainHooks):
    """No logging; only the stop request (the lab's Stop button, Ctrl-C)."""

    def __init__(self, stop: Callable[[], bool] | None):
        self.stop = stop
        self.train_tokens = 0

    def on_episodes(
        self, results: Sequence[EpisodeResult], state: TrainState, epsilon: float
    ) -> None:
        self.train_tokens += sum(int(r.info.get("tokens", 0)) for r in results)

    def should_stop(self) -> bool:
        return bool(self.stop and self.stop())


def save_training_checkpoint(
    path: Path,
    state: TrainState,
    config: TrainConfig,
    opts: TeamOptions | None,
    env_spec: str | None,
    meta: dict,
) -> Path:
    """A checkpoint that both evaluates (weights, config, shapes) and resumes (targets, optimiser)."""
    from core.store.writer import redact_config

    # Redacted as the run's stored config is: a credentialed --base-url never reaches disk.
    env = {"spec": env_spec} if env_spec else {"team": redact_config(asdict(opts))}
    learner = state.learner
    resume = {
        "episodes_done": state.episodes_done,
        "updates": learner.updates,
        "target_agent": learner.target_agent.state_dict(),
        "target_mixer": learner.target_mixer.state_dict(),
        "optimiser": learner.optimiser.state_dict(),
        "train_config": asdict(config),
    }
    if opts is not None and opts.backend != "sim" and state.buffer is not None:
        # Real episodes cost calls: a resumed fine-tune learns from those it already paid for.
        resume["replay"] = state.buffer.snapshot()
    if learner.policy_agent is not state.agent:
        # The checkpoint's policy is the averaged one (policy_ema); resuming needs the
        # online weights the optimiser was training too.
        resume["online_agent"] = state.agent.state_dict()
        resume["online_mixer"] = state.mixer.state_dict()
    return save_checkpoint(
        path,
        learner.policy_agent,
        learner.policy_mixer,
        state.shapes,
        config.agent,
        config.mixer,
        env=env,
        meta={**meta, "episodes": state.episodes_done, "seed": config.seed},
        resume=resume,
    )


def restore_state(path: Path, shapes: EnvShapes, config: TrainConfig) -> TrainState:
    """Rebuild a :class:`TrainState` from a training checkpoint (``--resume``)."""
    ckpt = load_checkpoint(path, "cpu", expect=shapes)
    if not ckpt.resume:
        raise UserError(f"checkpoint {path} holds no optimiser state to resume from.")
    state = build_state(shapes, config)
    learner = state.learner
    try:
        # The checkpoint's weights are the greedy policy; with policy_ema the online ones
        # are apart (a run saved without it has only the one pair).
        learner.policy_agent.load_state_dict(ckpt.agent.state_dict())
        learner.policy_mixer.load_state_dict(ckpt.mixer.state_dict())
        state.agent.load_state_dict(ckpt.resume.get("online_agent", ckpt.agent.state_dict()))
        state.mixer.load_state_dict(ckpt.resume.get("online_mixer", ckpt.mixer.state_dict()))
        learner.target_agent.load_state_dict(ckpt.resume["target_agent"])
        learner.target_mixer.load_state_dict(ckpt.resume["target_mixer"])
        learner.optimiser.load_state_dict(ckpt.resume["optimiser"])
        learner.updates = int(ckpt.resume["updates"])
        state.episodes_done = int(ckpt.resume["episodes_done"])
        if "replay" in ckpt.resume:
            state.buffer = ReplayBuffer(shapes, config.learner.buffer_size)
            state.buffer.restore(ckpt.resume["replay"])
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise UserError(f"checkpoint {path} holds a learner state that does not fit it.") from exc
    return state


@dataclass
class TrainOutcome:
    """What a finished (or stopped) training run leaves."""

    state: TrainState
    run_id: str | None
    checkpoint: Path
    evaluation: dict[str, Any] = field(default_factory=dict)
    stopped: str | None = None
    """Why the run stopped before its last episode, when it was its budget."""
    train_tokens: int = 0
    """Tokens this session's training episodes spent (a resumed run: since the resume) —
    the training budget in tokens that ``train --method ... --train-tokens`` can match."""


def train_team(
    opts: TeamOptions,
    config: TrainConfig,
    out: Path | None,
    db: str | None = None,
    log: bool = True,
    progress: Callable[[int, int, dict[str, float]], None] | None = None,
    resume_run: str | None = None,
    stop: Callable[[], bool] | None = None,
    eval_episodes: int = 100,
    checkpoint_every_s: float | None = None,
    recipe: str = TEAM_RECIPE,
    init: Path | None = None,
    meter: BudgetMeter | None = None,
) -> TrainOutcome:
    """Train the learned policy on the team, logging to the store; evaluate it held-out.

    ``resume_run`` continues a logged run (``out`` None = where that run wrote its checkpoints).
    ``checkpoint_every_s`` None = :data:`CHECKPOINT_EVERY_S`. ``recipe`` names the recipe
    ``config`` was built from (:mod:`core.team.recipes`); the run and its checkpoints
    store it. ``init`` starts from a checkpoint's policy (:mod:`core.experiment.finetune`);
    ``meter`` stops the run cleanly at its budget.
    """
    from core.store.writer import RunLogger

    opts.validate()
    if checkpoint_every_s is None:
        checkpoint_every_s = CHECKPOINT_EVERY_S
    if not (math.isfinite(checkpoint_every_s) and checkpoint_every_s > 0):
        raise UserError(
            f"--checkpoint-every-s must be a finite number > 0, not {checkpoint_every_s}."
        )
    if out is not None:
        ensure_writable(out)
    team = TeamEnv(opts, "train")
    logger = None
    try:
        state = None
        if resume_run:
            state, out = resumed_state(db, resume_run, out, EnvShapes.of(team), config)
            logger = RunLogger.resume(db, resume_run)
        elif out is None:
            raise UserError("train needs --out CKPT (where to write the checkpoint).")
        elif init is not None:
            config = init_config(init, config)
            state = initial_state(init, EnvShapes.of(team), config)
        if logger is None and log and out is not None:
            extra = {}
            if init is not None or meter is not None:
                extra["finetune"] = {
                    "init": str(Path(init).absolute()) if init is not None else None,
                    "budget": asdict(meter.budget) if meter is not None else None,
                }
            logger = RunLogger(
                db,
                "train",
                {
                    **opts.run_config(),
                    "recipe": recipe,
                    "train": asdict(config),
                    "out": str(out.absolute()),
                    **extra,
                },
                backend=opts.backend,
                model=opts.model_name(),
                policy="qmix",
                benchmark=opts.benchmark,
                seed=config.seed,
            )
    except BaseException:
        team.close()
        raise
    config = replace(config, explain=logger is not None)

    def save(st: TrainState) -> None:
        meta = {"run_id": logger.run_id if logger else None, "recipe": recipe}
        save_training_checkpoint(out, st, config, opts, None, meta)

    every = max(config.n_envs, config.episodes // 10)
    store_hooks = StoreHooks(logger, out, every, save, stop, checkpoint_every_s) if logger else None
    counting = store_hooks or StopHooks(stop)  # both count the training tokens
    hooks: TrainHooks = counting
    if meter is not None:
        hooks = BudgetHooks(hooks, meter)
    status, message = "interrupted", None
    try:
        try:
            state, prefill = _with_prefill(opts, config, team, state)
            state = train(
                team.vectorized, config, hooks=hooks, progress=progress, state=state,
                prefill=prefill,
            )  # fmt: skip
            if store_hooks:
                store_hooks.flush()
            save(state)
            if logger:
                logger.set_checkpoint(out, logger.next_episode - 1)
        except DiskFull as err:
            raise _stopped_for_space(err, logger, out) from err
        evaluation = {}
        # A budgeted run spends nothing past its budget: evaluate it with agentqmix eval.
        if eval_episodes > 0 and meter is None:
            policy = state.greedy_policy()
            evaluation = summarize_records(run_policy(opts, policy, eval_episodes, opts.seed))
        status = "finished" if state.episodes_done >= config.episodes else "interrupted"
        stopped = meter.reason if meter is not None and status == "interrupted" else None
        message = stopped
        return TrainOutcome(
            state,
            logger.run_id if logger else None,
            out,
            evaluation,
            stopped,
            counting.train_tokens,
        )
    except BudgetReached as err:
        # The spend cap refused a call: a budget's stop, not a failure (the batch in
        # flight is not logged; the learner of the last logged one is checkpointed).
        message = str(err)
        if store_hooks is None or store_hooks.state is None:
            raise _stopped_for_endpoint(err, logger, out, store_hooks, save) from err
        _stopped_for_endpoint(err, logger, out, store_hooks, save)
        run_id = logger.run_id if logger else None
        kept = store_hooks.state
        return TrainOutcome(kept, run_id, out, {}, message, counting.train_tokens)
    except EndpointGone as err:
        message = f"stopped: {err}"
        raise _stopped_for_endpoint(err, logger, out, store_hooks, save) from err
    finally:
        team.close()
        if logger:
            logger.close(status, message)


def _with_prefill(
    opts: TeamOptions, config: TrainConfig, team: TeamEnv, state: TrainState | None
) -> tuple[TrainState | None, list[Any]]:
    """The learner to start from and the simulated episodes that start its replay buffer
    (``config.prefill_episodes``, on a real back-end only: on the simulator they would be
    more of the same). A fresh learner is built first so that it plays them."""
    if config.prefill_episodes < 1 or opts.backend == "sim":
        return state, []
    if state is not None and state.buffer is not None:
        return state, []  # resumed: its checkpoint's buffer holds the prefill already
    if state is None:
        seed_everything(config.seed)
        state = build_state(EnvShapes.of(team), config)
    return state, simulated_episodes(opts, state, config)


def _stopped_for_endpoint(
    err: EndpointGone,
    logger: Any,
    out: Path,
    hooks: StoreHooks | None,
    save: Callable[[TrainState], None],
) -> EndpointGone:
    """One sentence for a run the server's end stopped, after checkpointing the learner of
    its last logged batch (the batch in flight was not logged): what is kept, how to go on."""
    if logger is None:
        return EndpointGone(f"{err}; training stopped (--no-log: nothing to resume).")
    kept = ""
    if hooks is not None and hooks.state is not None:
        hooks.flush()
        save(hooks.state)
        logger.set_checkpoint(out, logger.next_episode - 1)
        kept = f" and its checkpoint {out}"
    return EndpointGone(
        f"{err}; run {logger.run_id} stopped with {logger.next_episode} training episodes "
        f"logged{kept}; continue it with `agentqmix train --resume {logger.run_id}`."
    )


def _stopped_for_space(err: DiskFull, logger: Any, out: Path) -> DiskFull:
    """One sentence for a run the full disk stopped: what is kept, how to go on."""
    if logger is None:
        return err
    if logger.stalled:
        return err  # the logger's own sentence says all of it
    return DiskFull(
        f"run {logger.run_id} stopped: cannot write its checkpoint {out} "
        f"({getattr(err.__cause__, 'strerror', None) or 'the disk is full'}); its last "
        f"checkpoint and its first {logger.next_episode} episodes are kept; free some space, "
        f"then continue it with `agentqmix train --resume {logger.run_id}`."
    )


def resumed_state(
    db: str | None, run_id: str, out: Path | None, shapes: EnvShapes, config: TrainConfig
) -> tuple[TrainState, Path]:
    """The learner a stopped run left and where its checkpoints go (``train --resume``).

    The learner is the run's last checkpoint, or a fresh one when the run was killed before
    its first. Either way it continues after the run's last stored episode and metrics step:
    episodes logged after the checkpoint stay (they happened), and no index is used twice.
    """
    from core.store.queries import get_run, last_logged

    info = get_run(db, run_id)
    if info is None:
        raise UserError(f"no run {run_id!r} in the database.")
    if info.checkpoint:
        if not Path(info.checkpoint).is_file():
            raise UserError(
                f"run {run_id}'s checkpoint {info.checkpoint} is missing; put it back to resume."
            )
        state = restore_state(Path(info.checkpoint), shapes, config)
    else:
        seed_everything(config.seed)
        state = build_state(shapes, config)
    recorded = info.checkpoint or info.config.get("out")
    if out is None and not recorded:
        raise UserError(f"run {run_id} recorded no checkpoint path; pass --out CKPT.")
    out = ensure_writable(out if out is not None else Path(recorded))
    last_episode, last_step = last_logged(db, run_id)
    if last_episode is not None:
        state.episodes_done = max(state.episodes_done, last_episode + 1)
    if last_step is not None:
        state.learner.updates = max(state.learner.updates, int(last_step))
    return state, out


def train_env(
    spec: str, config: TrainConfig, out: Path, progress: Any = None, recipe: str = ENV_RECIPE
) -> dict[str, Any]:
    """Train on any protocol environment (``--env``); greedy held-out return; checkpoint
    (its ``meta`` names ``recipe``, the one ``config`` was built from)."""
    ensure_writable(out)

    def make_venv(width: int) -> SerialVecEnv:
        envs = [load_env(spec) for _ in range(width)]
        return SerialVecEnv(envs, config.seed, "train", where=f"--env {spec}")

    state = train(make_venv, config, progress=progress)
    policy = state.greedy_policy()
    width = 8
    envs = [load_env(spec) for _ in range(width)]
    venv = SerialVecEnv(envs, config.seed, "eval", where=f"--env {spec}")
    with torch_threads(EVAL_THREADS):
        summary = summarize(rollout_all(venv, policy, range(HELD_OUT_ENV_EPISODES), width))
    save_training_checkpoint(out, state, config, None, spec, {"greedy": summary, "recipe": recipe})
    return {
        "checkpoint": str(out),
        "recipe": recipe,
        "episodes": state.episodes_done,
        "updates": state.learner.updates,
        "held_out": summary,
    }
