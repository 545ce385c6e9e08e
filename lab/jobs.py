"""Background work for the lab: CLI commands run as child processes, never in Streamlit.

Training and evaluation are the ``agentqmix`` CLI itself (``python -m core.cli ...``)
writing into the same database the lab reads; the store lets that writer and the lab's
reader work side by side. A :class:`JobManager` starts and stops those processes and
keeps their logs; a :class:`CommandQueue` thread runs a queue of them one after the other.
Nothing here touches ``st.*`` — pages poll the objects' plain attributes.
"""

from __future__ import annotations

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

from core.records import EpisodeRecord
from core.team.failures import FAILURE_MODES

JOB_STATES = ("running", "finished", "failed", "stopped")


def cli_command(*args: str) -> list[str]:
    """``python -m core.cli ARGS``: the CLI in the lab's own interpreter."""
    return [sys.executable, "-m", "core.cli", *args]


@dataclass
class TrainParams:
    """What the Train page asks for; maps one-to-one onto ``agentqmix train`` flags."""

    benchmark: str = "mixed"
    """Benchmark to train on."""
    agents: int = 4
    """Agents in the team."""
    rounds: int = 3
    """Communication rounds per episode."""
    episodes: int = 200
    """Training episodes."""
    token_weight: float = 0.1
    """w_tok: how much a token costs in the reward."""
    fail_prob: float = 0.0
    """Chance that each agent fails in an episode (the robustness curriculum)."""
    seed: int = 0
    """Seed of networks, exploration and episodes."""

    def validate(self) -> None:
        if not 1 <= self.agents <= 12:
            raise ValueError(f"agents must be in 1..12, got {self.agents}")
        if not 1 <= self.rounds <= 10:
            raise ValueError(f"rounds must be in 1..10, got {self.rounds}")
        if self.episodes < 1:
            raise ValueError(f"episodes must be >= 1, got {self.episodes}")
        if self.token_weight < 0:
            raise ValueError(f"token_weight must be >= 0, got {self.token_weight}")
        if not 0.0 <= self.fail_prob < 1.0:
            raise ValueError(f"fail_prob must be in [0, 1), got {self.fail_prob}")


def train_command(db: str | os.PathLike[str], params: TrainParams, checkpoint: Path) -> list[str]:
    """``agentqmix train`` for ``params``, logging into ``db`` and saving ``checkpoint``."""
    params.validate()
    return cli_command(
        "train",
        "--benchmark", params.benchmark,
        "--agents", str(params.agents),
        "--rounds", str(params.rounds),
        "--episodes", str(params.episodes),
        "--token-weight", str(params.token_weight),
        "--fail-prob", str(params.fail_prob),
        "--seed", str(params.seed),
        "--db", str(db),
        "--out", str(checkpoint),
    )  # fmt: skip


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


def eval_command(
    db: str | os.PathLike[str],
    benchmark: str,
    *,
    policy: str | None = None,
    checkpoint: str | None = None,
    failures: Sequence[FailureChoice] = (),
    episodes: int = 1,
    seed: int = 0,
    agents: int | None = None,
    rounds: int | None = None,
    task: str | None = None,
    episode_seed: int | None = None,
) -> list[str]:
    """``agentqmix eval`` of a learned checkpoint or a fixed topology, logging into ``db``.

    ``task`` + ``episode_seed`` replay one logged episode's task and randomness exactly
    (the Failure lab's side-by-side runs and forks).
    """
    if (policy is None) == (checkpoint is None):
        raise ValueError("give exactly one of policy and checkpoint")
    args = ["eval", "--benchmark", benchmark, "--episodes", str(episodes), "--seed", str(seed)]
    args += ["--checkpoint", checkpoint] if checkpoint else ["--policy", str(policy)]
    if agents is not None:
        args += ["--agents", str(agents)]
    if rounds is not None:
        args += ["--rounds", str(rounds)]
    spec = fail_spec(failures)
    if spec:
        args += ["--fail", spec]
    if task is not None:
        args += ["--task", task]
    if episode_seed is not None:
        args += ["--episode-seed", str(episode_seed)]
    return cli_command(*args, "--db", str(db), "--json")


