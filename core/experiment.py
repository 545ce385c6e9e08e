"""The one place that turns options into objects: back-ends, team environments,
policies, and logged training / evaluation / comparison runs.

The CLI, the lab's worker and the benchmarks all go through here, so a run made
anywhere is built and logged the same way.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from core.backends.base import Backend
from core.checkpoint import load_checkpoint, save_checkpoint
from core.controller import ExplorationConfig
from core.encoders import AgentNetConfig
from core.env import EnvShapes
from core.errors import UserError
from core.learner import LearnerConfig
from core.mixers import MixerConfig
from core.policy import QMixPolicy
from core.records import EpisodeRecord
from core.runner import EpisodeResult, summarize_records
from core.team.env import TeamEnv, TeamEnvConfig
from core.team.failures import FailureSpec, parse_failures
from core.team.plan import TeamPolicy
from core.team.runtime import DEFAULT_ROLES
from core.team.topologies import FIXED_TOPOLOGIES, make_policy
from core.training import TrainConfig, TrainHooks, TrainState, build_state, train

BACKENDS = ("sim", "openai")


@dataclass
class TeamOptions:
    """What defines the team and where its answers come from (CLI flags map 1:1)."""

    benchmark: str = "mixed"
    """Task source: math, code, mcq, mixed or jsonl:PATH."""
    backend: str = "sim"
    """``sim`` (the synthetic society, offline) or ``openai`` (any compatible endpoint)."""
    preset: str = "flash-lite"
    """Synthetic-society preset (sim only)."""
    model: str | None = None
    """Model name (openai only)."""
    base_url: str | None = None
    """Endpoint (openai only); None = $OPENAI_BASE_URL or OpenAI."""
    roles: tuple[str, ...] = DEFAULT_ROLES
    """One role per agent."""
    rounds: int = 3
    """Communication rounds per episode."""
    token_weight: float = 0.1
    """w_tok in the reward."""
    token_budget: float | None = None
    """Tokens at which the token penalty saturates; None = the back-end's default."""
    fail_prob: float = 0.0
    """Random failure curriculum: per episode, each agent fails with this probability."""
    failures: str = ""
    """Injected failures, ``AGENT:MODE[@ROUND],...``."""
    seed: int = 0
    """Seeds the task order, episode seeds and failures."""
    embedding: str = "hash"
    """Task embedding: hash (offline n-gram hashing) or minilm."""
    concurrency: int = 8
    """Episodes (and, for openai, calls) in flight at once."""
    use_cache: bool = True
    """openai: read/write the response cache."""
    cache_counts_tokens: bool = False
    """openai: cache hits count against the token budget."""
    cache_dir: str | None = None
    """openai: response cache directory."""
    timeout_s: float = 60.0
    """openai: per-attempt timeout."""
    max_attempts: int = 4
    """openai: attempts per call."""

    def validate(self) -> None:
        if self.backend not in BACKENDS:
            raise UserError(
                f"--backend must be one of {', '.join(BACKENDS)}, not {self.backend!r}."
            )
        if self.backend == "openai" and not self.model:
            raise UserError(
                "--backend openai needs --model NAME (the model as the server knows it)."
            )
        if self.rounds < 1:
            raise UserError(f"--rounds must be at least 1, not {self.rounds}.")
        if not self.roles:
            raise UserError("--agents needs at least one role.")
        if not 0.0 <= self.fail_prob < 1.0:
            raise UserError(f"--fail-prob must be in [0, 1), not {self.fail_prob}.")
        if self.concurrency < 1:
            raise UserError(f"--concurrency must be at least 1, not {self.concurrency}.")

    def failure_specs(self) -> tuple[FailureSpec, ...]:
        return (
            tuple(parse_failures(self.failures, self.roles, self.rounds)) if self.failures else ()
        )


def make_backend(opts: TeamOptions) -> Backend | None:
    """The back-end object; None for ``sim`` (the team environment builds its own)."""
    if opts.backend == "sim":
        return None
    from core.backends.openai_backend import OpenAIBackend, OpenAIBackendConfig

    return OpenAIBackend(
        OpenAIBackendConfig(
            model=opts.model or "",
            base_url=opts.base_url,
            concurrency=opts.concurrency,
            use_cache=opts.use_cache,
            cache_counts_tokens=opts.cache_counts_tokens,
            cache_dir=opts.cache_dir,
            timeout_s=opts.timeout_s,
            max_attempts=opts.max_attempts,
        )
    )


