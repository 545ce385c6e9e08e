"""``agentqmix calibrate``: fit the synthetic society to real runs, check it on held-out tasks.

The episodes of the given runs are split **by task** (a stable hash of benchmark and task
id, salted apart from the benchmarks' own train/eval split): the society is fitted
(:func:`core.backends.calibration.fit_society`) on the episodes of the *fit* tasks only, and
checked on the episodes of the *check* tasks, which the fit never saw. The check replays
every held-out real episode in the fitted society — same task, same team, same policy (a
deterministic fixed topology by name; any other policy, ``random`` and the learned ones
included, by the actions it logged) — ``draws`` times, and compares accuracy, tokens and
reward per policy and per action, with 95 % intervals from a bootstrap over tasks
(episodes of one task are not independent), and ranks the fixed topologies by mean reward
in both worlds: Kendall τ between the simulator's and the real ranking, with a bootstrap
interval. The same replay with the base preset shows what calibration changed.
``--reread`` first reads every stored maths and multiple-choice reply again with today's
reader (:func:`reread`), so that a store recorded with an older reader is judged by the
current one.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from collections import defaultdict
from collections.abc import Callable, Sequence
from copy import deepcopy
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from core.actions import Action
from core.backends.calibration import CalibrationConfig, SocietyFit, fit_society
from core.backends.society import (
    DEFAULT_PRESET,
    PRESETS,
    SOCIETY_FORMAT,
    SOCIETY_VERSION,
    SimBackend,
    SocietyConfig,
    get_preset,
    society_to_dict,
)
from core.errors import UserError
from core.records import EpisodeRecord
from core.tasks.base import TaskList, task_of
from core.team.env import TeamEnv
from core.team.options import TeamOptions, options_from_dict
from core.team.plan import RoundPlan
from core.team.runtime import RuntimeConfig, reward
from core.team.topologies import FIXED_TOPOLOGIES, Full, make_policy

ACTION_LABELS = [a.label for a in Action]
BOOTSTRAP = 2000
BUDGET_EPISODES = 300
"""Simulated full-mesh episodes on ``mixed`` that set a fitted society's token budget (the
presets' budgets are their full-mesh means on ``mixed``, docs/simulator.md)."""


@dataclass
class CalibrateOptions:
    """What ``agentqmix calibrate`` fits, on what, and how it checks."""

    runs: tuple[str, ...]
    """Run ids whose episodes are the real data."""
    out: Path
    """Where the fitted society (JSON) goes."""
    check_fraction: float = 0.3
    """Share of the tasks held out for the check (by a hash of the task)."""
    draws: int = 20
    """Simulated replays of each held-out real episode."""
    base: str = DEFAULT_PRESET
    """The preset the fit starts from and shrinks toward."""
    prior_scale: float = 1.0
    """Widens (> 1) or narrows (< 1) every prior around the base preset."""
    seed: int = 0
    """Seeds the simulated replays and the bootstrap."""
    name: str | None = None
    """The fitted society's name (default ``calibrated-<model>``)."""
    reread: bool = False
    """Read every stored maths and multiple-choice reply again with today's reader first."""

    def validate(self) -> None:
        if not self.runs:
            raise UserError("calibrate needs at least one --run RUN_ID.")
        if not (0.0 < self.check_fraction < 1.0):
            raise UserError(f"--check-fraction must be between 0 and 1, not {self.check_fraction}.")
        if not 1 <= self.draws <= 10_000:
            raise UserError(f"--draws must be between 1 and 10000, not {self.draws}.")
        if self.base not in PRESETS:
            raise UserError(f"--base must be one of {', '.join(PRESETS)}, not {self.base!r}.")
        if not (math.isfinite(self.prior_scale) and self.prior_scale > 0):
            raise UserError(f"--prior-scale must be a finite number > 0, not {self.prior_scale}.")
        if self.out.exists() and not self.out.is_file():
            raise UserError(f"--out {self.out} exists and is not a regular file.")
        if not self.out.parent.is_dir():
            raise UserError(f"--out {self.out}: folder {self.out.parent} does not exist.")


@dataclass
class RunEpisodes:
    """One real run's team options and episodes."""

    run_id: str
    opts: TeamOptions
    model: str
    records: list[EpisodeRecord]