def compare_command(
    db: str | os.PathLike[str],
    benchmark: str,
    *,
    checkpoint: str | None,
    policies: Sequence[str],
    failures: Sequence[FailureChoice] = (),
    episodes: int = 20,
    seed: int = 0,
    agents: int | None = None,
    rounds: int | None = None,
) -> list[str]:
    """``agentqmix compare``: the learned policy and fixed topologies on the same episodes, in one process."""
    args = ["compare", "--benchmark", benchmark, "--episodes", str(episodes), "--seed", str(seed)]
    if checkpoint:
        args += ["--checkpoint", checkpoint]
    if policies:
        args += ["--policies", ",".join(policies)]
    if agents is not None:
        args += ["--agents", str(agents)]
    if rounds is not None:
        args += ["--rounds", str(rounds)]
    spec = fail_spec(failures)
    if spec:
        args += ["--fail", spec]
    return cli_command(*args, "--db", str(db), "--json")


@dataclass
class Job:
    """One child process the lab started: a CLI command and its log file."""

    id: int
    label: str
    argv: list[str]
    log_path: Path
    """stderr (progress, errors)."""
    out_path: Path
    """stdout (the ``--json`` result)."""
    proc: subprocess.Popen
    started_at: float = field(default_factory=time.time)
    stopped: bool = False

    @property
    def returncode(self) -> int | None:
        return self.proc.poll()

    @property
    def status(self) -> str:
        """``running``, ``finished`` (exit 0), ``stopped`` (by the user) or ``failed``."""
        code = self.proc.poll()
        if code is None:
            return "running"
        if self.stopped:
            return "stopped"
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
        if self.proc.poll() is None:
            return None
        try:
            return json.loads(self.out_path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def stop(self, grace_s: float = 10.0) -> None:
        """Ask the command to stop like Ctrl-C does (the run is marked interrupted), then kill."""
        if self.proc.poll() is not None:
            return
        self.stopped = True
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def wait(self, timeout: float | None = None) -> int:
        return self.proc.wait(timeout=timeout)


class JobManager:
    """Starts CLI commands as child processes and remembers them (one per lab server)."""

    def __init__(self, log_dir: Path, cwd: Path | None = None):
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.cwd = cwd
        self._ids = itertools.count(1)
        self._jobs: dict[int, Job] = {}
        self._lock = threading.Lock()

    def start(self, label: str, argv: list[str], env: dict[str, str] | None = None) -> Job:
        """Run ``argv`` in the background; its output goes to a log file under ``log_dir``."""
        with self._lock:
            job_id = next(self._ids)
            stem = self.log_dir / f"job-{os.getpid()}-{job_id}"
            log_path, out_path = stem.with_suffix(".log"), stem.with_suffix(".json")
            with open(log_path, "wb") as log, open(out_path, "wb") as out:
                proc = subprocess.Popen(
                    argv,
                    stdout=out,
                    stderr=log,
                    stdin=subprocess.DEVNULL,
                    cwd=self.cwd,
                    env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
                )
            job = Job(job_id, label, list(argv), log_path, out_path, proc)
            self._jobs[job_id] = job
            return job

    def jobs(self) -> list[Job]:
        """Every job this lab started, newest first."""
        with self._lock:
            return sorted(self._jobs.values(), key=lambda j: j.id, reverse=True)

    def running(self) -> list[Job]:
        return [j for j in self.jobs() if j.status == "running"]

    def get(self, job_id: int) -> Job | None:
        with self._lock:
            return self._jobs.get(job_id)

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
    record: EpisodeRecord,
    failures: Sequence[FailureChoice],
    *,
    policy: str | None = None,
    checkpoint: str | None = None,
) -> tuple[list[str], list[str]]:
    """Two evaluations of ``record``'s task with its episode seed: with ``failures`` and without.

    Same task, same randomness, same team size and rounds, so the only difference between
    the two logged episodes is the injected failure (a fork of the logged episode when the
    failure starts at a later round).
    """
    common = dict(
        policy=policy,
        checkpoint=checkpoint,
        agents=len(record.roles),
        rounds=len(record.rounds),
        task=record.task_id,
        episode_seed=record.seed,
    )
    failed = eval_command(db, record.benchmark, failures=failures, **common)
    healthy = eval_command(db, record.benchmark, **common)
    return failed, healthy