def make_team_env(opts: TeamOptions, split: str | None) -> TeamEnv:
    """A team environment on one side (``train``/``eval``) of the benchmark's held-out split."""
    opts.validate()
    config = TeamEnvConfig(
        benchmark=opts.benchmark,
        split=split,
        roles=tuple(opts.roles),
        rounds=opts.rounds,
        backend=opts.backend,
        preset=opts.preset,
        token_weight=opts.token_weight,
        token_budget=opts.token_budget,
        fail_prob=opts.fail_prob,
        failures=opts.failure_specs(),
        seed=opts.seed,
        embedding=opts.embedding,
    )
    try:
        config.validate()
    except ValueError as exc:
        raise UserError(f"{exc}.") from exc
    return TeamEnv(config, backend=make_backend(opts))


def options_from_dict(d: dict[str, Any]) -> TeamOptions:
    known = {k: v for k, v in d.items() if k in TeamOptions.__dataclass_fields__}
    if "roles" in known:
        known["roles"] = tuple(known["roles"])
    return TeamOptions(**known)


def train_config_from_dict(d: dict[str, Any]) -> TrainConfig:
    return TrainConfig(
        **{k: v for k, v in d.items() if k not in ("agent", "mixer", "learner", "exploration")},
        agent=AgentNetConfig(**d.get("agent", {})),
        mixer=MixerConfig(**d.get("mixer", {})),
        learner=LearnerConfig(**d.get("learner", {})),
        exploration=ExplorationConfig(**d.get("exploration", {})),
    )


# --------------------------------------------------------------------------- training


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
        records = [r.record for r in results if r.record is not None]
        for rec in records:
            self.rewards.append(rec.reward)
            self.scores.append(rec.score)
            self.tokens.append(rec.tokens)
        # The logger numbers the episodes: after a resume, on from the last one stored.
        self.logger.log_episodes(records)
        if self.pending:
            self.logger.log_metrics(self.pending)
            self.pending = []
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
    probe = make_team_env(opts, "train")
    shapes = EnvShapes.of(probe)
    probe.close()
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
        else _StopHooks(stop)
    )
    status = "interrupted"
    try:
        state = train(
            lambda: make_team_env(opts, "train"),
            config,
            hooks=hooks,
            progress=progress,
            state=state,
        )
        save(state)
        if logger:
            logger.set_checkpoint(out, logger.next_episode - 1)
        evaluation = {}
        if eval_episodes > 0:
            if config.cpu_threads and state.device.type == "cpu":
                torch.set_num_threads(config.cpu_threads)
            policy = QMixPolicy(state.agent, state.mixer, state.device, epsilon=0.0)
            records = run_policy(opts, policy, eval_episodes, opts.seed)
            evaluation = summarize_records(records)
        status = "finished" if state.episodes_done >= config.episodes else "interrupted"
        return TrainOutcome(state, logger.run_id if logger else None, out, evaluation)
    except BaseException:
        status = "interrupted"
        raise
    finally:
        if logger:
            logger.close(status)


class _StopHooks(TrainHooks):
    def __init__(self, stop: Callable[[], bool] | None):
        self.stop = stop

    def should_stop(self) -> bool:
        return bool(self.stop and self.stop())


# --------------------------------------------------------------------------- evaluation


def learned_policy(checkpoint: Path, opts: TeamOptions, device: str = "auto") -> QMixPolicy:
    """The greedy decentralised policy from a checkpoint, checked against the team's shapes."""
    from core.seeding import resolve_device

    env = make_team_env(opts, "eval")
    shapes = EnvShapes.of(env)
    env.close()
    dev = resolve_device(device)
    if dev.type == "cpu":
        # Batch-1 forwards of a small network: extra threads only add contention.
        torch.set_num_threads(1)
    ckpt = load_checkpoint(checkpoint, dev, expect=shapes)
    return QMixPolicy(ckpt.agent, ckpt.mixer, dev, epsilon=0.0, label="qmix")


def resolve_policy(
    name: str | None, checkpoint: Path | None, opts: TeamOptions, device: str = "auto"
) -> TeamPolicy:
    if (name is None) == (checkpoint is None):
        raise UserError("give exactly one of --checkpoint CKPT or --policy NAME.")
    if checkpoint is not None:
        return learned_policy(checkpoint, opts, device)
    return make_policy(name)


def run_policy(
    opts: TeamOptions,
    policy: TeamPolicy,
    episodes: int,
    seed: int,
    failures: Sequence[FailureSpec] | None = None,
    first: int = 0,
) -> list[EpisodeRecord]:
    """Play ``episodes`` held-out episodes (indices ``first..``) with ``policy``."""
    env = make_team_env(replace(opts, seed=seed), "eval")
    try:
        return env.run(
            policy,
            list(range(first, first + episodes)),
            concurrency=opts.concurrency,
            failures=failures,
        )
    finally:
        env.close()