@dataclass
class CalibrationResult:
    """What ``calibrate`` prints, stores and writes."""

    fit: SocietyFit
    split: dict[str, Any]
    by_topology: list[dict[str, Any]]
    by_action: list[dict[str, Any]]
    ranking: dict[str, Any]
    """Kendall τ of the fixed topologies' rankings (:func:`ranking_table`)."""
    out: Path
    run_id: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def report(self) -> dict[str, Any]:
        """The calibration as plain data (the JSON file's ``calibration`` section)."""
        return {
            "split": self.split,
            "fit": self.fit.to_dict(),
            "check": {
                "by_topology": self.by_topology,
                "by_action": self.by_action,
                "ranking": self.ranking,
            },
            **self.extra,
        }


# ----------------------------------------------------------------------------- data


def load_runs(db: str | None, run_ids: Sequence[str]) -> list[RunEpisodes]:
    """The runs' team options and every stored episode; a missing or empty run is a
    user mistake."""
    from core.store.db import read_session
    from core.store.queries import get_run, load_episode_from

    out = []
    for run_id in dict.fromkeys(run_ids):
        info = get_run(db, run_id)
        if info is None:
            raise UserError(f"no run {run_id!r} in the database.")
        if "team" not in info.config:
            raise UserError(f"run {run_id} is not a run of the agent team; it cannot calibrate.")
        with read_session(db) as cur:
            keys = cur.execute(
                "SELECT episode FROM episodes WHERE run_id = ? ORDER BY episode", [run_id]
            ).fetchall()
            records = [load_episode_from(cur, run_id, k).record for (k,) in keys]
        if not records:
            raise UserError(f"run {run_id} has no episodes to calibrate on.")
        opts = options_from_dict(info.config["team"])
        check_real_calls(run_id, opts, records)
        out.append(RunEpisodes(run_id, opts, info.model or opts.model or "", records))
    return out


def check_real_calls(run_id: str, opts: TeamOptions, records: Sequence[EpisodeRecord]) -> None:
    """UserError unless the run asked a real model and got answers: a society fitted to the
    simulator's own episodes (an eval or a training run on ``sim``) or to calls that all
    failed would be written as "calibrated" while describing no model."""
    from core.backends.registry import LABEL_BACKENDS

    if opts.backend in LABEL_BACKENDS:
        raise UserError(
            f"run {run_id} played the synthetic society (--backend {opts.backend}), so it made "
            "no real calls; calibrate fits runs of a real model (--backend openai or local)."
        )
    if not any(call.error is None for record in records for call in record.calls):
        raise UserError(
            f"every call of run {run_id} failed, so it holds no real reply to calibrate on."
        )


def task_key(record: EpisodeRecord) -> str:
    return f"{record.benchmark}/{record.task_id}"


