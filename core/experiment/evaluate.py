"""Held-out evaluation, comparison and robustness runs, each logged as one run.

Every episode is played by the same rollout path as training (:meth:`TeamEnv.run` ->
:func:`core.qmix.runner.rollout`), on the ``eval`` side of the benchmark's split.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from core.actions import action_mask
from core.errors import EndpointGone, UserError
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
    from core.experiment.policies import PolicyInfo, baseline_policy
    from core.qmix.checkpoint import read_payload
    from core.team.env import TeamEnv

    if read_payload(checkpoint).get("format") == BASELINE_FORMAT:
        return baseline_policy(checkpoint, opts)
    env = TeamEnv(opts, "eval")
    shapes = EnvShapes.of(env)
    env.close()
    dev = resolve_device(device)
    ckpt = load_checkpoint(checkpoint, dev, expect=shapes)
    team = ckpt.env.get("team", {}) if isinstance(ckpt.env, dict) else {}
    allowed = np.asarray(action_mask(team.get("actions", "all")))
    policy = QMixPolicy(ckpt.agent, ckpt.mixer, dev, epsilon=0.0, label="qmix", allowed=allowed)
    weight = team.get("token_weight")
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
    from core.team.env import TeamEnv

    env = TeamEnv(replace(opts, seed=seed), "eval")
    try:
        with torch_threads(EVAL_THREADS):
            return env.run(policy, range(first, first + episodes), failures=failures)
    finally:
        env.close()


# --------------------------------------------------------------------------- logged plans


@dataclass(frozen=True)
class EvalPart:
    """A stretch of an evaluation run: one policy on held-out episodes ``indices``."""

    policy: int
    """Index of the policy in the run's policy list."""
    indices: range
    """Held-out episodes of the stream, in the order they are played and logged."""
    failures: tuple[FailureSpec, ...] | None = None
    """Failures that replace each episode's own (robustness); None = the episodes' own."""
    group: int = 0
    """Which summary row the episodes count towards."""


@dataclass
class EvalPlan:
    """What an evaluation run (``eval``, ``compare``, ``robustness``) plays, in the order it
    logs it. Stored as the run's ``config["eval"]``, so that ``--resume`` rebuilds the same
    plan and plays exactly the episodes the run has not logged yet."""

    command: str
    """``eval``, ``compare`` or ``robustness``."""
    policies: tuple[str, ...]
    """Policy names in playing order (``qmix`` = the learned policy of ``checkpoint``)."""
    episodes: int
    """Held-out episodes per policy (per policy and failure level for robustness)."""
    seed: int
    """The held-out stream."""
    first: int = 0
    """Index of the first held-out episode."""
    checkpoints: tuple[str, ...] = ()
    """The learned policies' checkpoints (absolute), in playing order."""
    max_failed: int = 0
    """robustness: up to this many failed agents."""
    mode: str = "crash"
    """robustness: how they fail."""

    def parts(self, n_agents: int) -> list[EvalPart]:
        """The parts in order. robustness: with ``k`` failed agents, episode ``i`` fails
        agents ``i, i+1, …, i+k-1`` (mod N), the same agents for every policy."""
        span = range(self.first, self.first + self.episodes)
        if self.command != "robustness":
            return [EvalPart(p, span, group=p) for p in range(len(self.policies))]
        out, group = [], 0
        for k in range(self.max_failed + 1):
            for p in range(len(self.policies)):
                for offset in range(min(n_agents, self.episodes) if k else 1):
                    indices = span[offset::n_agents] if k else span
                    fails = tuple(
                        FailureSpec((offset + j) % n_agents, self.mode, 0) for j in range(k)
                    )
                    out.append(EvalPart(p, indices, fails, group))
                group += 1
        return out

    def groups(self, n_agents: int) -> list[tuple[int, int]]:
        """Each summary row's range of run episode indices ``(lo, hi)``."""
        bounds: dict[int, list[int]] = {}
        at = 0
        for part in self.parts(n_agents):
            lo_hi = bounds.setdefault(part.group, [at, at])
            at += len(part.indices)
            lo_hi[1] = at
        return [tuple(bounds[g]) for g in sorted(bounds)]  # type: ignore[misc]

    def total(self, n_agents: int) -> int:
        return sum(len(p.indices) for p in self.parts(n_agents))

    def config(self, n_agents: int) -> dict[str, Any]:
        """``config["eval"]``: the plan, and ``episodes`` = how many the run will log."""
        return {**asdict(self), "per_policy": self.episodes, "episodes": self.total(n_agents)}

    @classmethod
    def from_config(cls, d: dict[str, Any]) -> EvalPlan:
        known = {f: d[f] for f in cls.__dataclass_fields__ if f in d and f != "episodes"}
        # A run logged before several checkpoints could play names one as "checkpoint".
        old = (d["checkpoint"],) if d.get("checkpoint") else ()
        checkpoints = tuple(d.get("checkpoints") or old)
        return cls(
            **{**known, "policies": tuple(d["policies"]), "episodes": d["per_policy"],
               "checkpoints": checkpoints}
        )  # fmt: skip


