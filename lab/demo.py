"""The first-start demo: a learned policy evaluated on held-out tasks, so no page starts empty.

The policy shown is the one shipped in ``data/`` (:data:`SHIPPED_POLICY`): Agent Q-Mix trained
with the default recipe by the project's own ``agentqmix train`` (command and seed in
docs/lab.md; ``agentqmix bench demo-policy`` retrains it and compares held-out figures). On
``sim`` the demo takes well under a minute once PyTorch is loaded: a short training run
(so the Train page has curves to watch; its policy is not the one shown), the shipped
policy evaluated on held-out episodes, and ``robustness``: the shipped policy and every
fixed topology healthy and with one and two crashed agents (which also fills the Compare
page), with enough episodes a point that the intervals are a few points wide. Each step
is an ordinary ``agentqmix`` command line (:func:`demo_steps`); :func:`run_demo` runs them
in one process (``python -m lab.demo``) so PyTorch is imported once, not three times.

Progress goes to a small JSON status file next to the database (:class:`DemoStatus`):
the ``agentqmix lab`` launcher prints it in the terminal and the pages draw it. Within a
step the runner counts the episodes the step has logged so far, so the bar moves while
the team trains, not only between steps.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from core.host import proc_start_time, process_alive
from lab.jobs import (
    Step,
    TeamSpec,
    TrainParams,
    eval_command,
    lab_folder,
    robustness_command,
    train_command,
    workdir,
    write_json,
)

DEMO_ENV = "AGENTQMIX_LAB_DEMO"
"""Set to ``0`` to open an empty database without the first-start demo."""

ROOT = Path(__file__).resolve().parent.parent
"""The repository root (where ``python -m lab.demo`` finds its packages)."""

SHIPPED_POLICY = ROOT / "data" / "demo-policy.pt"
"""Agent Q-Mix trained with the default (``society``) recipe, seed 0, on the default team
(docs/lab.md, "The demo's policy"); its resume state (optimiser, target networks) is left
out, so the file holds only what evaluating it needs."""


@dataclass
class DemoConfig:
    """How big the first-start demo is."""

    team: TeamSpec = field(default_factory=TeamSpec)
    """The demo team (the default four roles on the mixed benchmark): the shipped policy's."""
    policy: Path = SHIPPED_POLICY
    """The learned policy shown (evaluated and failed)."""
    train_episodes: int = 64
    """Episodes of the short training run the Train page shows (its policy is not shown)."""
    hidden: int = 64
    """Network width of that short run (smaller trains faster)."""
    n_envs: int = 8
    """Training episodes played in lockstep: small, so training logs (and the bar moves) often."""
    eval_episodes: int = 400
    """Held-out episodes of the shipped policy's evaluation (a 95 % interval of about ±2.5
    accuracy points at 90 %)."""
    sweep_episodes: int = 300
    """Episodes per policy and failure count in the robustness sweep (±3.5 points at 90 %)."""
    max_failed: int = 2
    """The robustness sweep fails 0..max_failed agents."""
    seed: int = 0
    """Seed of every demo run."""

    def validate(self) -> None:
        self.team.validate()
        counts = (self.train_episodes, self.eval_episodes, self.sweep_episodes, self.n_envs)
        if min(counts) < 1:
            raise ValueError(f"demo episodes and n_envs must be >= 1, got {counts}")
        if not 0 <= self.max_failed < len(self.team.roles):
            raise ValueError(f"max_failed must be in 0..{len(self.team.roles) - 1}")


def demo_steps(
    db: str | os.PathLike[str], folder: Path, config: DemoConfig | None = None
) -> list[Step]:
    """The demo's commands in order: a short training run, the shipped policy evaluated, and
    the robustness sweep of the shipped policy against every fixed topology."""
    config = config or DemoConfig()
    config.validate()
    params = TrainParams(
        team=config.team,
        episodes=config.train_episodes,
        fail_prob=0.1,
        seed=config.seed,
        eval_episodes=0,
        hidden=config.hidden,
    )
    short = folder / "checkpoints" / "demo-short-run.pt"
    policy = str(config.policy)
    return [
        Step(
            "a short training run to watch",
            [*train_command(db, params, short), "--n-envs", str(config.n_envs)],
        ),
        Step(
            "evaluate the shipped Agent Q-Mix policy",
            eval_command(
                db, config.team, checkpoint=policy, episodes=config.eval_episodes, seed=config.seed
            ),
        ),
        Step(
            f"learned vs fixed topologies, with 0–{config.max_failed} failed agents",
            robustness_command(
                db,
                config.team,
                checkpoint=policy,
                episodes=config.sweep_episodes,
                max_failed=config.max_failed,
                seed=config.seed,
            ),
        ),
    ]