def is_check_task(key: str, fraction: float) -> bool:
    """The calibration's own split: a salted hash of the task, independent of the run."""
    digest = hashlib.sha256(f"agentqmix-calibrate/{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


# ----------------------------------------------------------------------------- re-read

REREAD_DOMAINS = ("math", "mcq")
"""Domains whose replies ``--reread`` reads again (a code answer is run, not read)."""


def reread(record: EpisodeRecord, runtime: RuntimeConfig) -> tuple[EpisodeRecord, int]:
    """``record`` with every stored maths or multiple-choice reply read again by today's
    reader (:func:`core.tasks.checkers.read_answer`), its steps' correctness, the team's
    answer, score and reward (``runtime``: the run's reward) recomputed, and how many
    answers changed. The episode's course stays as it was played: a decision that passed
    an answer through takes that agent's re-read answer; a decision call is re-read from
    its own reply."""
    from core.tasks.checkers import read_answer
    from core.tasks.scoring import score

    if record.domain not in REREAD_DOMAINS:
        return record, 0
    task = task_of(record)
    out = deepcopy(record)
    changed = 0
    final: dict[int, Any] = {}
    for rnd in out.rounds:
        for step in rnd.steps:
            if step.text and step.fault is None and step.alive:
                answer = read_answer(task, step.text)
                changed += answer != step.answer
                step.answer = answer
                step.correct = answer is not None and score(task, answer) >= 1.0
            final[step.agent] = step
    decision = out.decision
    if decision is not None and decision.fault is None:
        if out.pass_through in ("single", "unanimous") and decision.read_from:
            answer = final[decision.read_from[0]].answer
        elif decision.text and out.pass_through is None and decision.prompt_tokens:
            answer = read_answer(task, decision.text)
        else:
            answer = decision.answer
        changed += answer != decision.answer
        decision.answer = answer
        out.team_answer = answer
    out.score = score(task, out.team_answer) if out.team_answer else 0.0
    out.reward = reward(out.score, _tokens(out), runtime)
    return out, changed


# ----------------------------------------------------------------------------- replay


class LoggedActions:
    """Replays the actions a logged episode took, round by round (for policies that are not
    a fixed topology, e.g. a learned one): the society then answers the same plan."""

    name = "logged"

    def __init__(self, by_seed: dict[int, EpisodeRecord]):
        self.by_seed = by_seed

    def begin(self, n_agents: int, seed: int) -> Any:
        return self.by_seed[seed]

    def plan(self, obs: dict, round_index: int, memory: Any) -> tuple[RoundPlan, Any]:
        steps = sorted(memory.rounds[round_index].steps, key=lambda s: s.agent)
        return RoundPlan(actions=[int(s.action) for s in steps]), memory


def by_name(policy: str) -> bool:
    """Whether a logged policy is replayed by its name: a fixed topology whose plan draws
    on nothing but the team (``random`` draws on the episode seed, which the replay does
    not share, so it is replayed by the actions it logged, like a learned policy)."""
    return policy in FIXED_TOPOLOGIES and not FIXED_TOPOLOGIES[policy].stochastic


def replay(
    run: RunEpisodes, records: list[EpisodeRecord], society: SocietyConfig, draws: int, seed: int
) -> list[list[EpisodeRecord]]:
    """``draws`` simulated episodes for each of ``records`` (same task, team and policy)."""
    out: list[list[EpisodeRecord]] = [[] for _ in records]
    groups: dict[str, list[int]] = defaultdict(list)
    for i, rec in enumerate(records):
        groups[rec.policy].append(i)
    opts = replace(run.opts, backend="sim", society=None, model=None, base_url=None, seed=seed)
    for policy_name, members in groups.items():
        mine = [records[i] for i in members]
        env = TeamEnv(
            opts, None, backend=SimBackend(society), source=TaskList([task_of(r) for r in mine])
        )
        try:
            indices = range(len(mine) * draws)
            if by_name(policy_name):
                policy: Any = make_policy(policy_name)
            else:
                policy = LoggedActions({env.job(k).seed: mine[k % len(mine)] for k in indices})
            simulated = env.run(policy, indices, width=64)
        finally:
            env.close()
        for k, rec in enumerate(simulated):
            out[members[k % len(mine)]].append(rec)
    return out


# ----------------------------------------------------------------------------- the check


def clustered_ci(
    values: np.ndarray, clusters: np.ndarray, rng: np.random.Generator
) -> tuple[float, float, float]:
    """Mean of ``values`` and a 95 % percentile interval from a bootstrap over clusters."""
    keys, inverse = np.unique(clusters, return_inverse=True)
    sums = np.bincount(inverse, weights=values, minlength=len(keys))
    counts = np.bincount(inverse, minlength=len(keys)).astype(float)
    mean = float(values.mean())
    if len(keys) < 2:
        return mean, mean, mean
    idx = rng.integers(0, len(keys), size=(BOOTSTRAP, len(keys)))
    means = sums[idx].sum(axis=1) / counts[idx].sum(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return mean, float(lo), float(hi)


def kendall_tau(x: np.ndarray, y: np.ndarray) -> float:
    """Kendall's τ-b of two rankings of the same items (ties in either count as neither
    concordant nor discordant, and shrink the denominator); nan with fewer than two items
    or when either side is all ties."""
    i, j = np.triu_indices(len(x), k=1)
    dx, dy = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])
    s = float((dx * dy).sum())
    nx, ny = float((dx != 0).sum()), float((dy != 0).sum())
    return s / math.sqrt(nx * ny) if nx and ny else math.nan