def play_plan(
    opts: TeamOptions,
    plan: EvalPlan,
    policies: Sequence[Any],
    logger: Any = None,
    skip: int = 0,
) -> list[EpisodeRecord]:
    """Play ``plan`` after its first ``skip`` episodes, logging each batch of episodes as
    soon as it is played (``logger``: a :class:`core.store.RunLogger` or None); returns
    the records played here. A kill loses at most the batch in flight, and the run's
    logged episodes are always the plan's first ones, in order."""
    from core.experiment.budget import episodes_that_fit
    from core.team.env import TeamEnv

    env = TeamEnv(replace(opts, seed=plan.seed), "eval")
    width = opts.concurrency
    played: list[EpisodeRecord] = []
    try:
        with torch_threads(EVAL_THREADS):
            for part in plan.parts(len(opts.roles)):
                if skip >= len(part.indices):
                    skip -= len(part.indices)
                    continue
                indices, skip = part.indices[skip:], 0
                start = 0
                while start < len(indices):
                    # A budget's run plays only as many as it can pay for (core.experiment.budget).
                    n = episodes_that_fit(min(width, len(indices) - start), played)
                    records = env.run(
                        policies[part.policy], indices[start : start + n], failures=part.failures
                    )
                    if logger is not None:
                        logger.log_episodes(records)
                    played += records
                    start += n
    except EndpointGone as err:
        raise EndpointGone(_stopped_at(err, plan, logger, len(played))) from err
    finally:
        env.close()
    return played


def _stopped_at(err: EndpointGone, plan: EvalPlan, logger: Any, played: int) -> str:
    """One sentence for an evaluation the server's end stopped: what is kept, how to go on."""
    if logger is None:
        return f"{err}; stopped after {played} episodes (none logged: --no-log)."
    return (
        f"{err}; run {logger.run_id} stopped with its first {logger.next_episode} episodes "
        f"logged; continue it with `agentqmix {plan.command} --resume {logger.run_id}`."
    )


def start_plan(
    db: str | None,
    kind: str,
    opts: TeamOptions,
    plan: EvalPlan,
    policy: str,
    extra_config: dict[str, Any] | None = None,
) -> Any:
    """The :class:`core.store.RunLogger` of a new evaluation run of ``plan``."""
    from core.store.writer import RunLogger

    config = {**opts.run_config(), "eval": plan.config(len(opts.roles)), **(extra_config or {})}
    return RunLogger(
        db,
        kind,
        config,
        backend=opts.backend,
        model=opts.model_name(),
        policy=policy,
        benchmark=opts.benchmark,
        seed=plan.seed,
    )


