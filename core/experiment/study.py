"""``agentqmix study transfer``: does a policy trained on the simulator pay on real agents,
and how wrong is the simulator about it?

The study, top to bottom (each phase leaves a file in the study folder, so a study killed
at any moment — SIGKILL included — resumes where it stopped, and the same settings give the
same result):

1. **calibrate** — unless ``--society FILE`` is given: every fixed topology plays
   ``calibrate_tasks`` real episodes of the *train* split (one logged run), and the
   synthetic society is fitted to them (:func:`core.backends.calibration.fit_society`,
   shrunk toward the stock preset) → ``calibrated.json``.
2. **train** — Agent Q-Mix is trained on the stock preset and on the calibrated society
   (the simulator, ``train_episodes`` each, the ``society`` recipe, the same token budget as
   the real reward) → ``stock.pt``, ``calibrated.pt``.
3. **fine-tune** (``finetune_episodes`` > 0) — ``calibrated.pt`` trained on real
   train-split episodes (:mod:`core.experiment.finetune`'s ``--init``, the ``finetune``
   recipe: an update an episode from the first) → ``finetuned.pt``.
4. **play** — every learned policy and every fixed topology on the same ``tasks`` held-out
   real tasks with the same episode seeds (the ``eval`` split of stream ``stream``): one
   logged run of kind ``compare``, so the lab's Compare page shows it. The response cache
   is off (a cached reply would cost no tokens, and a policy would inherit another's
   replies); on the native local engine every conversation starts from a clean slot, so no
   policy inherits another's server cache (docs/openai.md, "Replies that stay
   comparable"); the python engine, which keeps one prompt cache, gets a fresh server per
   policy.
5. **predict** — each policy played by the simulator (stock and calibrated) on the same
   held-out tasks, ``draws`` times each: what the simulator predicts it earns.
6. **analyse** — per policy real vs predicted reward; Kendall τ between the simulator's and
   the real ranking of the fixed topologies; each learned policy minus each other policy,
   paired by task: reward, accuracy, prompt and completion tokens with 95 % intervals from a
   bootstrap over tasks, and McNemar's exact test on correctness. Logged as a run of kind
   ``study`` (its config holds the result) and written to ``result.json``.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from core.errors import BudgetReached, UserError
from core.records import EpisodeRecord
from core.team.options import TeamOptions, options_from_dict
from core.team.topologies import FIXED_TOPOLOGIES

STUDY_FORMAT = "agentqmix-study"
LEARNED = ("stock", "calibrated", "finetuned")
"""The learned policies a study can hold, in playing order (``finetuned`` only when asked)."""


@dataclass
class StudyConfig:
    """What one transfer study runs; stored in its folder and with its results."""

    benchmark: str = "mixed"
    """Task source of every phase (its train split trains and calibrates, its eval split judges)."""
    tasks: int = 20
    """Held-out real tasks every policy plays (one episode each, the same seeds for all)."""
    stream: int = 1000
    """Seed of the held-out stream (never a training seed)."""
    train_episodes: int = 2000
    """Simulated training episodes on each society."""
    train_seed: int = 0
    """Seed of both simulated trainings."""
    n_envs: int = 32
    """Parallel simulated episodes while training."""
    society: str | None = None
    """A calibrated society file (``agentqmix calibrate --out``); None = calibrate here."""
    calibrate_tasks: int = 4
    """Without ``society``: real train-split episodes each fixed topology plays for the fit."""
    base: str = "flash-lite"
    """The stock preset: trained on as is, and the prior the calibration shrinks toward."""
    finetune_episodes: int = 0
    """Real train-split episodes fine-tuning the calibrated policy (0 = no fine-tune)."""
    topologies: tuple[str, ...] = tuple(FIXED_TOPOLOGIES)
    """The fixed topologies played beside the learned policies."""
    draws: int = 20
    """Simulated plays of each held-out task per policy (the prediction)."""
    bootstrap: int = 2000
    """Bootstrap resamples over tasks."""
    seed: int = 0
    """Seeds the simulated predictions and the bootstrap."""

    def validate(self) -> None:
        for name in ("tasks", "train_episodes", "n_envs", "draws", "bootstrap"):
            if getattr(self, name) < 1:
                raise UserError(
                    f"--{name.replace('_', '-')} must be >= 1, not {getattr(self, name)}."
                )
        for name in ("calibrate_tasks", "finetune_episodes"):
            if getattr(self, name) < 0:
                raise UserError(
                    f"--{name.replace('_', '-')} must be >= 0, not {getattr(self, name)}."
                )
        if self.society is None and self.calibrate_tasks < 1:
            raise UserError("give --society FILE or --calibrate-tasks >= 1 (the calibrated arm).")
        if self.society is not None and not Path(self.society).is_file():
            raise UserError(f"--society {self.society}: no such file.")
        if not self.topologies:
            raise UserError("--topologies needs at least one fixed topology.")
        for name in self.topologies:
            if name not in FIXED_TOPOLOGIES:
                raise UserError(f"topology {name!r} is not one of {', '.join(FIXED_TOPOLOGIES)}.")
        if self.stream == self.train_seed:
            raise UserError("the held-out --stream must differ from --train-seed.")

    @property
    def learned(self) -> tuple[str, ...]:
        return LEARNED if self.finetune_episodes else LEARNED[:2]

    @property
    def policies(self) -> tuple[str, ...]:
        """Every policy played, in order: the learned ones, then the fixed topologies."""
        return (*self.learned, *self.topologies)

    def episodes(self) -> dict[str, int]:
        """Real episodes per phase (what the estimate and the budget are about)."""
        calibrate = 0 if self.society else self.calibrate_tasks * len(self.topologies)
        return {
            "calibrate": calibrate,
            "finetune": self.finetune_episodes,
            "play": self.tasks * len(self.policies),
        }


Say = Callable[[str], None]


# --------------------------------------------------------------------------- the folder


class StudyFolder:
    """The study's folder: ``study.json`` (settings, and the run ids of its phases as they
    start), the checkpoints, the society and ``result.json``."""

    def __init__(self, folder: Path, config: StudyConfig, opts: TeamOptions):
        self.folder = folder
        self.path = folder / "study.json"
        settings = {"config": _plain(asdict(config)), "team": opts.run_config()["team"]}
        if self.path.exists():
            state = json.loads(self.path.read_text())
            if {k: state.get(k) for k in settings} != json.loads(json.dumps(settings)):
                raise UserError(
                    f"{folder} holds a study with other settings ({self.path}); choose another "
                    "--out, or the same settings to resume it."
                )
            self.state = state
        else:
            folder.mkdir(parents=True, exist_ok=True)
            self.state = {"format": STUDY_FORMAT, **settings, "runs": {}}
            self.save()

    def save(self) -> None:
        tmp = self.path.with_suffix(".part")
        tmp.write_text(json.dumps(self.state, indent=1))
        tmp.replace(self.path)

    def run_id(self, phase: str) -> str | None:
        return self.state["runs"].get(phase)

    def set_run(self, phase: str, run_id: str) -> None:
        self.state["runs"][phase] = run_id
        self.save()

    def file(self, name: str) -> Path:
        return self.folder / name


def _plain(d: dict[str, Any]) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}


def load_study(folder: Path) -> tuple[StudyConfig, TeamOptions]:
    """The settings a study folder holds (``--resume``)."""
    path = folder / "study.json"
    if not path.is_file():
        raise UserError(f"{folder} holds no study (no {path.name}); start one with --out.")
    state = json.loads(path.read_text())
    if state.get("format") != STUDY_FORMAT:
        raise UserError(f"{path} is not a study's file.")
    c = state["config"]
    return StudyConfig(**{**c, "topologies": tuple(c["topologies"])}), options_from_dict(
        state["team"]
    )


# --------------------------------------------------------------------------- progress


class Progress:
    """Counts real episodes against the study's total and says how far, with an ETA from
    the episodes of this session (a resumed study counts what it logged before as done)."""

    def __init__(self, total: int, say: Say):
        self.total, self.say = total, say
        self.done = 0
        self.started = time.monotonic()
        self.timed = 0

    def skip(self, n: int) -> None:
        self.done += n

    def add(self, n: int, what: str) -> None:
        self.done += n
        self.timed += n
        spent = time.monotonic() - self.started
        left = self.total - self.done
        eta = f", ETA {_duration(spent / self.timed * left)}" if left > 0 else ""
        self.say(f"{what}: {self.done}/{self.total} real episodes, {_duration(spent)}{eta}")


def _duration(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


# --------------------------------------------------------------------------- playing


def real_options(opts: TeamOptions) -> TeamOptions:
    """The team every real phase plays: no response cache (a cached reply costs no tokens,
    and a policy would read another's replies), and the stock preset's token budget (unless
    one is given) whichever society the study calibrates, so every reward is on one scale."""
    return replace(opts, use_cache=False, society=None)


def sim_options(opts: TeamOptions, society: str | None, base: str) -> TeamOptions:
    """The simulated team of ``society`` (None: the stock preset ``base``), rewarded with the
    real team's token budget so that every policy is trained for the reward it is judged by.
    The real back-end's own settings (its model, server, prompt layout and style) stay
    behind: the simulator has no prompts."""
    return replace(
        opts, backend="sim", preset=base, society=society, model=None, base_url=None,
        model_file=None, prompt_layout=None, prompt_style=None,
        token_budget=opts.resolved_token_budget(),
    )  # fmt: skip


def fresh_server_per_policy(opts: TeamOptions) -> bool:
    """The python local engine keeps one prompt cache for all requests: a fresh server for
    each policy. The native engine's clean slots need none; a remote server is not ours."""
    return opts.backend == "local" and opts.local_engine == "python"


def play_logged(
    opts: TeamOptions,
    split: str,
    parts: Sequence[tuple[Any, range]],
    logger: Any,
    skip: int,
    progress: Progress,
    stream: int,
) -> None:
    """Play ``parts`` (policy, episode indices of ``split`` of stream ``stream``) in order
    after the first ``skip`` episodes, logging each batch as soon as it is played (a kill
    loses at most the batch in flight). Stops at the run's budget
    (:func:`core.experiment.budget.episodes_that_fit`)."""
    from core.backends.local_server import shutdown_all
    from core.experiment.budget import episodes_that_fit
    from core.team.env import TeamEnv

    played: list[EpisodeRecord] = []
    for policy, indices in parts:
        if skip >= len(indices):
            skip -= len(indices)
            continue
        indices, skip = indices[skip:], 0
        if fresh_server_per_policy(opts):
            shutdown_all()
        env = TeamEnv(replace(opts, seed=stream), split)
        try:
            start = 0
            while start < len(indices):
                n = episodes_that_fit(min(opts.concurrency, len(indices) - start), played)
                records = env.run(policy, indices[start : start + n])
                logger.log_episodes(records)
                played += records
                start += n
                progress.add(n, policy.name)
        finally:
            env.close()


def stored_records(db: str | None, run_id: str) -> list[EpisodeRecord]:
    """Every episode a run logged, in order (what the analysis reads, resumed or not)."""
    from core.store.db import read_session
    from core.store.queries import load_episode_from

    with read_session(db) as cur:
        keys = cur.execute(
            "SELECT episode FROM episodes WHERE run_id = ? ORDER BY episode", [run_id]
        ).fetchall()
        return [load_episode_from(cur, run_id, k).record for (k,) in keys]


def logged_phase(
    folder: StudyFolder,
    phase: str,
    db: str | None,
    opts: TeamOptions,
    kind: str,
    config: dict[str, Any],
    total: int,
) -> tuple[Any, int]:
    """The phase's run logger (a new run, or the one a killed study left, resumed) and how
    many of its ``total`` episodes it already logged."""
    from core.store.queries import get_run, last_episode
    from core.store.writer import RunLogger

    run_id = folder.run_id(phase)
    if run_id is not None and get_run(db, run_id) is not None:
        last = last_episode(db, run_id)
        return RunLogger.resume(db, run_id), 0 if last is None else last + 1
    logger = RunLogger(
        db, kind, {**opts.run_config(), **config}, backend=opts.backend,
        model=opts.model_name(), policy=f"study:{phase}", benchmark=opts.benchmark,
        seed=opts.seed,
    )  # fmt: skip
    folder.set_run(phase, logger.run_id)
    return logger, 0


# --------------------------------------------------------------------------- phases


def calibrate_phase(
    folder: StudyFolder, config: StudyConfig, opts: TeamOptions, db: str | None,
    progress: Progress, say: Say,
) -> str:  # fmt: skip
    """The calibrated society's file: ``--society``, else fitted here to real train-split
    episodes of every fixed topology (module docstring, phase 1)."""
    from core.backends.society import get_preset
    from core.experiment.calibrate import full_mesh_tokens, write_society
    from core.team.topologies import make_policy

    if config.society:
        return str(Path(config.society).absolute())
    out = folder.file("calibrated.json")
    run_id = folder.run_id("calibrate")
    if not out.exists() or run_id is None:
        n = config.calibrate_tasks
        parts = [
            (make_policy(t), range(k * n, (k + 1) * n)) for k, t in enumerate(config.topologies)
        ]
        total = n * len(parts)
        logger, done = logged_phase(
            folder, "calibrate", db, opts, "eval", {"study": "calibrate"}, total
        )
        progress.skip(done)
        with logger:
            play_logged(opts, "train", parts, logger, done, progress, config.train_seed)
        records = stored_records(db, folder.run_id("calibrate"))
        say(f"fitting the society to {len(records)} real train-split episodes")
        stock = get_preset(config.base)
        name = f"calibrated-{opts.model_name() or 'real'}"
        fit = society_fit(records, stock, name)
        fit.config.token_budget = full_mesh_tokens(fit.config, config.seed)
        write_society(out, fit.config, {"fit": fit.to_dict(), "runs": [folder.run_id("calibrate")]})
    else:
        progress.skip(config.episodes()["calibrate"])
    return str(out.absolute())


def society_fit(records: Sequence[EpisodeRecord], stock: Any, name: str) -> Any:
    from core.backends.calibration import CalibrationConfig, fit_society

    return fit_society(records, stock, CalibrationConfig(), name=name, model=f"sim/{name}")


def train_phase(
    folder: StudyFolder, config: StudyConfig, opts: TeamOptions, society: str, say: Say
) -> dict[str, Path]:
    """``stock.pt`` and ``calibrated.pt``: Agent Q-Mix trained on each simulator (module
    docstring, phase 2). A checkpoint is written under a temporary name and renamed: one
    that exists is whole, and a killed training starts over from its seed."""
    from core.experiment.train import train_team
    from core.team.recipes import TEAM_RECIPE, recipe_config

    out = {}
    for name, soc in (("stock", None), ("calibrated", society)):
        path = folder.file(f"{name}.pt")
        out[name] = path
        if path.exists():
            continue
        say(f"training on the {name} society ({config.train_episodes} simulated episodes)")
        given = {
            "episodes": config.train_episodes,
            "max_updates": max(1, config.train_episodes // 10),
            "seed": config.train_seed,
            "n_envs": min(config.n_envs, config.train_episodes),
        }
        tmp = folder.file(f".{name}.pt.part")
        train_opts = replace(sim_options(opts, soc, config.base), seed=config.train_seed)
        train_team(train_opts, recipe_config(TEAM_RECIPE, given), tmp, log=False, eval_episodes=0)
        tmp.replace(path)
    return out


def finetune_phase(
    folder: StudyFolder, config: StudyConfig, opts: TeamOptions, init: Path, db: str | None,
    say: Say,
) -> Path:  # fmt: skip
    """``finetuned.pt``: the calibrated policy trained on real train-split episodes
    (``train --init``), logged as a training run; a killed fine-tune goes on where its
    run stopped (``train --resume``)."""
    from core.experiment.train import train_team
    from core.store.queries import get_run
    from core.team.recipes import FINETUNE_RECIPE, recipe_config

    path = folder.file("finetuned.pt")
    done = folder.file("finetuned.done")
    if done.exists():
        return path
    # The recipe `train --init` uses on a real model: an update an episode from the first,
    # its buffer started with simulated episodes (the society recipe would buffer 32 real
    # episodes before its first update).
    given = {"episodes": config.finetune_episodes, "seed": config.train_seed + 1}
    train_opts = replace(opts, seed=config.train_seed + 1)
    run_id = folder.run_id("finetune")
    train_config = recipe_config(FINETUNE_RECIPE, given)
    if run_id is not None and get_run(db, run_id) is not None:
        say(f"fine-tune: resuming run {run_id}")
        train_team(train_opts, train_config, None, db=db, resume_run=run_id, eval_episodes=0)
    else:
        say(f"fine-tuning on {config.finetune_episodes} real train-split episodes")
        outcome = train_team(
            train_opts, train_config, path, db=db, init=init, eval_episodes=0,
            progress=None, recipe=FINETUNE_RECIPE,
        )  # fmt: skip
        if outcome.run_id:
            folder.set_run("finetune", outcome.run_id)
    done.write_text("done\n")
    return path


def play_phase(
    folder: StudyFolder, config: StudyConfig, opts: TeamOptions, checkpoints: dict[str, Path],
    db: str | None, progress: Progress,
) -> list[EpisodeRecord]:  # fmt: skip
    """Every policy on the same held-out tasks and seeds, one logged ``compare`` run (module
    docstring, phase 4); returns its episodes in plan order."""
    from core.experiment.evaluate import EvalPlan
    from core.experiment.policies import describe

    policies = study_policies(config, opts, checkpoints)
    plan = EvalPlan(
        "compare", config.policies, config.tasks, config.stream,
        checkpoints=tuple(str(checkpoints[n].absolute()) for n in config.learned),
    )  # fmt: skip
    extra = {
        "eval": plan.config(len(opts.roles)),
        "policies": {p.name: describe(p).as_dict() for p in policies},
        "study": "play",
    }
    total = config.tasks * len(policies)
    logger, done = logged_phase(folder, "play", db, opts, "compare", extra, total)
    progress.skip(done)
    span = range(config.tasks)
    with logger:
        play_logged(
            opts, "eval", [(p, span) for p in policies], logger, done, progress, config.stream
        )
    records = stored_records(db, folder.run_id("play"))
    if len(records) < total:
        raise UserError(
            f"the study's held-out run {folder.run_id('play')} holds {len(records)} of {total} "
            "episodes (stopped at its budget?); resume it with a larger budget."
        )
    return records


def study_policies(
    config: StudyConfig, opts: TeamOptions, checkpoints: dict[str, Path]
) -> list[Any]:
    """The learned policies (named after their society) then the fixed topologies."""
    from core.experiment.evaluate import learned_policy
    from core.team.topologies import make_policy

    out = []
    for name in config.learned:
        policy = learned_policy(checkpoints[name], opts, "cpu")
        policy.name = name
        out.append(policy)
    return out + [make_policy(t) for t in config.topologies]


def predict(
    policy: Any, records: Sequence[EpisodeRecord], opts: TeamOptions, draws: int, seed: int
) -> np.ndarray:
    """What the simulator of ``opts`` predicts ``policy`` earns on the tasks of ``records``:
    per task, the mean reward of ``draws`` simulated episodes, rewarded as the real ones
    (``(len(records),)``)."""
    from core.tasks.base import TaskList, task_of
    from core.team.env import TeamEnv

    tasks = [task_of(r) for r in records]
    env = TeamEnv(replace(opts, seed=seed), None, source=TaskList(tasks))
    try:
        sims = env.run(policy, range(len(tasks) * draws), width=64)
    finally:
        env.close()
    rewards = np.asarray([s.reward for s in sims], dtype=float).reshape(draws, len(tasks))
    return rewards.mean(axis=0)


# --------------------------------------------------------------------------- analysis


def episode_table(records: Sequence[EpisodeRecord]) -> dict[str, np.ndarray]:
    """Per-episode columns: task, reward, correct, prompt and completion tokens."""
    return {
        "task": np.asarray([f"{r.benchmark}/{r.task_id}" for r in records]),
        "reward": np.asarray([r.reward for r in records], dtype=float),
        "correct": np.asarray([r.score >= 1.0 for r in records], dtype=float),
        "prompt": np.asarray([r.prompt_tokens for r in records], dtype=float),
        "completion": np.asarray([r.completion_tokens for r in records], dtype=float),
    }


METRICS = ("reward", "correct", "prompt", "completion")


def analyse(
    config: StudyConfig,
    records: Sequence[EpisodeRecord],
    predicted: dict[str, dict[str, np.ndarray]],
) -> dict[str, Any]:
    """The study's result (module docstring, phase 6). ``records``: the play run's episodes
    in plan order (``tasks`` per policy); ``predicted[society][policy]``: ``(tasks,)``."""
    from core.experiment.calibrate import clustered_ci, ranking_agreement
    from core.experiment.policies import mcnemar

    rng = np.random.default_rng(config.seed)
    n = config.tasks
    table = {p: episode_table(records[k * n : (k + 1) * n]) for k, p in enumerate(config.policies)}
    tasks = table[config.policies[0]]["task"]
    for p, cols in table.items():
        if not (cols["task"] == tasks).all():
            raise RuntimeError(f"policy {p} played other tasks than {config.policies[0]}")
    rows = []
    for p in config.policies:
        row: dict[str, Any] = {"policy": p, "family": "learned" if p in LEARNED else "fixed"}
        for m in METRICS:
            row[m] = _ci(clustered_ci(table[p][m], tasks, rng))
        for soc, preds in predicted.items():
            row[f"predicted_{soc}"] = _ci(clustered_ci(preds[p], tasks, rng))
            row[f"error_{soc}"] = _ci(clustered_ci(preds[p] - table[p]["reward"], tasks, rng))
        rows.append(row)
    fixed = list(config.topologies)
    ranking = {
        soc: ranking_agreement(
            np.stack([table[p]["reward"] for p in fixed]),
            np.stack([preds[p] for p in fixed]),
            tasks,
            config.bootstrap,
            rng,
        )  # fmt: skip
        for soc, preds in predicted.items()
    }
    diffs = []
    for a in config.learned:
        for b in config.policies:
            if b == a or (b in LEARNED and config.policies.index(b) < config.policies.index(a)):
                continue
            d: dict[str, Any] = {"a": a, "b": b}
            for m in METRICS:
                d[m] = _ci(clustered_ci(table[a][m] - table[b][m], tasks, rng))
            d["mcnemar"] = mcnemar(table[a]["correct"] > 0, table[b]["correct"] > 0)
            diffs.append(d)
    return {
        "tasks": n,
        "policies": rows,
        "ranking": ranking,
        "differences": diffs,
        "interval": f"95 % percentile bootstrap over tasks, {config.bootstrap} resamples",
    }


def _ci(t: tuple[float, float, float]) -> dict[str, float]:
    return {"mean": t[0], "lo": t[1], "hi": t[2]}


# --------------------------------------------------------------------------- the command


@dataclass
class StudyResult:
    folder: Path
    result: dict[str, Any]
    run_id: str | None = None
    runs: dict[str, str] = field(default_factory=dict)


def run_study(
    config: StudyConfig,
    opts: TeamOptions,
    folder: Path,
    db: str | None = None,
    budget: Any = None,
    say: Say | None = None,
) -> StudyResult:
    """Run (or resume) the study in ``folder``: module docstring. ``budget`` (a
    :class:`~core.experiment.finetune.Budget`) caps every real episode of the study, the
    estimate (:func:`core.experiment.budget.real_run`) is printed before the first."""
    from core.experiment.budget import real_run
    from core.experiment.finetune import Budget

    config.validate()
    say = say or (lambda _line: None)
    if opts.backend == "sim":
        raise UserError("a transfer study plays real agents: give --backend local or openai.")
    opts = real_options(opts)
    opts.validate()
    sim_options(opts, None, config.base).validate()  # the training team, before any spend
    state = StudyFolder(folder, config, opts)
    out = folder / "result.json"
    if out.exists() and state.run_id("study"):
        say(f"the study in {folder} is complete (run {state.run_id('study')})")
        result = json.loads(out.read_text())
        return StudyResult(folder, result, state.run_id("study"), dict(state.state["runs"]))
    episodes = config.episodes()
    total = sum(episodes.values())
    say(
        f"study: {total} real episodes ({episodes['calibrate']} to calibrate, "
        f"{episodes['finetune']} to fine-tune, {config.tasks} held-out tasks x "
        f"{len(config.policies)} policies) and {2 * config.train_episodes} simulated "
        "training episodes"
    )
    progress = Progress(total, say)
    spent = _spent(db, state)
    try:
        with real_run(opts, budget or Budget(), total - _done(db, state), say, spent, "eval"):
            society = calibrate_phase(state, config, opts, db, progress, say)
            checkpoints = train_phase(state, config, opts, society, say)
            if config.finetune_episodes:
                checkpoints["finetuned"] = finetune_phase(
                    state, config, opts, checkpoints["calibrated"], db, say
                )
            progress.skip(episodes["finetune"])
            records = play_phase(state, config, opts, checkpoints, db, progress)
    except BudgetReached as err:
        raise BudgetReached(
            f"{err}; the study in {folder} keeps every episode it logged: run the same "
            "command with a larger budget to go on."
        ) from err
    say("predicting every policy in the simulators")
    predicted = {}
    policies = study_policies(config, opts, checkpoints)
    n = config.tasks
    for soc, path in (("stock", None), ("calibrated", society)):
        sim = sim_options(opts, path, config.base)
        predicted[soc] = {
            p.name: predict(p, records[k * n : (k + 1) * n], sim, config.draws, config.seed)
            for k, p in enumerate(policies)
        }
    result = analyse(config, records, predicted)
    result = {"config": _plain(asdict(config)), "runs": dict(state.state["runs"]), **result}
    tmp = out.with_suffix(".part")
    tmp.write_text(json.dumps(result, indent=1, default=_jsonable))
    tmp.replace(out)
    run_id = log_study(db, opts, result)
    state.set_run("study", run_id)
    return StudyResult(folder, result, run_id, dict(state.state["runs"]))


def _spent(db: str | None, state: StudyFolder) -> tuple[int, int]:
    """What the study's logged real runs spent before (a resumed study's budget counts it)."""
    from core.store.queries import get_run, run_spend

    tokens = calls = 0
    for run_id in state.state["runs"].values():
        if get_run(db, run_id) is not None:
            t, c = run_spend(db, run_id)
            tokens, calls = tokens + t, calls + c
    return tokens, calls


def _done(db: str | None, state: StudyFolder) -> int:
    from core.store.queries import get_run, last_episode

    done = 0
    for run_id in state.state["runs"].values():
        if get_run(db, run_id) is not None:
            last = last_episode(db, run_id)
            done += 0 if last is None else last + 1
    return done


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    raise TypeError(f"not JSON: {type(value).__name__}")


def log_study(db: str | None, opts: TeamOptions, result: dict[str, Any]) -> str:
    """The study as a run of kind ``study`` (no episodes; its config holds the result and
    the ids of the runs it played): the lab lists it."""
    from core.store.writer import RunLogger

    config = {"study": json.loads(json.dumps(result, default=_jsonable)), **opts.run_config()}
    with RunLogger(
        db, "study", config, backend=opts.backend, model=opts.model_name(),
        policy="study", benchmark=opts.benchmark, seed=result["config"]["stream"],
    ) as logger:  # fmt: skip
        return logger.run_id
