"""Background work for the lab: CLI commands run as child processes, never in Streamlit.

Training and evaluation are the ``agentqmix`` CLI itself (``python -m core.cli ...``)
writing into the same database the lab reads; the store lets that writer and the lab's
reader work side by side. A :class:`JobManager` starts and stops those processes and
keeps their logs; a :class:`CommandQueue` thread runs a queue of them one after the other.
Nothing here touches ``st.*`` — pages poll the objects' plain attributes.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.backends.local_server import install_status
from core.baselines.names import METHOD_NAMES
from core.errors import UserError
from core.host import proc_start_time, process_alive
from core.tasks.registry import BENCHMARKS
from core.team.failures import FAILURE_MODES
from core.team.options import TeamOptions, options_from_dict
from core.team.runtime import DEFAULT_ROLES
from core.team.settings import SETTINGS, check


def cli_command(*args: str) -> list[str]:
    """``python -m core.cli ARGS``: the CLI in the lab's own interpreter."""
    return [sys.executable, "-m", "core.cli", *args]


def lab_folder(db: str | os.PathLike[str]) -> Path:
    """The lab's folder next to the database, ``<db name>.lab/`` (not created)."""
    path = Path(db)
    return path.with_name(path.name + ".lab")


def workdir(db: str | os.PathLike[str]) -> Path:
    """The lab's folder next to the database, ``<db name>.lab/``, created: checkpoints the
    lab trains, the job registry and logs (``jobs/``), the demo's status and log."""
    out = lab_folder(db)
    (out / "checkpoints").mkdir(parents=True, exist_ok=True)
    (out / "jobs").mkdir(parents=True, exist_ok=True)
    return out


ROLE_POOL = (*DEFAULT_ROLES, "critic", "planner", "checker", "writer")
"""Roles handed out, in order, to a team of N agents (the first four are the defaults)."""


def team_roles(n_agents: int) -> tuple[str, ...]:
    """The roles of an ``n_agents`` team: the default four first, then more from the pool."""
    if not 1 <= n_agents <= len(ROLE_POOL):
        raise ValueError(f"n_agents must be in 1..{len(ROLE_POOL)}, got {n_agents}")
    return ROLE_POOL[:n_agents]


LAB_BACKENDS = ("sim", "local")
"""What the lab's forms offer: the back-ends that need no key or URL."""
LAB_BENCHMARKS = BENCHMARKS
"""What the Train page offers: every benchmark of core.tasks.registry."""


def offered_backends() -> tuple[list[str], str]:
    """The back-ends a form offers now — ``local`` only once the local model is installed —
    and the sentence on the local model's state (ready, installing, missing) shown beside."""
    state, note = install_status()
    return [b for b in LAB_BACKENDS if b != "local" or state == "ready"], note


_TEAM = TeamOptions()
"""Every default of the lab's team specs is the team options' own."""


@dataclass
class TeamSpec:
    """The team flags every team command shares (``--benchmark --agents --rounds ...``):
    the part of :class:`TeamOptions` the lab lets a user choose."""

    benchmark: str = _TEAM.benchmark
    """Benchmark (a name of core.tasks.registry.BENCHMARKS, or jsonl:PATH)."""
    roles: tuple[str, ...] = _TEAM.roles
    """One role per agent."""
    rounds: int = _TEAM.rounds
    """Communication rounds per episode."""
    token_weight: float = _TEAM.token_weight
    """w_tok: how much a token costs in the reward."""
    preset: str = _TEAM.preset
    """Synthetic-society preset."""
    backend: str = _TEAM.backend
    """What plays the agents: ``sim`` (the synthetic society) or ``local`` (the local model)."""

    def validate(self) -> None:
        """The team settings' own rules (:func:`core.team.settings.check`: the sentence the
        CLI would print), and a back-end the lab's forms offer."""
        check("agents", len(self.roles))
        check("rounds", self.rounds)
        check("token_weight", self.token_weight)
        if self.backend not in LAB_BACKENDS:
            raise ValueError(f"backend must be one of {LAB_BACKENDS}, got {self.backend!r}")

    def args(self) -> list[str]:
        self.validate()
        return [
            "--benchmark", self.benchmark,
            "--agents", ",".join(self.roles),
            "--rounds", str(self.rounds),
            "--token-weight", str(self.token_weight),
            "--preset", self.preset,
            "--backend", self.backend,
        ]  # fmt: skip

    @classmethod
    def from_run_config(cls, config: dict[str, Any]) -> TeamSpec:
        """The team a logged run used (its ``config["team"]``, as the CLI stores it)."""
        team = options_from_dict(config.get("team", {}))
        # A run on the local model is re-run on it; one on a remote endpoint (which needs a
        # key and a model name the lab does not ask for) on the synthetic society, as before.
        backend = "local" if team.backend == "local" else "sim"
        return cls(team.benchmark, team.roles, team.rounds, team.token_weight, team.preset, backend)