def ranking_agreement(
    real: np.ndarray, sim: np.ndarray, clusters: np.ndarray, resamples: int,
    rng: np.random.Generator,
) -> dict[str, Any]:  # fmt: skip
    """Kendall τ between the real and the simulated ranking of policies by mean reward, with
    a 95 % percentile interval from a bootstrap over tasks.

    ``real``, ``sim``: ``(P, E)`` reward of policy ``p`` on episode ``e`` (nan where the
    policy did not play it); ``clusters``: ``(E,)`` the task of each episode. A resample
    draws tasks with replacement and ranks each policy by its mean over the drawn tasks'
    episodes."""
    keys, inverse = np.unique(clusters, return_inverse=True)
    played = ~np.isnan(real)
    onehot = np.zeros((len(clusters), len(keys)))
    onehot[np.arange(len(clusters)), inverse] = 1.0  # (E, K)
    sums = {
        "real": np.where(played, real, 0.0) @ onehot,  # (P, K)
        "sim": np.where(played, sim, 0.0) @ onehot,
    }
    counts = played.astype(float) @ onehot  # (P, K)

    def tau(weights: np.ndarray) -> float:  # weights (K,): times each task is drawn
        n = counts @ weights
        seen = n > 0  # a policy none of whose tasks was drawn is left out of the ranking
        real_mean = (sums["real"] @ weights)[seen] / n[seen]
        return kendall_tau(real_mean, (sums["sim"] @ weights)[seen] / n[seen])

    point = tau(np.ones(len(keys)))
    draws = rng.multinomial(len(keys), np.full(len(keys), 1 / len(keys)), size=resamples)
    taus = np.array([tau(w.astype(float)) for w in draws])
    taus = taus[~np.isnan(taus)]
    lo, hi = np.percentile(taus, [2.5, 97.5]) if len(taus) else (math.nan, math.nan)
    return {"tau": point, "lo": float(lo), "hi": float(hi), "policies": int(real.shape[0])}


def _tokens(rec: EpisodeRecord) -> int:
    return sum(c.prompt_tokens + c.completion_tokens for c in rec.calls)


def _episode_rows(
    real: EpisodeRecord, sims: list[EpisodeRecord], runtime: RuntimeConfig
) -> dict[str, float]:
    """Real and simulated figures of one episode; both rewards by the real run's reward
    (``runtime``: its weights and token budget), so that they are on one scale."""
    return {
        "real_acc": float(real.score >= 1.0),
        "sim_acc": float(np.mean([s.score >= 1.0 for s in sims])),
        "real_tok": float(_tokens(real)),
        "sim_tok": float(np.mean([_tokens(s) for s in sims])),
        "real_rew": reward(real.score, _tokens(real), runtime),
        "sim_rew": float(np.mean([reward(s.score, _tokens(s), runtime) for s in sims])),
    }


def _called_steps(rec: EpisodeRecord) -> dict[tuple[int, int], Any]:
    called = {(c.agent, c.round) for c in rec.calls}
    return {
        (s.agent, r.round): s for r in rec.rounds for s in r.steps if (s.agent, r.round) in called
    }


def _step_rows(
    real: EpisodeRecord, sims: list[EpisodeRecord]
) -> dict[tuple[int, int], tuple[int, dict[str, float]]]:
    """(agent, round) -> (action, row) for each call of ``real`` that the replays also made."""
    sim_steps = [_called_steps(s) for s in sims]
    rows = {}
    for key, step in _called_steps(real).items():
        mine = [ss[key] for ss in sim_steps if key in ss]
        if mine:
            rows[key] = (
                int(step.action),
                {
                    "real_acc": float(bool(step.correct)),
                    "sim_acc": float(np.mean([bool(s.correct) for s in mine])),
                    "real_tok": float(step.tokens),
                    "sim_tok": float(np.mean([s.tokens for s in mine])),
                },
            )
    return rows


def _summarise(
    label: str, rows: list[dict[str, float]], clusters: list[str], stock: list[dict[str, float]],
    rng: np.random.Generator,
) -> dict[str, Any]:  # fmt: skip
    """One table row: real, simulated and their difference (and the base preset's)."""
    c = np.array(clusters)
    out: dict[str, Any] = {"group": label, "n": len(rows), "tasks": len(set(clusters))}
    for metric in ("acc", "tok", "rew") if "real_rew" in rows[0] else ("acc", "tok"):
        real = np.array([r[f"real_{metric}"] for r in rows])
        sim = np.array([r[f"sim_{metric}"] for r in rows])
        base = np.array([r[f"sim_{metric}"] for r in stock])
        out[f"real_{metric}"] = clustered_ci(real, c, rng)
        out[f"sim_{metric}"] = clustered_ci(sim, c, rng)
        out[f"err_{metric}"] = clustered_ci(sim - real, c, rng)
        out[f"stock_err_{metric}"] = clustered_ci(base - real, c, rng)
    return out


