"""Training runs: the learned policy on the agent team, logged to the episode store.

Training and the held-out evaluation after it play their episodes through the same
rollout path (:func:`core.qmix.runner.rollout`); the store logs every episode and every
learner update, and checkpoints let ``--resume`` continue the same run.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from core.errors import UserError
from core.experiment.evaluate import EVAL_THREADS, run_policy
from core.experiment.options import TeamOptions, make_team_env
from core.qmix.checkpoint import load_checkpoint, save_checkpoint
from core.qmix.env import EnvShapes, SerialVecEnv, load_env
from core.qmix.policy import QMixPolicy
from core.qmix.runner import EpisodeResult, rollout_all, summarize
from core.qmix.seeding import torch_threads
from core.qmix.training import TrainConfig, TrainHooks, TrainState, build_state, train
from core.team.summary import summarize_records

HELD_OUT_ENV_EPISODES = 32
"""Greedy held-out episodes played after training on a protocol environment (``--env``)."""


class StoreHooks(TrainHooks):
    """Logs every episode and every update to the episode store; writes checkpoints."""

    def __init__(
        self,
        logger: Any,
        checkpoint_path: Path,
        checkpoint_every: int,
        save: Callable[[TrainState], None],
        stop: Callable[[], bool] | None = None,
    ):
        self.logger, self.checkpoint_path = logger, checkpoint_path
        self.checkpoint_every, self.save, self.stop = checkpoint_every, save, stop
        self.rewards: deque[float] = deque(maxlen=100)
        self.scores: deque[float] = deque(maxlen=100)
        self.tokens: deque[float] = deque(maxlen=100)
        self.pending: list[dict[str, Any]] = []
        self.started = time.perf_counter()
        self.next_checkpoint = checkpoint_every

    def on_episodes(
        self, results: Sequence[EpisodeResult], state: TrainState, epsilon: float
    ) -> None:
        records = [r.info["episode"] for r in results]
        for rec in records:
            self.rewards.append(rec.reward)
            self.scores.append(rec.score)
            self.tokens.append(rec.tokens)
        # The logger numbers the episodes: after a resume, on from the last one stored.
        self.logger.log_episodes(records)
        self.flush()
        if state.episodes_done >= self.next_checkpoint:
            self.save(state)
            self.logger.set_checkpoint(self.checkpoint_path, self.logger.next_episode - 1)
            self.next_checkpoint = state.episodes_done + self.checkpoint_every

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
    env = {"spec": env_spec} if env_spec else {"team": asdict(opts)}
    learner = state.learner
    resume = {
        "episodes_done": state.episodes_done,
        "updates": learner.updates,
        "target_agent": learner.target_agent.state_dict(),
        "target_mixer": learner.target_mixer.state_dict(),
        "optimiser": learner.optimiser.state_dict(),
        "train_config": asdict(config),
    }
    return save_checkpoint(
        path,
        state.agent,
        state.mixer,
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
    state.agent.load_state_dict(ckpt.agent.state_dict())
    state.mixer.load_state_dict(ckpt.mixer.state_dict())
    learner = state.learner
    learner.target_agent.load_state_dict(ckpt.resume["target_agent"])
    learner.target_mixer.load_state_dict(ckpt.resume["target_mixer"])
    learner.optimiser.load_state_dict(ckpt.resume["optimiser"])
    learner.updates = int(ckpt.resume["updates"])
    state.episodes_done = int(ckpt.resume["episodes_done"])
    return state


@dataclass
class TrainOutcome:
    """What a finished (or stopped) training run leaves."""

    state: TrainState
    run_id: str | None
    checkpoint: Path
    evaluation: dict[str, Any] = field(default_factory=dict)


def train_team(
    opts: TeamOptions,
    config: TrainConfig,
    out: Path,
    db: str | None = None,
    log: bool = True,
    progress: Callable[[int, int, dict[str, float]], None] | None = None,
    resume_run: str | None = None,
    stop: Callable[[], bool] | None = None,
    eval_episodes: int = 100,
) -> TrainOutcome:
    """Train the learned policy on the team, logging to the store; evaluate it held-out."""
    from core.store.queries import get_run
    from core.store.writer import RunLogger

    opts.validate()
    team = make_team_env(opts, "train")
    shapes = EnvShapes.of(team)
    state = None
    logger = None
    if resume_run:
        info = get_run(db, resume_run)
        if info is None:
            raise UserError(f"no run {resume_run!r} in the database.")
        state = restore_state(Path(info.checkpoint), shapes, config)
        logger = RunLogger.resume(db, resume_run)
        out = Path(info.checkpoint)
    elif log:
        logger = RunLogger(
            db,
            "train",
            {"team": asdict(opts), "train": asdict(config)},
            backend=opts.backend,
            model=opts.model or opts.preset,
            policy="qmix",
            benchmark=opts.benchmark,
            seed=config.seed,
        )
    config = replace(config, explain=logger is not None)

    def save(st: TrainState) -> None:
        save_training_checkpoint(
            out, st, config, opts, None, {"run_id": logger.run_id if logger else None}
        )

    hooks = (
        StoreHooks(logger, out, max(config.n_envs, config.episodes // 10), save, stop)
        if logger
        else StopHooks(stop)
    )
    status = "interrupted"
    try:
        state = train(team.vectorized, config, hooks=hooks, progress=progress, state=state)
        if isinstance(hooks, StoreHooks):
            hooks.flush()
        save(state)
        if logger:
            logger.set_checkpoint(out, logger.next_episode - 1)
        evaluation = {}
        if eval_episodes > 0:
            policy = QMixPolicy(state.agent, state.mixer, state.device, epsilon=0.0)
            evaluation = summarize_records(run_policy(opts, policy, eval_episodes, opts.seed))
        status = "finished" if state.episodes_done >= config.episodes else "interrupted"
        return TrainOutcome(state, logger.run_id if logger else None, out, evaluation)
    finally:
        team.close()
        if logger:
            logger.close(status)


def train_env(spec: str, config: TrainConfig, out: Path, progress: Any = None) -> dict[str, Any]:
    """Train on any protocol environment (``--env``); greedy held-out return; checkpoint."""

    def make_venv(width: int) -> SerialVecEnv:
        return SerialVecEnv([load_env(spec) for _ in range(width)], config.seed, "train")

    state = train(make_venv, config, progress=progress)
    policy = QMixPolicy(state.agent, state.mixer, state.device, epsilon=0.0)
    width = 8
    venv = SerialVecEnv([load_env(spec) for _ in range(width)], config.seed, "eval")
    with torch_threads(EVAL_THREADS):
        summary = summarize(rollout_all(venv, policy, range(HELD_OUT_ENV_EPISODES), width))
    save_training_checkpoint(out, state, config, None, spec, {"greedy": summary})
    return {
        "checkpoint": str(out),
        "episodes": state.episodes_done,
        "updates": state.learner.updates,
        "held_out": summary,
    }
