"""The token/accuracy sweep: one learned policy per (token weight, seed), trained on Ray.

Each trial is a Ray task (:data:`train_trial_task`, one CPU) that trains with nothing
logged, then plays the greedy policy on the sweep's ``K`` held-out tasks (eval seed
``E``); each fixed topology plays the very same tasks in a task of its own
(:data:`evaluate_fixed_task`). With ``--backend local`` every task plays on one llama.cpp
server the driver starts (:func:`shared_local_server`), one task at a time. Trials never
open the episode store and need no filesystem shared with the driver: their episodes, metric rows and checkpoint come back
as the task's return value (episodes in packed batches, :func:`pack_episodes`,
the checkpoint as bytes). The driver (:func:`run_sweep`) is the store's only writer: it
writes each checkpoint under ``--out`` and logs each trial as one ``train`` run and one
``eval`` run, and each fixed topology as one ``eval`` run. Every run of a sweep stores

    config["sweep"] = {"id": SWEEP_ID, "token_weight": w, "seed": s, "method": m, "knob": k,
                       "pass_through": rule}

(``token_weight`` and ``seed`` are null for the fixed topologies; ``method`` is ``qmix`` or
a learned-topology method of :mod:`core.baselines` (``--methods``), ``knob`` that method's
swept setting, e.g. ``{"prune_ratio": 0.3}`` (``--knob``), empty for qmix and the fixed
topologies; ``pass_through`` the decision rule the point was played under), besides the
usual ``config["team"]`` (its ``token_weight`` and ``token_penalty`` are the trial's reward,
its ``pass_through`` the same rule).

The decision rule is an axis of the grid like the token weight (``--pass-through
off,unanimous``): every trial, and every fixed topology it is compared with, is played once
under each rule, and each rule has its own front — the consensus pass-through changes what
every point costs, so its points and the paper's are two trade-offs, not one.

The result is every point's accuracy, mean tokens and mean reward on the held-out tasks,
each with a 95% interval (accuracy: Wilson score interval; tokens and reward: normal
interval of the mean, ``mean ± 1.96·sd/√n``), and the front: the points no other point
beats on both accuracy (higher) and mean tokens (lower).

This module is the driver and its Ray plumbing; the plan and the result rows are
:mod:`core.experiment.sweep_plan`, the tasks :mod:`core.experiment.sweep_trials`, what a
resumed sweep finds stored :mod:`core.experiment.sweep_resume`.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import RayError

from core.backends.local_server import LocalServer
from core.backends.spend import budget_stop, spend_env
from core.baselines.training import BaselineTrainConfig
from core.errors import BudgetReached, UserError
from core.experiment.evaluate import log_run
from core.experiment.policies import (
    PolicyInfo,
    pareto_front,
)
from core.experiment.sweep_plan import (
    FixedSpec,
    StoredSweep,
    SweepConfig,
    TrialSpec,
    checkpoint_name,
    fixed_row,
    held_sweep_id,
    new_sweep_id,
    plan_fixed,
    plan_trials,
    trial_id,
    trial_row,
    trial_run_config,
)
from core.experiment.sweep_resume import read_stored_sweep
from core.experiment.sweep_trials import (
    TrialResult,
    evaluate_fixed_task,
    train_trial_task,
    unpack_episodes,
)
from core.host import process_alive
from core.paths import check_output_dir, write_file
from core.qmix.training import TrainConfig
from core.records import EpisodeRecord
from core.store.engine import resolve_db, sweep_status_dir
from core.team.options import TeamOptions

CONNECT_TIMEOUT_S = 5.0
"""How long to try to reach ``--ray-address`` before saying it cannot be reached."""
POLL_S = 0.5
"""How often the driver looks up from waiting (to update the progress bar, notice Ctrl-C)."""


# --------------------------------------------------------------------------- Ray


def check_reachable(address: str, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """A UserError unless something listens at ``address`` (``ray.init`` itself would wait
    for minutes on an address where nothing answers)."""
    if address == "auto":
        return
    hostport = address.removeprefix("ray://")
    host, sep, port = hostport.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise UserError(
            f"--ray-address must be HOST:PORT, ray://HOST:PORT or auto, not {address!r}."
        )
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise UserError(
            f"cannot reach a Ray cluster at {address} ({reason}); start one with "
            "`ray start --head` or leave out --ray-address to run on this machine."
        ) from None


@contextmanager
def ray_session(address: str | None) -> Iterator[None]:
    """Ray for the sweep: a local Ray with this machine's cores, or the cluster at
    ``address`` (this package's ``core`` travels to its workers, so they run the driver's
    code). Reuses a Ray the caller already started; otherwise shuts it down after."""
    if ray.is_initialized():
        yield
        return
    quiet = {"include_dashboard": False, "log_to_driver": False, "logging_level": "ERROR"}
    if address is None:
        with _local_ray(quiet):
            yield
        return
    check_reachable(address)
    core_dir = str(Path(__file__).resolve().parent.parent)
    env = {"py_modules": [core_dir], "excludes": ["__pycache__"]}
    try:
        ray.init(address=address, runtime_env=env, **quiet)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise UserError(
            f"could not join the Ray cluster at {address} ({_one_line(exc)})."
        ) from None
    try:
        yield
    finally:
        ray.shutdown()


@contextmanager
def _local_ray(quiet: dict[str, Any]) -> Iterator[None]:
    """A local Ray in a temporary folder of its own, shut down and removed on every exit:
    normal, exception, Ctrl-C, SIGTERM (turned into SystemExit here), and — through the
    watcher of :mod:`core.experiment.ray_reaper` — the driver's own death by SIGKILL."""
    import subprocess
    import sys

    from core.experiment.ray_reaper import DONE, MARK, reap, snapshot

    # Short, under /tmp: Ray's socket paths must stay within 107 bytes.
    temp_dir = tempfile.mkdtemp(prefix="aqmix-ray-", dir="/tmp")
    watcher = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("ray_reaper.py")), temp_dir],
        stdin=subprocess.PIPE,
        start_new_session=True,
        cwd=str(Path(__file__).resolve().parents[2]),
    )
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        os.environ[MARK] = temp_dir  # inherited by every process Ray starts
        try:
            ray.init(num_cpus=os.cpu_count(), _temp_dir=temp_dir, **quiet)
        finally:
            os.environ.pop(MARK, None)
        yield
    finally:
        seen = snapshot(temp_dir)  # before shutdown orphans the workers
        try:
            ray.shutdown()
        finally:
            reap(temp_dir, seen)  # what shutdown left (it leaves the folder, at least)
            assert watcher.stdin is not None
            watcher.stdin.write(DONE)
            watcher.stdin.close()
            watcher.wait()
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