def check_tables(
    runs: list[RunEpisodes],
    check: dict[str, list[EpisodeRecord]],
    fitted: SocietyConfig,
    stock: SocietyConfig,
    draws: int,
    seed: int,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """Simulated vs real on the held-out episodes, per policy and per action, and the
    ranking agreement of the fixed topologies (:func:`ranking_table`)."""
    rng = np.random.default_rng(seed)
    topo: dict[str, tuple[list, list, list]] = defaultdict(lambda: ([], [], []))
    acts: dict[int, tuple[list, list, list]] = defaultdict(lambda: ([], [], []))
    for run in runs:
        records = check.get(run.run_id, [])
        if not records:
            continue
        runtime = run.opts.runtime_config()
        sims = replay(run, records, fitted, draws, seed)
        bases = replay(run, records, stock, draws, seed)
        for real, sim, base in zip(records, sims, bases, strict=True):
            key = task_key(real)
            for label in (real.policy, "all episodes"):
                rows, clusters, stock_rows = topo[label]
                rows.append(_episode_rows(real, sim, runtime))
                stock_rows.append(_episode_rows(real, base, runtime))
                clusters.append(key)
            stock_steps = _step_rows(real, base)
            for step_key, (action, row) in _step_rows(real, sim).items():
                if step_key in stock_steps:
                    rows, clusters, stock_rows = acts[action]
                    rows.append(row)
                    stock_rows.append(stock_steps[step_key][1])
                    clusters.append(key)
    by_topology = [
        _summarise(label, *topo[label][:2], topo[label][2], rng)
        for label in sorted(topo, key=lambda x: (x == "all episodes", x))
    ]
    by_action = [_summarise(ACTION_LABELS[a], *acts[a][:2], acts[a][2], rng) for a in sorted(acts)]
    return by_topology, by_action, ranking_table(topo, rng)


def ranking_table(
    topo: dict[str, tuple[list, list, list]], rng: np.random.Generator
) -> dict[str, Any]:
    """Kendall τ between the real ranking of the fixed topologies by mean reward on the
    held-out episodes and the fitted (``fitted``) and base preset's (``base``) ranking
    (:func:`ranking_agreement`); ``None`` with fewer than two fixed topologies."""
    names = sorted(p for p in topo if p in FIXED_TOPOLOGIES)
    if len(names) < 2:
        return {"topologies": names, "fitted": None, "base": None}
    rows = [(p, k) for p in names for k in range(len(topo[p][0]))]
    clusters = np.array([topo[p][1][k] for p, k in rows])
    out: dict[str, Any] = {"topologies": names}
    for which, part in (("fitted", 0), ("base", 2)):
        real = np.full((len(names), len(rows)), np.nan)  # (P, E)
        sim = np.full((len(names), len(rows)), np.nan)
        for e, (p, k) in enumerate(rows):
            row = topo[p][part][k]
            real[names.index(p), e], sim[names.index(p), e] = row["real_rew"], row["sim_rew"]
        out[which] = ranking_agreement(real, sim, clusters, BOOTSTRAP, rng)
    return out


# ----------------------------------------------------------------------------- the command


def calibrate(
    options: CalibrateOptions,
    db: str | None = None,
    log: bool = True,
    progress: Callable[[str], None] | None = None,
) -> CalibrationResult:
    """Fit on the fit tasks' episodes, check on the others', write the society file."""
    options.validate()
    say = progress or (lambda _msg: None)
    runs = load_runs(db, options.runs)
    reread_counts = reread_runs(runs) if options.reread else None
    fit_records: list[EpisodeRecord] = []
    check: dict[str, list[EpisodeRecord]] = defaultdict(list)
    fit_tasks, check_tasks = set(), set()
    for run in runs:
        for rec in run.records:
            key = task_key(rec)
            if is_check_task(key, options.check_fraction):
                check[run.run_id].append(rec)
                check_tasks.add(key)
            else:
                fit_records.append(rec)
                fit_tasks.add(key)
    n_check = sum(len(v) for v in check.values())
    if not fit_records or not n_check:
        raise UserError(
            f"the runs hold {len(fit_tasks | check_tasks)} distinct tasks, too few to both fit "
            f"and check with --check-fraction {options.check_fraction}; give runs with more "
            "tasks or change --check-fraction."
        )
    models = sorted({r.model for r in runs if r.model})
    name = options.name or "calibrated-" + ("+".join(models) or "real")
    stock = get_preset(options.base)
    say(f"fitting on {len(fit_records)} episodes of {len(fit_tasks)} tasks")
    fit = fit_society(
        fit_records, stock, CalibrationConfig(options.prior_scale), name=name, model=f"sim/{name}"
    )
    say("setting the token budget (simulated full mesh on mixed)")
    fit.config.token_budget = full_mesh_tokens(fit.config, options.seed)
    fit.params.append(_budget_param(fit.config, stock))
    say(f"checking on {n_check} held-out episodes of {len(check_tasks)} other tasks")
    by_topology, by_action, ranking = check_tables(
        runs, check, fit.config, stock, options.draws, options.seed
    )
    split = {
        "by": "task (sha256 of benchmark/task_id)",
        "check_fraction": options.check_fraction,
        "fit_episodes": len(fit_records),
        "fit_tasks": len(fit_tasks),
        "check_episodes": n_check,
        "check_tasks": len(check_tasks),
        "draws": options.draws,
    }
    result = CalibrationResult(
        fit=fit,
        split=split,
        by_topology=by_topology,
        by_action=by_action,
        ranking=ranking,
        out=options.out,
        extra={
            "runs": list(dict.fromkeys(options.runs)),
            "models": models,
            "base": options.base,
            "prior_scale": options.prior_scale,
            "reread": reread_counts,
            "created_at": datetime.now().isoformat(timespec="seconds"),
        },
    )
    write_society(options.out, fit.config, result.report())
    if log:
        result.run_id = log_calibration(db, result, runs)
    return result


def reread_runs(runs: list[RunEpisodes]) -> dict[str, int]:
    """Re-read every run's episodes in place (:func:`reread`); what changed."""
    counts = {"episodes": 0, "answers_changed": 0, "episodes_changed": 0, "scores_changed": 0}
    for run in runs:
        runtime = run.opts.runtime_config()
        for k, old in enumerate(run.records):
            new, changed = reread(old, runtime)
            run.records[k] = new
            counts["episodes"] += 1
            counts["answers_changed"] += changed
            counts["episodes_changed"] += changed > 0
            counts["scores_changed"] += new.score != old.score
    return counts


def _budget_param(config: SocietyConfig, stock: SocietyConfig) -> Any:
    from core.backends.calibration import ParamFit

    b = float(config.token_budget)
    return ParamFit("token_budget", float(stock.token_budget), b, b, b, BUDGET_EPISODES)


def full_mesh_tokens(society: SocietyConfig, seed: int) -> int:
    """Mean tokens of the full mesh on ``mixed`` with the default team (a preset's budget)."""
    opts = TeamOptions(benchmark="mixed", seed=seed)
    env = TeamEnv(opts, "train", backend=SimBackend(society))
    try:
        records = env.run(Full(), range(BUDGET_EPISODES), width=64)
    finally:
        env.close()
    return max(1, round(float(np.mean([_tokens(r) for r in records]))))


def write_society(path: Path, society: SocietyConfig, report: dict[str, Any]) -> None:
    """The society file, written whole or not at all (a temporary file renamed over it)."""
    doc = {
        "format": SOCIETY_FORMAT,
        "version": SOCIETY_VERSION,
        "society": society_to_dict(society),
        "calibration": report,
    }
    text = json.dumps(doc, indent=1, default=_jsonable)
    fd, tmp = tempfile.mkstemp(prefix=".society-", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"not JSON: {type(value).__name__}")


def log_calibration(db: str | None, result: CalibrationResult, runs: list[RunEpisodes]) -> str:
    """The calibration as a run of kind ``calibrate`` (no episodes): the lab lists it."""
    from core.store.writer import RunLogger

    config = json.loads(
        json.dumps(
            {"calibration": result.report(), "out": str(result.out.absolute())}, default=_jsonable
        )
    )
    with RunLogger(
        db,
        "calibrate",
        config,
        backend="sim",
        model=result.fit.config.model,
        policy="calibrate",
        benchmark=",".join(sorted({r.opts.benchmark for r in runs})),
        seed=0,
    ) as logger:
        return logger.run_id