TRAIN_METHODS = ("qmix", *METHOD_NAMES)
"""What the Train page can train: Agent Q-Mix first, then the learned-topology methods."""
TRAIN_METHOD_LABELS = {
    "qmix": "Agent Q-Mix",
    "gptswarm": "GPTSwarm",
    "agentprune": "AgentPrune",
    "agentdropout": "AgentDropout",
    "gdesigner": "G-Designer",
}
"""Each trainable method as its paper names it."""


def setting_range(name: str) -> tuple[int, int]:
    """A whole-number team setting's range (:data:`core.team.settings.SETTINGS`), for a
    control that must offer what the CLI accepts and nothing it refuses."""
    setting = SETTINGS[name]
    return int(setting.low), int(setting.high)


@dataclass
class TrainParams:
    """What the Train page asks for; maps one-to-one onto ``agentqmix train`` flags."""

    team: TeamSpec = field(default_factory=TeamSpec)
    """The team and its reward."""
    episodes: int = 200
    """Training episodes."""
    fail_prob: float = 0.0
    """Chance that each agent fails in an episode (the robustness curriculum)."""
    seed: int = 0
    """Seed of networks, exploration and episodes."""
    eval_episodes: int = 20
    """Held-out episodes evaluated at the end (not logged; printed in the summary)."""
    hidden: int = 128
    """Width of the GNN, GRU and Q-head layers (Agent Q-Mix only)."""
    method: str = "qmix"
    """What learns the topology: ``qmix`` (Agent Q-Mix) or a learned-topology method of
    :data:`TRAIN_METHODS` at its defaults (docs/baselines.md)."""

    def validate(self) -> None:
        self.team.validate()
        if self.method not in TRAIN_METHODS:
            raise ValueError(f"method must be one of {TRAIN_METHODS}, got {self.method!r}")
        if self.episodes < 1:
            raise ValueError(f"episodes must be >= 1, got {self.episodes}")
        if not 0.0 <= self.fail_prob < 1.0:
            raise ValueError(f"fail_prob must be in [0, 1), got {self.fail_prob}")
        if self.eval_episodes < 0:
            raise ValueError(f"eval_episodes must be >= 0, got {self.eval_episodes}")
        if self.hidden < 1:
            raise ValueError(f"hidden must be >= 1, got {self.hidden}")


def train_command(db: str | os.PathLike[str], params: TrainParams, checkpoint: Path) -> list[str]:
    """``agentqmix train`` for ``params``, logging into ``db`` and saving ``checkpoint``."""
    params.validate()
    return cli_command(
        "train",
        *params.team.args(),
        "--episodes", str(params.episodes),
        "--fail-prob", str(params.fail_prob),
        "--seed", str(params.seed),
        "--eval-episodes", str(params.eval_episodes),
        "--method", params.method,
        # The methods keep their parameters in --set (their defaults here), not --hidden.
        *(["--hidden", str(params.hidden)] if params.method == "qmix" else []),
        "--out", str(checkpoint),
        "--db", str(db),
        "--json",
    )  # fmt: skip


def resume_command(db: str | os.PathLike[str], run_id: str) -> list[str]:
    """``agentqmix train --resume RUN_ID``: continue a stopped training run from its last
    checkpoint, logging into the same run."""
    return cli_command("train", "--resume", run_id, "--db", str(db), "--json")


@dataclass
class FailureChoice:
    """One agent to fail in the Failure lab."""

    agent: int
    """Agent index."""
    mode: str
    """crash, timeout, byzantine or garbled."""
    from_round: int = 0
    """First round in which it is failed."""

    def validate(self) -> None:
        if self.mode not in FAILURE_MODES:
            raise ValueError(f"mode must be one of {FAILURE_MODES}, got {self.mode!r}")
        if self.agent < 0 or self.from_round < 0:
            raise ValueError(
                f"agent and from_round must be >= 0, got {self.agent}, {self.from_round}"
            )