def summaries(
    plan: EvalPlan,
    opts: TeamOptions,
    records: Sequence[EpisodeRecord],
    db: str | None = None,
    run_id: str | None = None,
) -> list[dict[str, Any]]:
    """One summary per row of the plan (:func:`core.team.summary.summarize_records`): from
    ``records`` when they are the whole run, else from the store (a resumed run)."""
    ranges = plan.groups(len(opts.roles))
    if run_id is None:
        return [summarize_records(records[lo:hi]) for lo, hi in ranges]
    from core.store.queries import summarize_ranges

    return summarize_ranges(db, run_id, ranges)


def _run_plan(
    opts: TeamOptions,
    plan: EvalPlan,
    policies: Sequence[Any],
    db: str | None,
    log: bool,
    kind: str,
    policy_label: str,
    extra_config: dict[str, Any] | None = None,
) -> tuple[list[dict[str, Any]], list[EpisodeRecord], str | None]:
    """Play and log a new run of ``plan``: its rows (:func:`plan_rows`), the records, the
    run id. The run's config describes every policy (``config["policies"]``)."""
    from core.experiment.policies import describe

    if not log:
        records = play_plan(opts, plan, policies)
        return plan_rows(plan, opts, policies, records), records, None
    described = {p.name: describe(p).as_dict() for p in policies}
    extra = {"policies": described, **(extra_config or {})}
    with start_plan(db, kind, opts, plan, policy_label, extra) as logger:
        records = play_plan(opts, plan, policies, logger)
    return plan_rows(plan, opts, policies, records), records, logger.run_id


def plan_rows(
    plan: EvalPlan,
    opts: TeamOptions,
    policies: Sequence[Any],
    records: Sequence[EpisodeRecord],
    db: str | None = None,
    run_id: str | None = None,
) -> list[dict[str, Any]]:
    """One row per summary row of the plan: the policy's description (family, method,
    trained token weight, knob: :func:`~core.experiment.policies.describe`), its summary
    (:func:`summaries`) and, for eval and compare, its figures with 95 % intervals
    (:func:`~core.experiment.policies.point_stats`); robustness rows name the failure
    level. From ``records`` when they are the whole run, else (``run_id``: a resumed run)
    from the store."""
    from core.experiment.policies import describe, point_stats

    rows = summaries(plan, opts, records, db, run_id)
    ranges = plan.groups(len(opts.roles))
    if plan.command == "robustness":
        points: list[dict[str, Any]] = [{} for _ in ranges]
    elif run_id is None:
        points = [point_stats(records[lo:hi]) if hi > lo else {} for lo, hi in ranges]
    else:
        from core.store.queries import episode_outcomes

        stored = episode_outcomes(db, run_id)
        points = []
        for lo, hi in ranges:
            part = [o for o in stored if lo <= o.episode < hi]
            points.append(point_stats(part) if part else {})
    out = []
    for g, (row, point) in enumerate(zip(rows, points, strict=True)):
        k, p = divmod(g, len(plan.policies))
        level = {"failed_agents": k, "mode": plan.mode} if plan.command == "robustness" else {}
        info = describe(policies[p]).as_dict()
        out.append({**info, "policy": plan.policies[p], **level, **row, **point})
    return out