def evaluate_team(
    opts: TeamOptions,
    policy: TeamPolicy,
    episodes: int,
    seed: int,
    db: str | None = None,
    log: bool = True,
    kind: str = "eval",
    extra_config: dict[str, Any] | None = None,
    first: int = 0,
) -> tuple[dict[str, Any], list[EpisodeRecord]]:
    """Evaluate one policy on held-out episodes ``first..first+episodes-1``; log them as one run."""
    records = run_policy(opts, policy, episodes, seed, first=first)
    summary = {"policy": policy.name, **summarize_records(records), "episodes": len(records)}
    summary["mean_return"] = summary["mean_reward"]
    if log:
        summary["run_id"] = log_run(db, kind, opts, policy.name, seed, records, extra_config)
    return summary, records


def log_run(
    db: str | None,
    kind: str,
    opts: TeamOptions,
    policy: str,
    seed: int,
    records: Sequence[EpisodeRecord],
    extra_config: dict[str, Any] | None = None,
) -> str:
    from core.store.writer import RunLogger

    with RunLogger(
        db,
        kind,
        {"team": asdict(opts), **(extra_config or {})},
        backend=opts.backend,
        model=opts.model or opts.preset,
        policy=policy,
        benchmark=opts.benchmark,
        seed=seed,
    ) as logger:
        logger.log_episodes(records)
        run_id = logger.run_id
    return run_id


def compare_team(
    opts: TeamOptions,
    checkpoint: Path | None,
    episodes: int,
    seed: int,
    db: str | None = None,
    log: bool = True,
    device: str = "auto",
    topologies: Sequence[str] = tuple(FIXED_TOPOLOGIES),
) -> list[dict[str, Any]]:
    """The learned policy and every fixed topology on the same held-out episodes."""
    policies: list[TeamPolicy] = []
    if checkpoint is not None:
        policies.append(learned_policy(checkpoint, opts, device))
    policies += [make_policy(name) for name in topologies]
    rows = []
    all_records: list[EpisodeRecord] = []
    for policy in policies:
        records = run_policy(opts, policy, episodes, seed)
        all_records += records
        rows.append({"policy": policy.name, **summarize_records(records), "episodes": len(records)})
    if log:
        run_id = log_run(db, "compare", opts, "compare", seed, all_records)
        for row in rows:
            row["run_id"] = run_id
    return rows


def robustness_team(
    opts: TeamOptions,
    checkpoint: Path | None,
    episodes: int,
    seed: int,
    max_failed: int,
    mode: str = "crash",
    db: str | None = None,
    log: bool = True,
    device: str = "auto",
    topologies: Sequence[str] = tuple(FIXED_TOPOLOGIES),
) -> list[dict[str, Any]]:
    """Accuracy and reward against the number of failed agents (from round 0), per policy.

    With ``k`` failed agents, each episode fails ``k`` agents chosen by the episode index
    (the same agents for every policy), so the comparison is like for like.
    """
    n = len(opts.roles)
    if not 0 <= max_failed < n:
        raise UserError(f"--max-failed must be between 0 and {n - 1} for a team of {n}.")
    policies: list[TeamPolicy] = []
    if checkpoint is not None:
        policies.append(learned_policy(checkpoint, opts, device))
    policies += [make_policy(name) for name in topologies]
    rows, all_records = [], []
    env = make_team_env(replace(opts, seed=seed), "eval")
    try:
        for k in range(max_failed + 1):
            for policy in policies:
                records: list[EpisodeRecord] = []
                # Episode i fails agents i, i+1, ... (mod n): group episodes by that set.
                for offset in range(min(n, episodes) if k else 1):
                    indices = list(range(offset, episodes, n)) if k else list(range(episodes))
                    fails = [
                        FailureSpec(agent=(offset + j) % n, mode=mode, from_round=0)
                        for j in range(k)
                    ]
                    records += env.run(
                        policy, indices, concurrency=opts.concurrency, failures=fails
                    )
                all_records += records
                summary = summarize_records(records)
                rows.append(
                    {
                        "policy": policy.name,
                        "failed_agents": k,
                        "mode": mode,
                        **summary,
                        "episodes": len(records),
                    }
                )
    finally:
        env.close()
    if log:
        run_id = log_run(
            db, "compare", opts, "robustness", seed, all_records, {"robustness": {"mode": mode}}
        )
        for row in rows:
            row["run_id"] = run_id
    return rows


def tensor_free(d: dict[str, Any]) -> dict[str, Any]:
    """A summary without numpy/torch scalars, for JSON."""
    return {k: (float(v) if isinstance(v, np.floating | torch.Tensor) else v) for k, v in d.items()}