def expected_episodes(config: DemoConfig, n_topologies: int) -> list[int]:
    """Episodes each demo step logs: train, eval, robustness (learned + every fixed topology,
    for each number of failed agents)."""
    sweep = (1 + n_topologies) * (config.max_failed + 1) * config.sweep_episodes
    return [config.train_episodes, config.eval_episodes, sweep]


# ------------------------------------------------------------------ progress


LOADING = "loading PyTorch and the learner"
"""The first phase: importing torch and the project (seconds on a cold start)."""

PHASES = ((LOADING, 0.0, 0.15), ("train", 0.15, 0.30), ("eval", 0.30, 0.40), ("sweep", 0.40, 1.0))
"""(phase, start, end) of the progress bar: roughly where the time goes on a laptop."""

IMPORT_MILESTONES = (("torch", 0.35), ("torch_geometric", 0.7), ("core.experiment", 0.95))
"""Modules imported during loading, with how far through the loading phase each one is."""


@dataclass
class DemoStatus:
    """What the demo is doing, shared through ``<db>.lab/demo.json`` (written by the runner)."""

    state: str = "starting"
    """``starting``, ``running``, ``finished``, ``failed`` or ``cancelled`` (by the user:
    the lab then never starts it again on its own)."""
    phase: str = LOADING
    """What it is doing now (a step label while a step runs)."""
    fraction: float = 0.0
    """How far the whole demo is, 0..1."""
    step: int = 0
    """Steps finished (0..n_steps)."""
    n_steps: int = 3
    detail: str = ""
    """E.g. ``32 of 64 episodes`` while a step logs episodes."""
    error: str | None = None
    """The failing step's log tail, when ``state == "failed"``."""
    pid: int = 0
    proc_start: str | None = None
    started_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    log_path: str = ""

    @property
    def live(self) -> bool:
        """Running (or about to), by a process that still exists."""
        return self.state in ("starting", "running") and process_alive(self.pid, self.proc_start)

    @property
    def lost(self) -> bool:
        """Said it was running, but its process is gone (killed, or the machine rebooted)."""
        return self.state in ("starting", "running") and not self.live

    @property
    def cancelled(self) -> bool:
        return self.state == "cancelled"

    def line(self) -> str:
        """One terminal line: ``demo  42% · train a QMIX team · 32 of 64 episodes``."""
        parts = [f"demo {self.fraction:4.0%}", self.phase] + ([self.detail] if self.detail else [])
        return " · ".join(parts)

    def write(self, path: Path) -> None:
        self.updated_at = time.time()
        write_json(path, asdict(self))

    @classmethod
    def read(cls, path: Path) -> DemoStatus | None:
        try:
            d = json.loads(Path(path).read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


def status_path(db: str | os.PathLike[str]) -> Path:
    """Where the demo of ``db`` reports its progress (its folder is made by the demo: a
    reader, such as a lab on a read-only store, creates nothing)."""
    return lab_folder(db) / "demo.json"


def read_status(db: str | os.PathLike[str]) -> DemoStatus | None:
    return DemoStatus.read(status_path(db))


class _Progress:
    """Moves one :class:`DemoStatus` through the phases and writes it on every change."""

    def __init__(self, status: DemoStatus, path: Path):
        self.status, self.path = status, path
        self._lock = threading.Lock()

    def update(self, phase: str, within: float, label: str, detail: str = "") -> None:
        start, end = next((s, e) for p, s, e in PHASES if p == phase)
        with self._lock:
            self.status.state = "running"
            self.status.phase = label
            self.status.detail = detail
            # Never move backwards (a re-read count can lag a moment behind).
            self.status.fraction = max(
                self.status.fraction, start + (end - start) * min(max(within, 0.0), 1.0)
            )
            self.status.write(self.path)

    def finish(self, state: str, error: str | None = None) -> None:
        with self._lock:
            self.status.state, self.status.error = state, error
            if state == "finished":
                self.status.fraction, self.status.phase, self.status.detail = 1.0, "ready", ""
            self.status.write(self.path)


def _count_while(
    running: threading.Event, count: Callable[[], int], report: Callable[[int], None]
) -> threading.Thread:
    def poll() -> None:
        while not running.wait(0.4):
            try:
                report(count())
            except Exception:  # noqa: BLE001 — a busy store only delays the next reading
                continue

    thread = threading.Thread(target=poll, name="demo-progress", daemon=True)
    thread.start()
    return thread


class _Cancelled(BaseException):
    """SIGTERM from :func:`cancel_demo`: stop at once, say so."""


def _cancel_on_sigterm(signum: int, frame: object) -> None:
    raise _Cancelled


def run_demo(db: str | os.PathLike[str], config: DemoConfig | None = None) -> int:
    """Run the demo's three commands in this process, reporting progress; 0 on success.
    SIGTERM (:func:`cancel_demo`) stops it wherever it is and marks it ``cancelled``."""
    path = status_path(db)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _cancel_on_sigterm)
    try:
        return _run_steps(db, config or DemoConfig(), path)
    except _Cancelled:
        status = DemoStatus.read(path) or DemoStatus()
        _Progress(status, path).finish("cancelled")
        print("demo cancelled", file=sys.stderr, flush=True)
        return 1