def resume_evaluation(
    db: str | None,
    run_id: str,
    device: str = "auto",
    command: str | None = None,
    budget: Any = None,
    say: Callable[[str], None] | None = None,
) -> tuple[EvalPlan, list[dict[str, Any]], str]:
    """Continue a stopped evaluation run (``eval/compare/robustness --resume RUN_ID``): play
    the episodes of its plan it has not logged, under the same run id, and return its plan,
    its summary rows over every episode it logged, and its benchmark. ``command``: the
    command asked to resume it, which must be the one that started it. On a real back-end
    it goes on within ``budget`` (a :class:`~core.experiment.finetune.Budget`; none given:
    the one the run stored), counting what the run spent before; ``say`` prints the
    estimate (:func:`core.experiment.budget.real_run`)."""
    from core.experiment.budget import real_run
    from core.experiment.finetune import Budget
    from core.store.queries import get_run, last_episode, run_spend
    from core.store.writer import RunLogger
    from core.team.options import options_from_dict

    info = get_run(db, run_id)
    if info is None:
        raise UserError(f"no run {run_id!r} in the database.")
    if "eval" not in info.config or "team" not in info.config:
        raise UserError(
            f"run {run_id} is not an evaluation run that can be resumed (only runs of eval, "
            "compare and robustness logged by this version can)."
        )
    plan = EvalPlan.from_config(info.config["eval"])
    if command is not None and plan.command != command:
        raise UserError(
            f"run {run_id} is a {plan.command} run; continue it with "
            f"`agentqmix {plan.command} --resume {run_id}`."
        )
    opts = options_from_dict(info.config["team"])
    total = plan.total(len(opts.roles))
    last = last_episode(db, run_id)
    done = 0 if last is None else last + 1
    if done >= total and info.status == "finished":
        raise UserError(
            f"run {run_id} is complete ({done} of {total} episodes); nothing to resume."
        )
    policies = _plan_policies(plan, opts, device)
    if budget is None or not budget.given:
        budget = Budget(**info.config.get("budget", {}))
    spent = run_spend(db, run_id)
    seeded = replace(opts, seed=plan.seed)
    with (
        real_run(seeded, budget, total - done, say or (lambda line: None), spent, "eval"),
        RunLogger.resume(db, run_id) as logger,
    ):
        if done < total:
            play_plan(opts, plan, policies, logger, skip=done)
    return plan, plan_rows(plan, opts, policies, [], db, run_id), info.benchmark


def _plan_policies(plan: EvalPlan, opts: TeamOptions, device: str) -> list[Any]:
    """The policies of a stored plan, loaded again: its checkpoints' learned policies (by
    the names they were played under), the fixed topologies by name."""
    for checkpoint in plan.checkpoints:
        if not Path(checkpoint).is_file():
            raise UserError(f"the run's checkpoint {checkpoint} is missing; put it back to resume.")
    learned = {p.name: p for p in _policies(opts, plan.checkpoints, device, ())}
    out = []
    for name in plan.policies:
        if name in learned:
            out.append(learned[name])
        elif name in FIXED_TOPOLOGIES:
            out.append(make_policy(name))
        else:
            raise UserError(
                f"this run's learned policy {name!r} has no recorded checkpoint to resume from."
            )
    return out


# --------------------------------------------------------------------------- the commands


def source_run_config(db: str | None, run_id: str | None) -> dict[str, Any]:
    """``{"source_run": RUN_ID}`` for an evaluation of training run ``run_id``'s checkpoint
    (``--source-run``: the lab then lists the evaluation under that run); ``{}`` for none.
    A run that is not a training run of the store is a mistake, said in one sentence."""
    if run_id is None:
        return {}
    from core.store.queries import get_run

    info = get_run(db, run_id)
    if info is None or info.kind != "train":
        raise UserError(f"--source-run {run_id!r} is not a training run of this database.")
    return {"source_run": run_id}


def parse_topologies(text: str | None) -> tuple[str, ...]:
    """``--topologies star,chain`` -> the fixed topologies named, in the registry's order;
    None -> every one; ``none`` -> none."""
    if text is None:
        return tuple(FIXED_TOPOLOGIES)
    names = {part.strip() for part in text.split(",") if part.strip()}
    if names == {"none"}:
        return ()
    unknown = sorted(names - set(FIXED_TOPOLOGIES))
    if unknown or not names:
        raise UserError(
            f"--topologies takes names of {', '.join(FIXED_TOPOLOGIES)} (or none), not {text!r}."
        )
    return tuple(t for t in FIXED_TOPOLOGIES if t in names)


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
    checkpoint: Path | None = None,
) -> tuple[dict[str, Any], list[EpisodeRecord]]:
    """Evaluate one policy on held-out episodes ``first..first+episodes-1``, logged as one
    run as they are played (``checkpoint``: where the learned policy came from, so that
    ``eval --resume`` can load it again)."""
    checkpoints = () if checkpoint is None else (_absolute(checkpoint),)
    plan = EvalPlan("eval", (policy.name,), episodes, seed, first, checkpoints)
    rows, records, run_id = _run_plan(
        opts, plan, [policy], db, log, kind, policy.name, extra_config
    )
    summary = dict(rows[0])
    summary["mean_return"] = summary["mean_reward"]
    if run_id is not None:
        summary["run_id"] = run_id
    return summary, records