@contextmanager
def interrupt_requests() -> Iterator[threading.Event]:
    """Ctrl-C sets the event (the driver then cancels what runs and keeps what finished);
    a second Ctrl-C interrupts at once."""
    requested = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield requested
        return

    def on_sigint(signum: int, frame: Any) -> None:
        if requested.is_set():
            raise KeyboardInterrupt
        requested.set()

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield requested
    finally:
        signal.signal(signal.SIGINT, previous)


def _one_line(exc: BaseException) -> str:
    cause = getattr(exc, "cause", None)  # a RayTaskError carries the task's own exception
    if isinstance(cause, BaseException):
        exc = cause
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


# --------------------------------------------------------------------------- the driver


@dataclass
class SweepStatus:
    """What the progress bar shows."""

    total: int
    """Trials planned (``done``, ``running``, ``failed`` count trials too)."""
    done: int = 0
    running: int = 0
    failed: int = 0
    fixed_total: int = 0
    """Fixed topologies planned; each is a task of its own."""
    fixed_done: int = 0
    """Fixed topologies played (or failed)."""
    fixed_running: int = 0


class _LiveStatus:
    """Writes the sweep's :class:`SweepStatus` and plan to
    :func:`core.store.engine.sweep_status_dir` when it
    changes (``state``: ``running``, then ``finished``, ``interrupted`` or ``failed``)."""

    def __init__(self, path: Path, plan: dict[str, Any]):
        self.path, self.plan, self.last = path, plan, None
        path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, status: SweepStatus, state: str = "running", error: str = "") -> None:
        now = (state, status.done, status.running, status.failed)
        if now == self.last:
            return
        self.last = now
        body = {**self.plan, **asdict(status), "state": state, "error": error,
                "pid": os.getpid(), "updated_at": time.time()}  # fmt: skip
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(body))
        os.replace(tmp, self.path)  # a reader never sees half a file