def _run_steps(db: str | os.PathLike[str], config: DemoConfig, path: Path) -> int:
    folder = workdir(db)
    status = DemoStatus.read(path) or DemoStatus()
    status.pid, status.proc_start = os.getpid(), proc_start_time(os.getpid())
    status.fraction, status.step, status.error = 0.0, 0, None
    progress = _Progress(status, path)
    progress.update(LOADING, 0.0, LOADING)
    import importlib

    for module, within in IMPORT_MILESTONES:
        importlib.import_module(module)
        progress.update(LOADING, within, LOADING, f"imported {module}")
    from core.cli import main as cli_main
    from core.store.queries import count_episodes
    from core.team.topologies import FIXED_TOPOLOGIES

    steps = demo_steps(db, folder, config)
    status.n_steps = len(steps)
    expected = expected_episodes(config, len(FIXED_TOPOLOGIES))
    for k, (step, phase, total) in enumerate(
        zip(steps, ("train", "eval", "sweep"), expected, strict=True)
    ):
        base = count_episodes(db)
        label = f"{step.label} (step {k + 1} of {len(steps)})"
        progress.update(phase, 0.0, label, f"0 of {total} episodes")

        def report(n: int, phase=phase, label=label, base=base, total=total) -> None:
            done = min(n - base, total)
            progress.update(phase, done / total, label, f"{done} of {total} episodes")

        stop = threading.Event()
        poller = _count_while(stop, lambda: count_episodes(db), report)
        print(f"$ agentqmix {' '.join(step.argv[3:])}", file=sys.stderr, flush=True)
        try:
            code = cli_main(step.argv[3:])
        finally:
            stop.set()
            poller.join()
        if code != 0:
            progress.finish("failed", f"{step.label} failed (exit {code}):\n{_tail(status)}")
            return 1
        status.step = k + 1
        progress.update(phase, 1.0, label, f"{total} of {total} episodes")
    progress.finish("finished")
    return 0


def _tail(status: DemoStatus, lines: int = 15) -> str:
    try:
        text = Path(status.log_path).read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def spawn_demo(db: str | os.PathLike[str], *, new_session: bool) -> subprocess.Popen:
    """Start ``python -m lab.demo`` for ``db`` in the background and write its first status.

    The status names the new process before this returns, so a page (or another launcher)
    that looks next sees a live demo and does not start a second one. ``new_session`` puts
    it in its own process group (the launcher stops that group as a whole).
    """
    folder = workdir(db)
    log_path = folder / "demo.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "lab.demo", "--db", str(db)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            start_new_session=new_session,
        )
    DemoStatus(pid=proc.pid, proc_start=proc_start_time(proc.pid), log_path=str(log_path)).write(
        status_path(db)
    )
    return proc


def cancel_demo(db: str | os.PathLike[str], wait_s: float = 15.0) -> bool:
    """Stop the running demo of ``db`` (SIGTERM: it marks itself ``cancelled``); False when
    none runs. Waits up to ``wait_s`` for it to say so, then marks it cancelled itself."""
    status = read_status(db)
    if status is None or not status.live:
        return False
    os.kill(status.pid, signal.SIGTERM)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and process_alive(status.pid, status.proc_start):
        time.sleep(0.1)
    now = read_status(db) or status
    if not now.cancelled:
        now.state, now.phase, now.detail = "cancelled", "cancelled", ""
        now.write(status_path(db))
    return True


def demo_enabled() -> bool:
    return os.environ.get(DEMO_ENV, "1") != "0"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.demo", description=__doc__.split("\n")[0])
    parser.add_argument("--db", required=True, help="The lab's database (empty on a first start).")
    args = parser.parse_args(argv)
    return run_demo(args.db)


if __name__ == "__main__":
    sys.exit(main())
