"""A process with the store open can fork (training forks its episode collector)."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

from core.store.engine import attached


def _use_a_store_of_its_own(path: str) -> None:
    with attached(Path(path), write=True, timeout=0) as cur:
        cur.execute("CREATE TABLE child (x INTEGER)")


def test_a_forked_child_neither_crashes_nor_shares_the_parents_engine(tmp_path: Path):
    with attached(tmp_path / "parent.duckdb", write=True, timeout=0) as cur:
        cur.execute("CREATE TABLE parent (x INTEGER)")
    child = multiprocessing.get_context("fork").Process(
        target=_use_a_store_of_its_own, args=(str(tmp_path / "child.duckdb"),)
    )
    child.start()
    child.join(60)
    assert child.exitcode == 0
    with attached(tmp_path / "child.duckdb", write=False, timeout=0) as cur:
        assert cur.execute("SELECT count(*) FROM child").fetchone() == (0,)
    with attached(tmp_path / "parent.duckdb", write=False, timeout=0) as cur:
        assert cur.execute("SELECT count(*) FROM parent").fetchone() == (0,)


PRODUCER_WITH_A_CHILD = """
import multiprocessing, os, sys, time
from pathlib import Path
from core.store.spool import SpoolWriter

def live_on(up):
    up.send("up")  # the fork's handlers have run in the child by now
    time.sleep(120)

writer = SpoolWriter(Path(sys.argv[1]), "run-1")
context = multiprocessing.get_context("fork")
up, child_up = context.Pipe()
child = context.Process(target=live_on, args=(child_up,))
child.start()
assert up.recv() == "up"
print(child.pid, flush=True)
os.kill(os.getpid(), 9)  # dies as a SIGKILLed run does; its forked child lives on
"""


def test_a_dead_producers_forked_child_does_not_keep_its_run_alive(tmp_path: Path):
    """The run's spool lock is free once its producer is dead, even while a child it forked
    (training's collector) still runs: ``runs`` right after a SIGKILL says interrupted."""
    import os
    import signal
    import subprocess
    import sys

    from core.store.spool import lock_held

    root = Path(__file__).resolve().parents[3]
    proc = subprocess.Popen(
        [sys.executable, "-c", PRODUCER_WITH_A_CHILD, str(tmp_path)], cwd=root,
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    child = int(proc.stdout.readline())
    try:
        assert proc.wait(60) == -signal.SIGKILL
        os.kill(child, 0)  # the child is alive (raises if it is not)
        assert not lock_held(tmp_path / "run-1.lock")
    finally:
        os.kill(child, signal.SIGKILL)
