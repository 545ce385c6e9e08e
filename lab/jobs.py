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

from core.team.failures import FAILURE_MODES
from core.team.options import TeamOptions, options_from_dict
from core.team.runtime import DEFAULT_ROLES


def cli_command(*args: str) -> list[str]:
    """``python -m core.cli ARGS``: the CLI in the lab's own interpreter."""
    return [sys.executable, "-m", "core.cli", *args]


ROLE_POOL = (*DEFAULT_ROLES, "critic", "planner", "checker", "writer")
"""Roles handed out, in order, to a team of N agents (the first four are the defaults)."""


def team_roles(n_agents: int) -> tuple[str, ...]:
    """The roles of an ``n_agents`` team: the default four first, then more from the pool."""
    if not 1 <= n_agents <= len(ROLE_POOL):
        raise ValueError(f"n_agents must be in 1..{len(ROLE_POOL)}, got {n_agents}")
    return ROLE_POOL[:n_agents]


_TEAM = TeamOptions()
"""Every default of the lab's team specs is the team options' own."""


@dataclass
class TeamSpec:
    """The team flags every team command shares (``--benchmark --agents --rounds ...``):
    the part of :class:`TeamOptions` the lab lets a user choose."""

    benchmark: str = _TEAM.benchmark
    """Benchmark (math, code, mcq, mixed)."""
    roles: tuple[str, ...] = _TEAM.roles
    """One role per agent."""
    rounds: int = _TEAM.rounds
    """Communication rounds per episode."""
    token_weight: float = _TEAM.token_weight
    """w_tok: how much a token costs in the reward."""
    preset: str = _TEAM.preset
    """Synthetic-society preset."""

    def validate(self) -> None:
        if not self.roles:
            raise ValueError("roles is empty: a team needs at least one agent")
        if not 1 <= self.rounds <= 10:
            raise ValueError(f"rounds must be in 1..10, got {self.rounds}")
        if self.token_weight < 0:
            raise ValueError(f"token_weight must be >= 0, got {self.token_weight}")

    def args(self) -> list[str]:
        self.validate()
        return [
            "--benchmark", self.benchmark,
            "--agents", ",".join(self.roles),
            "--rounds", str(self.rounds),
            "--token-weight", str(self.token_weight),
            "--preset", self.preset,
        ]  # fmt: skip

    @classmethod
    def from_run_config(cls, config: dict[str, Any]) -> TeamSpec:
        """The team a logged run used (its ``config["team"]``, as the CLI stores it)."""
        team = options_from_dict(config.get("team", {}))
        return cls(team.benchmark, team.roles, team.rounds, team.token_weight, team.preset)


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
    """Width of the GNN, GRU and Q-head layers."""

    def validate(self) -> None:
        self.team.validate()
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
        "--hidden", str(params.hidden),
        "--out", str(checkpoint),
        "--db", str(db),
        "--json",
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