def _absolute(path: Path | str) -> str:
    return str(Path(path).absolute())


def _checkpoint_list(checkpoint: Path | Sequence[Path] | None) -> tuple[str, ...]:
    if checkpoint is None:
        return ()
    if isinstance(checkpoint, str | Path):
        return (_absolute(checkpoint),)
    return tuple(_absolute(c) for c in checkpoint)


def no_call_answered(rows: Sequence[dict[str, Any]]) -> str | None:
    """The sentence that ends a run whose calls all failed (rows of :func:`summaries`: an
    eval's, compare's or robustness's table, a training run's held-out summary), else None.
    Its figures then measure refusals, not a model: the command exits 1 (docs/openai.md)."""
    calls = sum(int(row.get("calls", 0)) for row in rows)
    failed = sum(int(row.get("failed_calls", 0)) for row in rows)
    if not calls or failed < calls:
        return None
    which = "the run's one call" if calls == 1 else f"every one of the run's {calls} calls"
    return (
        f"{which} to the back-end failed, so its figures measure nothing; check --model, "
        "--base-url and the API key (a logged run keeps each error in its llm_calls table)."
    )


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
        model=opts.model_name(),
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
    extra_config: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Every learned policy (one or more checkpoints, of any family) and every fixed
    topology on the same held-out episodes, logged as they are played (``extra_config``
    joins the run's config). Each row: the
    policy's label, family, method, the token weight it was trained at and its knob
    (:class:`~core.experiment.policies.PolicyInfo`), its figures with 95 % intervals
    (:func:`~core.experiment.policies.point_stats`) and whether it is on the accuracy/token
    front."""
    policies = _policies(opts, checkpoint, device, topologies)
    names = tuple(p.name for p in policies)
    plan = EvalPlan("compare", names, episodes, seed, checkpoints=_checkpoint_list(checkpoint))
    rows, _, run_id = _run_plan(opts, plan, policies, db, log, "compare", "compare", extra_config)
    return compare_rows(plan, rows, run_id)


def compare_rows(
    plan: EvalPlan, rows: Sequence[dict[str, Any]], run_id: str | None
) -> list[dict[str, Any]]:
    """``compare``'s table: one row per policy (:func:`plan_rows`), each marked on or off
    the accuracy/token front, with the run id when logged."""
    from core.experiment.policies import mark_front

    out = [dict(row) for row in rows]
    mark_front(out)
    if run_id is not None:
        for row in out:
            row["run_id"] = run_id
    return out


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
    n = len(opts.roles)
    if not 0 <= max_failed < n:
        raise UserError(f"--max-failed must be between 0 and {n - 1} for a team of {n}.")
    if policies is None:
        policies = _policies(opts, checkpoint, device, topologies)
    names = tuple(p.name for p in policies)
    plan = EvalPlan(
        "robustness", names, episodes, seed, checkpoints=_checkpoint_list(checkpoint),
        max_failed=max_failed, mode=mode,
    )  # fmt: skip
    extra = {"robustness": {"mode": mode}, **(extra_config or {})}
    rows, _, run_id = _run_plan(opts, plan, policies, db, log, "compare", "robustness", extra)
    return robustness_rows(plan, rows, run_id)


def robustness_rows(
    plan: EvalPlan, rows: Sequence[dict[str, Any]], run_id: str | None
) -> list[dict[str, Any]]:
    """``robustness``'s table: one row per failure level and policy (:func:`plan_rows`),
    with the run id when logged."""
    out = [dict(row) for row in rows]
    if run_id is not None:
        for row in out:
            row["run_id"] = run_id
    return out


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
