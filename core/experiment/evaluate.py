"""Held-out evaluation, comparison and robustness runs, each logged as one run.

Every episode is played by the same rollout path as training (:meth:`TeamEnv.run` ->
:func:`core.qmix.runner.rollout`), on the ``eval`` side of the benchmark's split.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from core.errors import UserError
from core.qmix.checkpoint import load_checkpoint
from core.qmix.env import EnvShapes, SerialVecEnv, load_env
from core.qmix.policy import QMixPolicy
from core.qmix.runner import rollout_all, summarize
from core.qmix.seeding import resolve_device, seed_everything, torch_threads
from core.records import EpisodeRecord
from core.team.failures import FailureSpec
from core.team.options import TeamOptions
from core.team.plan import TeamPolicy
from core.team.summary import summarize_records
from core.team.topologies import FIXED_TOPOLOGIES, make_policy

EVAL_THREADS = 1
"""Torch CPU threads while evaluating: the forward passes are small, extra threads only wait."""


def learned_policy(checkpoint: Path, opts: TeamOptions, device: str = "auto") -> Any:
    """The learned policy in a checkpoint, checked against the team's shapes: Agent Q-Mix's
    greedy decentralised policy, or a learned-topology method's (:mod:`core.baselines`)
    decoded graphs — whichever family wrote the file. Its ``info``
    (:class:`~core.experiment.policies.PolicyInfo`) names the family, the token weight it
    was trained at and its knob."""
    from core.baselines.checkpoint import FORMAT as BASELINE_FORMAT
    from core.baselines.checkpoint import read_payload
    from core.experiment.options import make_team_env
    from core.experiment.policies import PolicyInfo, baseline_policy

    if read_payload(checkpoint).get("format") == BASELINE_FORMAT:
        return baseline_policy(checkpoint, opts)
    env = make_team_env(opts, "eval")
    shapes = EnvShapes.of(env)
    env.close()
    dev = resolve_device(device)
    ckpt = load_checkpoint(checkpoint, dev, expect=shapes)
    policy = QMixPolicy(ckpt.agent, ckpt.mixer, dev, epsilon=0.0, label="qmix")
    weight = ckpt.env.get("team", {}).get("token_weight") if isinstance(ckpt.env, dict) else None
    policy.info = PolicyInfo("qmix", "learned", "qmix", weight, {}, str(checkpoint))
    return policy


def resolve_policy(
    name: str | None, checkpoint: Path | None, opts: TeamOptions, device: str = "auto"
) -> Any:
    """``--policy NAME`` (a fixed topology) or ``--checkpoint CKPT`` (the learned policy)."""
    if (name is None) == (checkpoint is None):
        raise UserError("give exactly one of --checkpoint CKPT or --policy NAME.")
    if checkpoint is not None:
        return learned_policy(checkpoint, opts, device)
    return make_policy(name)


def run_policy(
    opts: TeamOptions,
    policy: TeamPolicy | QMixPolicy,
    episodes: int,
    seed: int,
    failures: Sequence[FailureSpec] | None = None,
    first: int = 0,
) -> list[EpisodeRecord]:
    """Play held-out episodes ``first..first+episodes-1`` of stream ``seed`` with ``policy``."""
    from core.experiment.options import make_team_env

    env = make_team_env(replace(opts, seed=seed), "eval")
    try:
        with torch_threads(EVAL_THREADS):
            return env.run(policy, range(first, first + episodes), failures=failures)
    finally:
        env.close()


def evaluate_team(
    opts: TeamOptions,
    policy: TeamPolicy | QMixPolicy,
    episodes: int,
    seed: int,
    db: str | None = None,
    log: bool = True,
    kind: str = "eval",
    extra_config: dict[str, Any] | None = None,
    first: int = 0,
) -> tuple[dict[str, Any], list[EpisodeRecord]]:
    """Evaluate one policy on held-out episodes ``first..first+episodes-1``; log them as one run."""
    from core.experiment.policies import describe, point_stats

    records = run_policy(opts, policy, episodes, seed, first=first)
    info = describe(policy).as_dict()
    summary = {**info, **summarize_records(records), **point_stats(records)}
    summary["mean_return"] = summary["mean_reward"]
    if log:
        extra = {"policies": {policy.name: info}, **(extra_config or {})}
        summary["run_id"] = log_run(db, kind, opts, policy.name, seed, records, extra)
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
    """Log finished episodes as one run of ``kind``; returns its id."""
    from core.store.writer import RunLogger

    with RunLogger(
        db,
        kind,
        {**opts.run_config(), **(extra_config or {})},
        backend=opts.backend,
        model=opts.model or opts.preset,
        policy=policy,
        benchmark=opts.benchmark,
        seed=seed,
    ) as logger:
        logger.log_episodes(records)
        run_id = logger.run_id
    return run_id


def _policies(
    opts: TeamOptions,
    checkpoints: Path | Sequence[Path] | None,
    device: str,
    topologies: Sequence[str],
) -> list[Any]:
    """The learned policies of ``checkpoints`` (each labelled uniquely, :func:`~core.
    experiment.policies.unique_labels`), then the fixed topologies."""
    from core.experiment.policies import unique_labels

    if checkpoints is None:
        checkpoints = ()
    elif isinstance(checkpoints, str | Path):
        checkpoints = (Path(checkpoints),)
    learned = unique_labels([learned_policy(Path(c), opts, device) for c in checkpoints])
    return learned + [make_policy(name) for name in topologies]


def compare_team(
    opts: TeamOptions,
    checkpoint: Path | Sequence[Path] | None,
    episodes: int,
    seed: int,
    db: str | None = None,
    log: bool = True,
    device: str = "auto",
    topologies: Sequence[str] = tuple(FIXED_TOPOLOGIES),
) -> list[dict[str, Any]]:
    """Every learned policy (one or more checkpoints, of any family) and every fixed
    topology on the same held-out episodes. Each row: the policy's label, family, method,
    the token weight it was trained at and its knob (:class:`~core.experiment.policies.
    PolicyInfo`), its figures with 95 % intervals (:func:`~core.experiment.policies.
    point_stats`) and whether it is on the accuracy/token front."""
    from core.experiment.policies import describe, mark_front, point_stats

    rows, all_records, described = [], [], {}
    for policy in _policies(opts, checkpoint, device, topologies):
        records = run_policy(opts, policy, episodes, seed)
        all_records += records
        info = describe(policy)
        described[policy.name] = info.as_dict()
        rows.append({**info.as_dict(), **summarize_records(records), **point_stats(records)})
    mark_front(rows)
    if log:
        run_id = log_run(db, "compare", opts, "compare", seed, all_records, {"policies": described})
        for row in rows:
            row["run_id"] = run_id
    return rows


def robustness_team(
    opts: TeamOptions,
    checkpoint: Path | Sequence[Path] | None,
    episodes: int,
    seed: int,
    max_failed: int,
    mode: str = "crash",
    db: str | None = None,
    log: bool = True,
    device: str = "auto",
    topologies: Sequence[str] = tuple(FIXED_TOPOLOGIES),
    policies: Sequence[Any] | None = None,
    extra_config: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Accuracy and reward against the number of failed agents (from round 0), per policy.

    With ``k`` failed agents, episode ``i`` fails agents ``i, i+1, …, i+k-1`` (mod N) — the
    same agents for every policy — so the comparison is like for like. ``policies``, when
    given, are played instead of ``checkpoint`` + ``topologies`` (a caller that keeps a
    loaded policy, such as the lab, need not load it again); ``extra_config`` joins the
    logged run's config.
    """
    from core.experiment.options import make_team_env

    n = len(opts.roles)
    if not 0 <= max_failed < n:
        raise UserError(f"--max-failed must be between 0 and {n - 1} for a team of {n}.")
    if policies is None:
        policies = _policies(opts, checkpoint, device, topologies)
    from core.experiment.policies import describe

    rows, all_records = [], []
    env = make_team_env(replace(opts, seed=seed), "eval")
    try:
        with torch_threads(EVAL_THREADS):
            for k in range(max_failed + 1):
                for policy in policies:
                    records: list[EpisodeRecord] = []
                    for offset in range(min(n, episodes) if k else 1):
                        indices = range(offset, episodes, n) if k else range(episodes)
                        fails = [FailureSpec((offset + j) % n, mode, 0) for j in range(k)]
                        records += env.run(policy, indices, failures=fails)
                    all_records += records
                    rows.append(
                        {
                            **describe(policy).as_dict(),
                            "failed_agents": k,
                            "mode": mode,
                            **summarize_records(records),
                        }
                    )
    finally:
        env.close()
    if log:
        described = {p.name: describe(p).as_dict() for p in policies}
        run_id = log_run(
            db, "compare", opts, "robustness", seed, all_records,
            {"robustness": {"mode": mode}, "policies": described, **(extra_config or {})},
        )  # fmt: skip
        for row in rows:
            row["run_id"] = run_id
    return rows


def evaluate_env(
    spec: str, checkpoint: Path, episodes: int, seed: int, device: str = "auto"
) -> dict[str, Any]:
    """The greedy policy of ``checkpoint`` on held-out episodes of a protocol environment."""
    dev = resolve_device(device)
    first = load_env(spec)
    ckpt = load_checkpoint(checkpoint, dev, expect=EnvShapes.of(first))
    seed_everything(seed)
    policy = QMixPolicy(ckpt.agent, ckpt.mixer, dev, epsilon=0.0)
    width = min(episodes, 8)
    envs = [first] + [load_env(spec) for _ in range(width - 1)]
    venv = SerialVecEnv(envs, seed, "eval", where=f"--env {spec}")
    with torch_threads(EVAL_THREADS):
        return summarize(rollout_all(venv, policy, range(episodes), width))
