"""``agentqmix lab``: serve the Streamlit lab, run the first-start demo, stop both cleanly.

``core/cli/lab.py``'s ``lab`` command checks the database and the port, then replaces itself
with ``python -m lab.launch`` (so a signal sent to ``agentqmix lab`` arrives here). This
process

* starts Streamlit **headless** on 127.0.0.1 in its own process group: never Streamlit's
  first-run "Email:" prompt, and no terminal needed on stdin;
* on a database without runs starts the first-start demo at once (``python -m lab.demo``,
  its own process group), not when a browser first opens the page, and prints its
  progress here while the pages draw the same progress;
* prints the URL once the server answers; opens a browser only with ``--open`` and a
  display;
* on SIGINT, SIGTERM or SIGHUP, or when Streamlit exits, stops both process groups:
  SIGINT first (training jobs started from the lab live in Streamlit's group and mark
  their runs interrupted, as on Ctrl-C), SIGKILL after a grace period.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
import webbrowser
from dataclasses import dataclass
from pathlib import Path

from lab.demo import ROOT, DemoStatus, demo_enabled, spawn_demo, status_path

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@dataclass
class LaunchConfig:
    """What ``agentqmix lab`` was asked for."""

    db: Path
    """The database the lab shows (already checked by the CLI)."""
    port: int = 8501
    """Port on 127.0.0.1."""
    open_browser: bool = False
    """Open a browser tab once the server answers (only where there is a display)."""
    grace_s: float = 10.0
    """How long children get to stop after SIGINT before SIGKILL."""

    def validate(self) -> None:
        if not 1 <= self.port <= 65535:
            raise ValueError(f"port must be in 1..65535, got {self.port}")
        if self.grace_s < 0:
            raise ValueError(f"grace_s must be >= 0, got {self.grace_s}")


def streamlit_command(port: int) -> list[str]:
    """``streamlit run app.py`` headless on 127.0.0.1:``port`` (headless: no e-mail prompt,
    no browser of its own)."""
    return [
        sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"),
        "--server.address", "127.0.0.1",
        "--server.port", str(port),
        "--server.headless", "true",
        "--browser.gatherUsageStats", "false",
    ]  # fmt: skip


def has_display() -> bool:
    """Whether a browser could open a window here."""
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=1) as resp:
            return resp.read().strip() == b"ok"
    except OSError:
        return False


def _stop_groups(procs: list[subprocess.Popen], grace_s: float) -> None:
    """SIGINT each child's process group, wait up to ``grace_s``, then SIGKILL what is left."""
    for proc in procs:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGINT)
    deadline = time.monotonic() + grace_s
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=max(deadline - time.monotonic(), 0.0))
    for proc in procs:
        # Also reaches grandchildren (jobs) that outlived their parent in the group.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


class _Stop(Exception):
    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_stop(signum: int, frame: object) -> None:
    raise _Stop(signum)


def _say(text: str) -> None:
    print(text, flush=True)


class _DemoReporter:
    """Prints the demo's progress in the terminal when it changes (one line per change)."""

    def __init__(self, db: Path):
        self.path = status_path(db)
        self.last: tuple[str, int, str] | None = None
        self.done = False

    def poll(self) -> None:
        if self.done:
            return
        status = DemoStatus.read(self.path)
        if status is None:
            return
        key = (status.phase, int(status.fraction * 20), status.state)
        if key != self.last:
            self.last = key
            _say(status.line())
        if status.state == "finished":
            _say("demo ready: every page has data now")
            self.done = True
        elif status.cancelled:
            _say("demo cancelled (from the lab); the Overview page can start it again")
            self.done = True
        elif status.state == "failed" or status.lost:
            first = (status.error or "its process ended early").splitlines()[0]
            _say(f"demo stopped: {first} (log: {status.log_path})")
            self.done = True


def database_is_empty(db: Path) -> bool:
    """No runs yet (creates the store if the file does not exist)."""
    from core.store.queries import list_runs

    return list_runs(db).empty


def serve(config: LaunchConfig) -> int:
    """Run the lab until a stop signal or until Streamlit exits; returns the exit code."""
    from core.store.engine import write_problem

    config.validate()
    url = f"http://127.0.0.1:{config.port}"
    env = {**os.environ, "AGENTQMIX_DB": str(config.db)}
    for sig in STOP_SIGNALS:
        signal.signal(sig, _raise_stop)
    procs: list[subprocess.Popen] = []
    reporter: _DemoReporter | None = None
    code = 0
    try:
        previous = DemoStatus.read(status_path(config.db))
        cancelled = previous is not None and previous.cancelled
        # The demo writes runs: a store this user cannot write is shown as it is.
        writable = write_problem(config.db) is None
        if demo_enabled() and not cancelled and writable and database_is_empty(config.db):
            procs.append(spawn_demo(config.db, new_session=True))
            reporter = _DemoReporter(config.db)
            _say(f"first start: building a demo in {config.db} (progress below and in the lab)")
        server = subprocess.Popen(
            streamlit_command(config.port),
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        procs.insert(0, server)
        announced = False
        while server.poll() is None:
            if not announced and _healthy(url):
                _say(f"Agent Q-Mix Lab: {url}  (database {config.db}; Ctrl-C stops it)")
                announced = True
                if config.open_browser:
                    if has_display():
                        webbrowser.open(url)
                    else:
                        _say("no display here to open a browser in: open the URL above yourself")
            if reporter is not None:
                reporter.poll()
            time.sleep(0.25)
        code = server.returncode
        _say(f"the lab server exited with code {code}")
    except _Stop as stop:
        _say(f"stopping the lab ({stop})")
    finally:
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        _stop_groups(procs, config.grace_s)
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lab.launch", description="Serve the lab (use `agentqmix lab`)."
    )
    parser.add_argument("--db", required=True)
    parser.add_argument("--port", type=int, default=8501)
    parser.add_argument("--open", action="store_true", dest="open_browser")
    args = parser.parse_args(argv)
    return serve(LaunchConfig(Path(args.db), args.port, args.open_browser))


if __name__ == "__main__":
    sys.exit(main())