def fail_spec(failures: Sequence[FailureChoice]) -> str:
    """The CLI's ``--fail`` text: ``AGENT:MODE@ROUND,...`` (empty for no failures)."""
    for f in failures:
        f.validate()
    return ",".join(f"{f.agent}:{f.mode}@{f.from_round}" for f in failures)


def _policy_args(policy: str | None, checkpoint: str | None) -> list[str]:
    if (policy is None) == (checkpoint is None):
        raise ValueError("give exactly one of policy and checkpoint")
    return ["--checkpoint", checkpoint] if checkpoint else ["--policy", str(policy)]


def eval_command(
    db: str | os.PathLike[str],
    team: TeamSpec,
    *,
    policy: str | None = None,
    checkpoint: str | None = None,
    failures: Sequence[FailureChoice] = (),
    episodes: int = 1,
    seed: int = 0,
    first: int = 0,
) -> list[str]:
    """``agentqmix eval`` of a learned checkpoint or a fixed topology on held-out episodes
    ``first..first+episodes-1`` of the seed's stream, logged into ``db`` as one run."""
    args = ["eval", *team.args(), "--episodes", str(episodes), "--seed", str(seed)]
    if first:
        args += ["--first", str(first)]
    args += _policy_args(policy, checkpoint)
    spec = fail_spec(failures)
    if spec:
        args += ["--fail", spec]
    return cli_command(*args, "--db", str(db), "--json")


def robustness_command(
    db: str | os.PathLike[str],
    team: TeamSpec,
    *,
    checkpoint: str | None,
    episodes: int = 20,
    max_failed: int = 2,
    mode: str = "crash",
    seed: int = 0,
) -> list[str]:
    """``agentqmix robustness``: the learned policy (if any) and every fixed topology with
    0..``max_failed`` failed agents, on the same held-out episodes, in one process."""
    args = ["robustness", *team.args(), "--episodes", str(episodes), "--seed", str(seed)]
    args += ["--max-failed", str(max_failed), "--mode", mode]
    if checkpoint:
        args += ["--checkpoint", checkpoint]
    return cli_command(*args, "--db", str(db), "--json")


def local_server_env(argv: Sequence[str]) -> dict[str, str]:
    """For a ``--backend local`` command: the environment that hands it this process's
    server. Empty for other commands, and when the server cannot start here (the command
    then reports why, in its own log)."""
    args = list(argv)
    if "--backend" not in args or args[args.index("--backend") + 1 :][:1] != ["local"]:
        return {}
    from core.backends.local_server import serve
    from core.backends.registry import local_model_server
    from core.errors import UserError
    from core.team.options import TeamOptions

    def flag(name: str) -> str | None:
        return args[args.index(name) + 1] if name in args[:-1] else None

    try:
        opts = TeamOptions(backend="local", model_file=flag("--model-file"))
        if (engine := flag("--local-engine")) is not None:
            opts.local_engine = engine
        if (agents := flag("--agents")) is not None:
            opts.roles = tuple(r.strip() for r in agents.split(",") if r.strip())
        opts.validate()
        return serve(local_model_server(opts)).attach_env()
    except UserError:
        return {}


JOB_STATUSES = ("running", "finished", "failed", "stopped", "ended")
"""What :attr:`Job.status` can say; ``ended`` = the process is gone and nobody saw its exit
code (the lab server that started it stopped first)."""