def run_sweep(
    opts: TeamOptions,
    sweep: SweepConfig,
    train_config: TrainConfig,
    db: str | None = None,
    log: bool = True,
    progress: Callable[[SweepStatus], None] | None = None,
    report: Callable[[str], None] | None = None,
    trial_task: Any = None,
    baseline_config: BaselineTrainConfig | None = None,
    notice: Callable[[str], None] | None = None,
    budget: Callable[[], AbstractContextManager[Any]] | None = None,
) -> dict[str, Any]:
    """Run the sweep on Ray; log every run from here; return the result (also written to
    ``out/sweep.json``). ``report`` gets one line per failed trial; ``trial_task`` is the
    remote function that trains a trial (default :data:`train_trial_task`);
    ``baseline_config`` is the budget of the learned-topology methods' trials; ``notice``
    gets the lines that say what a resumed sweep (``sweep.resume``) skips and runs again,
    which local model server plays, and one line per finished trial or topology.
    ``budget`` opens the run's budget once every flag is checked
    (:func:`core.experiment.budget.real_run`: the estimate, the spend cap its trials share)."""
    baseline_config = baseline_config or BaselineTrainConfig()
    import json

    from core.store import open_store

    if sweep.resume is not None and not log:
        raise UserError("--resume reads what the sweep stored, so it cannot go with --no-log.")
    opts.validate()
    rules = sweep.rules(opts)
    sweep = replace(sweep, pass_through=rules)
    sweep.validate()
    train_config.validate()
    if sweep.ray_address is not None:
        check_reachable(sweep.ray_address)  # before anything is created
    if sweep.resume is not None and not resolve_db(db).exists():
        raise UserError(
            f"No episode store at {resolve_db(db)}; --resume needs the --db the sweep logged to."
        )
    if opts.backend == "local":  # a bad model file or install: one sentence, nothing made
        from core.backends.local_server import check_installed, resolve
        from core.backends.registry import local_model_server

        resolve(local_model_server(opts))
        check_installed()
    if log:
        open_store(db)  # a bad --db is one sentence before any work
    sweep_id = sweep.resume or new_sweep_id()
    specs = plan_trials(sweep_id, opts, sweep, train_config, baseline_config)
    fixed = plan_fixed(sweep_id, opts, sweep)
    stored = StoredSweep(missing=specs, missing_topologies=fixed)
    if sweep.resume is not None:
        # A sweep stopped before it stored anything is known by its live file or sweep.json.
        started = (sweep_status_dir(db) / f"{sweep_id}.json").exists()
        started |= held_sweep_id(sweep.out / "sweep.json") == sweep_id
        stored = read_stored_sweep(db, specs, fixed, sweep, started)
    check_output_dir(sweep.out, "--out")  # once the flags are known to be good
    live = None
    if log:
        path = sweep_status_dir(db) / f"{sweep_id}.json"
        plan = {"sweep_id": sweep_id, "benchmark": opts.benchmark, "started_at": time.time(),
                "token_weights": list(sweep.token_weights), "seeds": list(sweep.seeds),
                "pass_through": list(rules), "topologies": list(sweep.topologies),
                "eval_episodes": sweep.eval_episodes}  # fmt: skip
        if sweep.resume is not None:
            plan |= _resumed_plan(path, len(stored.trials))
        live = _LiveStatus(path, plan)
    if sweep.resume is not None:
        for line in stored.summary(len(specs), len(fixed)):
            (notice or (lambda line: None))(line)
        stored.discard_stale(db)

    def publish(status: SweepStatus) -> None:
        if live is not None:
            live.write(status)
        if progress is not None:
            progress(status)

    say = notice or (lambda line: None)
    driver = _Driver(
        sweep_id, sweep, db, log, publish, report or (lambda line: None), stored,
        total=len(specs), notice=say,
    )  # fmt: skip
    stop = threading.Event()
    try:
        if stored.missing or stored.missing_topologies:  # a finished sweep resumed needs no Ray
            with shared_local_server(opts, sweep) as server:
                if server is not None:
                    say(
                        f"local model {server.model.name} on {server.url} (pid {server.pid}): "
                        "one server for the whole sweep, one task at a time"
                    )
                with (
                    budget() if budget is not None else nullcontext(),
                    ray_session(sweep.ray_address),
                    interrupt_requests() as stop,
                ):
                    driver.run(trial_task or train_trial_task, stop, server)
    except BaseException as exc:
        if live is not None:
            live.write(driver.status, "failed", _one_line(exc))
        raise
    if live is not None:
        live.write(driver.status, "interrupted" if stop.is_set() else "finished")
    result = {
        "engine": "ray",
        "sweep_id": sweep_id,
        "benchmark": opts.benchmark,
        "token_penalty": opts.token_penalty,
        "episodes": train_config.episodes,
        "eval_episodes": sweep.eval_episodes,
        "eval_seed": sweep.eval_seed,
        "methods": list(sweep.methods),
        "pass_through": list(rules),
        "trials": sorted(
            driver.trials,
            key=lambda t: (
                sweep.methods.index(t["method"]),
                rules.index(t["pass_through"]),
                t["token_weight"],
                sorted(t["knob"].items()),
                t["seed"],
            ),
        ),  # fmt: skip
        "fixed": sorted(
            driver.fixed,
            key=lambda f: (sweep.topologies.index(f["policy"]), rules.index(f["pass_through"])),
        ),
        "failed": driver.failed,
        "cancelled": driver.cancelled,
        "interrupted": stop.is_set(),
        "skipped": {"trials": len(stored.trials), "fixed": len(stored.fixed)},
    }
    points = [{"kind": "trial", "policy": t["method"], **t} for t in result["trials"]]
    points += [
        {"kind": "fixed", "token_weight": None, "seed": None, "knob": {}, **f}
        for f in result["fixed"]
    ]
    keys = ("kind", "policy", "pass_through", "token_weight", "knob", "seed", "n", "accuracy")
    keys += ("accuracy_ci", "mean_tokens", "mean_tokens_ci")
    # One front per decision rule: the pass-through changes every point's cost, so the
    # two rules' points are two trade-offs (as two back-ends' would be), not one.
    result["front"] = [
        {k: p[k] for k in keys}
        for rule in rules
        for p in pareto_front([p for p in points if p["pass_through"] == rule])
    ]
    write_file(sweep.out / "sweep.json", (json.dumps(result, indent=2) + "\n").encode(), "--out")
    return result


