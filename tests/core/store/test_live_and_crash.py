"""Real processes: a live writer with a concurrent reader, and a writer killed with SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from core.store import RunLogger, get_run, last_episode, load_episode, runs_to_resume
from core.store.queries import count_episodes, list_episodes, training_curves
from core.store.synthetic import synthetic_episode

from .conftest import REPO, spawn_writer

READER = """
import json, os, sys, time
from core.store.queries import count_episodes, load_episode, list_runs
from core.store.synthetic import synthetic_episode
db, deadline = sys.argv[1], time.time() + float(sys.argv[2])
open(sys.argv[3], "w").close()  # tell the writer the reader is up
paced_by = sys.argv[3] + ".checks"
counts, errors, checked = [], [], 0
while time.time() < deadline:
    try:
        runs = list_runs(db)
        n = count_episodes(db)
        counts.append(n)
        if n and len(runs):
            i = n - 1
            got = load_episode(db, runs.id[0], i)
            if got is None or got.record != synthetic_episode(i):
                errors.append(f"episode {i} differs")
            checked += 1
            with open(paced_by + ".tmp", "w") as f:
                f.write(str(checked))
            os.replace(paced_by + ".tmp", paced_by)  # the writer waits for our reads
        if len(runs) and runs.status[0] == "finished":
            break
    except Exception as exc:
        errors.append(f"{type(exc).__name__}: {exc}")
print(json.dumps({"counts": counts, "errors": errors, "checked": checked}))
"""


def test_concurrent_writer_and_reader_processes(db: Path) -> None:
    n = 100
    ready = db.parent / "reader-ready"
    writer = spawn_writer(
        db, n, "--sleep", "0.04", "--ingest-every", "0.05", "--wait-for", str(ready),
        "--paced-by", f"{ready}.checks",
    )  # fmt: skip
    first = writer.stdout.readline()
    assert first.startswith("run ")
    run_id = first.split()[1]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    reader = subprocess.run(
        [sys.executable, "-c", READER, str(db), "60", str(ready)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=120,
    )
    out, err = writer.communicate(timeout=120)
    assert writer.returncode == 0, err
    assert reader.returncode == 0, reader.stderr
    seen = json.loads(reader.stdout)
    assert seen["errors"] == []
    assert seen["checked"] > 5
    assert any(0 < c < n for c in seen["counts"]), "no read happened while the run was half-written"
    assert seen["counts"] == sorted(seen["counts"]), "a reader saw rows disappear"
    assert count_episodes(db) == n
    assert list(list_episodes(db, limit=1000).episode) == list(range(n))
    assert out.strip().endswith("done")
    assert get_run(db, run_id).status == "finished"
    assert len(training_curves(db, run_id)) == n


def _kill_after(db: Path, episodes_before_kill: int, *args: str) -> tuple[str, int]:
    writer = spawn_writer(db, 10_000, "--sleep", "0.005", *args)
    run_id = writer.stdout.readline().split()[1]
    last = -1
    while last < episodes_before_kill:
        last = int(writer.stdout.readline().split()[1])
    os.kill(writer.pid, signal.SIGKILL)
    writer.wait(timeout=30)
    return run_id, last


def test_sigkill_then_reopen_and_resume(db: Path) -> None:
    run_id, last = _kill_after(db, 45, "--checkpoint-every", "10", "--ingest-every", "0.2")
    # Any open recovers: every reported episode is intact, at most the one in flight more.
    stored = count_episodes(db)
    assert last + 1 <= stored <= last + 2
    for i in (0, last // 2, last):
        assert load_episode(db, run_id, i).record == synthetic_episode(i)
    run = get_run(db, run_id)
    assert run.status == "interrupted" and run.ended_at is not None
    assert run.checkpoint_episode == 39 and run.checkpoint.endswith("-39.pt")
    assert [r.id for r in runs_to_resume(db)] == [run_id]
    assert not any(db.with_name(db.name + ".spool").glob(f"{run_id}*"))

    # Resume into the same run: nothing is deleted (the episodes after the checkpoint are
    # real data), numbering continues after the last stored episode.
    assert last_episode(db, run_id) == stored - 1
    logger = RunLogger.resume(db, run_id)
    assert logger.next_episode == stored and get_run(db, run_id).status == "running"
    assert count_episodes(db) == stored
    for i in range(stored, stored + 20):
        assert logger.log_episode(synthetic_episode(i)) == i
    logger.close()
    run = get_run(db, run_id)
    assert run.status == "finished" and run.episodes == stored + 20
    assert run.last_episode == stored + 19
    assert list(list_episodes(db, limit=200).episode) == list(range(stored + 20))
    assert load_episode(db, run_id, last).record == synthetic_episode(last)
    assert load_episode(db, run_id, stored + 19).record == synthetic_episode(stored + 19)
    assert runs_to_resume(db) == []


def test_sigkill_before_any_ingest_keeps_completed_episodes(db: Path) -> None:
    run_id, last = _kill_after(db, 8, "--ingest-every", "1000")
    run = get_run(db, run_id)
    assert run is not None and run.status == "interrupted"
    assert last + 1 <= run.episodes <= last + 2
    assert load_episode(db, run_id, last).record == synthetic_episode(last)


def test_a_child_forked_after_the_store_was_used_survives(db: Path) -> None:
    # Popen with a preexec_fn runs Python's at-fork handlers in the child (Ray starts its
    # processes this way); the store's handler once destroyed the inherited DuckDB
    # instance there and the child died of SIGSEGV before it could exec.
    with RunLogger(db, "eval") as logger:
        logger.log_episodes([synthetic_episode(0)])
    assert count_episodes(db) == 1
    child = subprocess.run(["true"], preexec_fn=lambda: None, timeout=60)
    assert child.returncode == 0