@dataclass
class Job:
    """One child process a lab server started: a CLI command, its logs and its registry entry.

    The entry (``<id>.job.json`` in the registry folder next to the database) lets every
    browser session, and every lab server on the same database, list and stop the job; only
    the server that started it holds ``proc`` and records the exit code.
    """

    id: str
    label: str
    argv: list[str]
    log_path: Path
    """stderr (progress, errors)."""
    out_path: Path
    """stdout (the ``--json`` result)."""
    pid: int
    started_at: float
    registry: Path
    """The registry folder this job's entry lives in."""
    kind: str = "job"
    """What the job is (``train``, ``eval``...), for pages that list only some jobs."""
    proc_start: str | None = None
    """The process's start time as the kernel counts it (guards against a reused pid)."""
    proc: subprocess.Popen | None = field(default=None, repr=False)
    """The child process, in the server that started it only."""

    @property
    def entry_path(self) -> Path:
        return self.registry / f"{self.id}.job.json"

    @property
    def stop_marker(self) -> Path:
        return self.registry / f"{self.id}.stop"

    @property
    def returncode(self) -> int | None:
        if self.proc is not None:
            return self.proc.poll()
        return read_json(self.entry_path).get("returncode")

    @property
    def alive(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        return self.returncode is None and process_alive(self.pid, self.proc_start)

    @property
    def stopped(self) -> bool:
        """Whether someone asked the job to stop (from any session)."""
        return self.stop_marker.exists()

    @property
    def status(self) -> str:
        """One of :data:`JOB_STATUSES`."""
        if self.alive:
            return "running"
        if self.stopped:
            return "stopped"
        code = self.returncode
        if code is None:
            return "ended"
        return "finished" if code == 0 else "failed"

    def log_tail(self, lines: int = 20) -> str:
        """The last ``lines`` lines of the job's stderr."""
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def result(self) -> Any:
        """The JSON object the finished command printed on stdout; None if there is none."""
        if self.alive:
            return None
        try:
            return json.loads(self.out_path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def stop(self, grace_s: float = 10.0) -> None:
        """Ask the command to stop like Ctrl-C does (the run is marked interrupted), then kill.

        Works from any process: the stop marker tells everyone the user stopped it.
        """
        if not self.alive:
            return
        self.stop_marker.touch()
        if self.proc is not None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGINT)
        deadline = time.monotonic() + grace_s
        while self.alive and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int | None:
        """The exit code once the job ends (None when another process started it)."""
        if self.proc is not None:
            return self.proc.wait(timeout=timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.alive:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.argv, timeout or 0.0)
            time.sleep(0.05)
        return self.returncode

    def entry(self) -> dict[str, Any]:
        return {
            "id": self.id, "label": self.label, "argv": self.argv, "kind": self.kind,
            "log_path": str(self.log_path), "out_path": str(self.out_path), "pid": self.pid,
            "proc_start": self.proc_start, "started_at": self.started_at,
            "owner_pid": os.getpid(),
        }  # fmt: skip

    @classmethod
    def from_entry(cls, registry: Path, d: dict[str, Any]) -> Job:
        return cls(
            id=d["id"], label=d["label"], argv=list(d["argv"]), log_path=Path(d["log_path"]),
            out_path=Path(d["out_path"]), pid=int(d["pid"]), started_at=float(d["started_at"]),
            registry=registry, kind=d.get("kind", "job"), proc_start=d.get("proc_start"),
        )  # fmt: skip


def read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def write_json(path: Path, obj: dict[str, Any]) -> None:
    # Readers in other processes must never see half a file: write aside, then rename.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(obj))
    os.replace(tmp, path)


class JobManager:
    """Starts CLI commands as child processes and keeps a registry of them on disk.

    ``folder`` holds, per job, its registry entry (``<id>.job.json``), its stderr
    (``<id>.log``) and its stdout (``<id>.out.json``). Every lab server on the same database
    uses the same folder, so any browser session sees and can stop any job.
    """

    def __init__(self, folder: Path, cwd: Path | None = None, read_only: str | None = None):
        self.folder = Path(folder)
        self.read_only = read_only
        """Why this lab may not write the database (:func:`core.store.engine.write_problem`):
        the registry is then only read (what its owner's jobs did), and no job starts."""
        if read_only is None:
            self.folder.mkdir(parents=True, exist_ok=True)
        self.cwd = cwd
        self._ids = itertools.count(1)
        self._owned: dict[str, Job] = {}
        self._lock = threading.Lock()

    def start(
        self,
        label: str,
        argv: list[str],
        env: dict[str, str] | None = None,
        kind: str = "job",
    ) -> Job:
        """Run ``argv`` in the background, registered on disk; output goes to log files.

        A ``--backend local`` command uses the lab session's local model server (started
        here on first use, gone with the lab) instead of starting its own."""
        if self.read_only is not None:
            raise UserError(f"this lab opened the database read-only ({self.read_only}).")
        env = {**local_server_env(argv), **(env or {})}
        with self._lock:
            job_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{next(self._ids)}"
            stem = self.folder / job_id
            log_path, out_path = stem.with_suffix(".log"), stem.with_suffix(".out.json")
            with open(log_path, "wb") as log, open(out_path, "wb") as out:
                proc = subprocess.Popen(
                    argv,
                    stdout=out,
                    stderr=log,
                    stdin=subprocess.DEVNULL,
                    cwd=self.cwd,
                    env={**os.environ, "PYTHONUNBUFFERED": "1", **env},
                )
            job = Job(
                job_id, label, list(argv), log_path, out_path, proc.pid, time.time(),
                self.folder, kind, proc_start_time(proc.pid), proc,
            )  # fmt: skip
            write_json(job.entry_path, job.entry())
            self._owned[job_id] = job
        threading.Thread(target=self._reap, args=(job,), name=f"reap-{job_id}", daemon=True).start()
        return job

    def _reap(self, job: Job) -> None:
        # Only the starter sees the exit code: record it for every other reader.
        code = job.proc.wait()
        write_json(job.entry_path, {**job.entry(), "returncode": code, "ended_at": time.time()})

    def jobs(self, kind: str | None = None) -> list[Job]:
        """Every registered job (from any lab server on this database), newest first."""
        out = []
        for path in self.folder.glob("*.job.json"):
            entry = read_json(path)
            if not entry or (kind is not None and entry.get("kind") != kind):
                continue
            with self._lock:
                owned = self._owned.get(entry["id"])
            out.append(owned or Job.from_entry(self.folder, entry))
        return sorted(out, key=lambda j: (j.started_at, j.id), reverse=True)

    def running(self, kind: str | None = None) -> list[Job]:
        return [j for j in self.jobs(kind) if j.status == "running"]

    def get(self, job_id: str) -> Job | None:
        with self._lock:
            owned = self._owned.get(job_id)
        if owned is not None:
            return owned
        entry = read_json(self.folder / f"{job_id}.job.json")
        return Job.from_entry(self.folder, entry) if entry else None

    def stop_all(self) -> None:
        for job in self.running():
            job.stop()


@dataclass
class Step:
    """One command of a :class:`CommandQueue` queue."""

    label: str
    argv: list[str]


class CommandQueue:
    """Runs a list of CLI commands one after another in a thread; pages read its progress.

    Used for the first-start demo and the Failure lab's robustness sweep.

    ``done`` counts finished steps; ``current`` is the label of the running one; ``error``
    holds the failing step's log tail (the queue stops there).
    """

    def __init__(self, manager: JobManager, steps: Sequence[Step]):
        self.manager = manager
        self.steps = list(steps)
        self.done = 0
        self.current: str | None = None
        self.error: str | None = None
        self.finished = False
        self._thread = threading.Thread(target=self._run, name="agentqmix-queue", daemon=True)

    def start(self) -> CommandQueue:
        self._thread.start()
        return self

    @property
    def fraction(self) -> float:
        return self.done / len(self.steps) if self.steps else 1.0

    def _run(self) -> None:
        try:
            for step in self.steps:
                self.current = step.label
                job = self.manager.start(step.label, step.argv)
                if job.wait() != 0:
                    self.error = f"{step.label} failed:\n{job.log_tail(15)}"
                    return
                self.done += 1
        finally:
            self.current = None
            self.finished = True

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)


def side_by_side_commands(
    db: str | os.PathLike[str],
    team: TeamSpec,
    index: int,
    seed: int,
    failures: Sequence[FailureChoice],
    *,
    policy: str | None = None,
    checkpoint: str | None = None,
) -> tuple[list[str], list[str]]:
    """Two evaluations reaching held-out episode ``index`` of ``seed``'s stream: with
    ``failures`` and without.

    Same task, same randomness, same team, so the only difference between the two runs'
    episode ``index`` is the injected failure (a fork of a logged episode when the failure
    starts at a later round). Each run logs just that episode, as its episode 0.
    """
    common = dict(policy=policy, checkpoint=checkpoint, episodes=1, first=index, seed=seed)
    failed = eval_command(db, team, failures=failures, **common)
    healthy = eval_command(db, team, **common)
    return failed, healthy