@contextmanager
def shared_local_server(opts: TeamOptions, sweep: SweepConfig) -> Iterator[LocalServer | None]:
    """The llama.cpp server of a ``--backend local`` sweep on this machine's Ray: started
    here, handed to every task (:meth:`LocalServer.attach_env`), stopped when the sweep
    ends. One server, not one per Ray worker: it decodes one completion at a time with
    every idle core, so on a small machine a second server only competes for the same
    cores (measured: no faster quiet, slower under load; docs/sweep.md) and loads the
    model again, and on a large one every worker's server would take every idle core.
    Tasks go one at a time: two clients of one server only queue there and throw away
    each other's cached prefix. None for other back-ends, and on a cluster
    (``--ray-address``: 127.0.0.1 here is not reachable there), where each worker starts
    its own and keeps it for its later tasks."""
    if opts.backend != "local" or sweep.ray_address is not None:
        yield None
        return
    from core.backends.local_server import serving
    from core.backends.registry import local_model_server

    with serving(local_model_server(opts)) as server:
        yield server


def _resumed_plan(path: Path, skipped: int) -> dict[str, Any]:
    """The live file's record of a resumption: when, how many trials it skipped, and the
    sweep's first start. A sweep whose driver still runs is not resumed a second time."""
    try:
        before = json.loads(path.read_text())
    except (OSError, ValueError):
        before = {}
    if not isinstance(before, dict):
        before = {}
    pid = before.get("pid")
    # Our own pid is a sweep this process ran before (in-process callers), not a live driver.
    if (
        before.get("state") == "running"
        and isinstance(pid, int)
        and pid != os.getpid()
        and process_alive(pid)
    ):
        raise UserError(
            f"sweep {path.stem} is still running (pid {pid}); stop it before resuming it."
        )
    first = before.get("started_at")
    return {
        "resumed": True,
        "resumed_at": time.time(),
        "skipped": skipped,
        **({"started_at": first} if isinstance(first, int | float) else {}),
    }


class _Driver:
    """Submits the trials and the fixed topologies, a task each (the topologies first: they
    are quick, and each is a point of the front), at most ``max_parallel`` trials at once
    (with a shared local server: at most ``max_parallel`` tasks of any kind, default 1),
    and logs each as it finishes: the only writer of the store. Of a resumed sweep, only
    what ``stored`` lacks; its stored rows join the result."""

    def __init__(
        self,
        sweep_id: str,
        sweep: SweepConfig,
        db: str | None,
        log: bool,
        progress: Callable[[SweepStatus], None] | None,
        report: Callable[[str], None],
        stored: StoredSweep,
        total: int,
        notice: Callable[[str], None] = lambda line: None,
    ):
        self.sweep_id, self.sweep, self.db, self.log = sweep_id, sweep, db, log
        self.progress, self.report = progress, report
        self.specs, self.topologies = stored.missing, stored.missing_topologies
        self.trials: list[dict[str, Any]] = list(stored.trials)
        self.fixed: list[dict[str, Any]] = list(stored.fixed)
        self.failed: list[dict[str, Any]] = []
        self.cancelled: list[dict[str, Any]] = []
        self.notice = notice
        self.status = SweepStatus(
            total=total, done=len(stored.trials),
            fixed_total=len(stored.fixed) + len(stored.missing_topologies),
            fixed_done=len(stored.fixed),
        )  # fmt: skip

    def run(self, trial_task: Any, stop: threading.Event, server: LocalServer | None) -> None:
        sweep = self.sweep
        if server is None:
            limit = sweep.max_parallel or max(1, int(ray.cluster_resources().get("CPU", 1)))
            # The topologies' tasks run beside the trials, as one task did before.
            limit_all = limit + len(self.topologies)
        else:
            limit = limit_all = sweep.max_parallel or 1
        # Trials find the shared local server and the run's spend cap through these.
        env_vars = {**(server.attach_env() if server else {}), **spend_env()}
        options = {"runtime_env": {"env_vars": env_vars}} if env_vars else {}
        queue: deque[TrialSpec | FixedSpec] = deque([*self.topologies, *self.specs])
        running: dict[Any, tuple[TrialSpec | FixedSpec, float]] = {}
        status = self.status
        gone = spent = None
        while (queue or running) and not stop.is_set():
            while queue and len(running) < limit_all:
                if isinstance(queue[0], TrialSpec) and status.running >= limit:
                    break
                part = queue.popleft()
                if isinstance(part, FixedSpec):
                    ref = evaluate_fixed_task.options(**options).remote(
                        part.team, (part.name,), sweep.eval_episodes, sweep.eval_seed
                    )
                else:
                    ref = trial_task.options(**options).remote(part)
                running[ref] = (part, time.monotonic())
                self._count(running)
            if self.progress:
                self.progress(status)
            ready, _ = ray.wait(list(running), num_returns=1, timeout=POLL_S)
            for ref in ready:
                part, started = running.pop(ref)
                self._finish(part, ref, status, time.monotonic() - started)
            self._count(running)
            gone = server.gone() if server is not None else None
            spent = budget_stop()
            if gone or spent:
                break
        if stop.is_set() or gone or spent:
            for ref, (part, _) in running.items():
                ray.cancel(ref, force=True)
                if isinstance(part, TrialSpec):
                    self.cancelled.append(trial_id(part))
            self.cancelled += [trial_id(s) for s in queue if isinstance(s, TrialSpec)]
        status.running = status.fixed_running = 0
        if self.progress:
            self.progress(status)
        if gone:
            from core.backends.local_server import LocalServerGone

            raise LocalServerGone(f"{gone}; the parts that finished are logged.")
        if spent:
            raise BudgetReached(f"stopped at budget: {spent}; the parts that finished are logged.")

    def _count(self, running: dict[Any, tuple[TrialSpec | FixedSpec, float]]) -> None:
        trials = sum(isinstance(part, TrialSpec) for part, _ in running.values())
        self.status.running, self.status.fixed_running = trials, len(running) - trials

    def _finish(
        self, part: TrialSpec | FixedSpec, ref: Any, status: SweepStatus, seconds: float
    ) -> None:
        what = part.label
        try:
            result = ray.get(ref)
        except RayError as exc:
            if isinstance(part, TrialSpec):
                status.failed += 1
                trial = trial_id(part)
            else:
                status.fixed_done += 1
                trial = {"token_weight": None, "seed": None, "policy": part.name,
                         "pass_through": part.pass_through}  # fmt: skip
            self.failed.append({**trial, "error": _one_line(exc)})
            self.report(f"{what} failed: {_one_line(exc)}")
            return
        if isinstance(part, FixedSpec):
            self._log_fixed(part, result)
            status.fixed_done += 1
            point = self.fixed[-1]
        else:
            point = self._log_trial(part, result)
            self.trials.append(point)
            status.done += 1
        self.notice(
            f"{what}: accuracy {point['accuracy']:.3f}, {point['mean_tokens']:,.0f} tokens an "
            f"episode on {point['n']} held-out tasks ({seconds:,.0f} s)"
        )

    def _log_trial(self, spec: TrialSpec, result: TrialResult) -> dict[str, Any]:
        from core.store.writer import RunLogger

        name = checkpoint_name(
            spec.token_weight, spec.seed, spec.method, spec.knob, spec.pass_through
        )
        path = (self.sweep.out / name).absolute()
        write_file(path, result.checkpoint, "--out")
        held_out = [EpisodeRecord.from_dict(d) for d in result.evaluation]
        facts = {"updates": result.updates, "seconds": result.seconds, "node": result.node}
        train_run = eval_run = None
        if self.log:
            with RunLogger(
                self.db,
                "train",
                {**trial_run_config(spec), "trial": facts},
                backend=spec.team.backend,
                model=spec.team.model_name(),
                policy=spec.method,
                benchmark=spec.team.benchmark,
                seed=spec.seed,
            ) as logger:
                for blob in result.episodes:
                    logger.log_episodes(unpack_episodes(blob))
                logger.log_metrics(result.metrics)
                logger.set_checkpoint(path, logger.next_episode - 1)
                train_run = logger.run_id
            eval_run = log_run(
                self.db,
                "eval",
                replace(spec.team, seed=spec.eval_seed),
                spec.method,
                spec.eval_seed,
                held_out,
                {
                    "sweep": spec.key,
                    "checkpoint": str(path),
                    "policies": {spec.method: self._info(spec, path)},
                },
            )
        facts["train_episodes"] = result.train_episodes
        return trial_row(spec, str(path), held_out, facts, train_run, eval_run)

    @staticmethod
    def _info(spec: TrialSpec, path: Path) -> dict[str, Any]:
        """The trial's :class:`~core.experiment.policies.PolicyInfo`, as its eval run stores it."""
        return PolicyInfo(
            spec.method, "learned", spec.method, spec.token_weight, spec.knob, str(path)
        ).as_dict()

    def _log_fixed(self, spec: FixedSpec, played: dict[str, list[dict[str, Any]]]) -> None:
        records = [EpisodeRecord.from_dict(d) for d in played[spec.name]]
        run_id = None
        if self.log:
            run_id = log_run(
                self.db,
                "eval",
                replace(spec.team, seed=self.sweep.eval_seed),
                spec.name,
                self.sweep.eval_seed,
                records,
                {"sweep": spec.key},
            )
        self.fixed.append(
            fixed_row(spec.name, records, spec.team, self.sweep.token_weights, run_id)
        )
