"""Logging onto a disk that fills up, for test_logging_failures.py (run inside bwrap).

    python disk_full_proc.py DIR

DIR is a small tmpfs of its own, so filling it up is real ENOSPC for the spool and for
DuckDB alike. Prints one JSON object of what happened; warnings go to stderr.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from core.errors import DiskFull, UserError
from core.store.queries import count_episodes, get_run, load_episode
from core.store.synthetic import synthetic_episode
from core.store.writer import LoggerConfig, RunLogger


def fill(path: Path) -> None:
    """Write ``path`` until the disk is full."""
    with open(path, "wb", buffering=0) as f:
        chunk = b"\0" * 65536
        while True:
            try:
                f.write(chunk)
            except OSError:
                chunk = chunk[: len(chunk) // 2]
                if not chunk:
                    return


def main() -> None:
    root = Path(sys.argv[1])
    db, ballast = root / "store.duckdb", root / "ballast"
    report: dict[str, object] = {}
    settings = LoggerConfig(ingest_every_s=0.01)

    # 1. The disk fills up mid-run: the run stops with one sentence (nothing goes on in
    #    memory), what was stored stays readable while the disk is full, and once there is
    #    room again the run resumes after its last stored episode with nothing lost.
    log = RunLogger(db, "train", settings=settings)
    log.log_episodes(synthetic_episode(i) for i in range(3))
    report["flush_before"] = log.flush()
    fill(ballast)
    try:
        log.log_episodes((synthetic_episode(i) for i in range(3, 20)), first=3)
        report["stop_error"] = None
    except DiskFull as err:
        report["stop_error"] = str(err)
    log.close("interrupted")
    report["read_while_full"] = count_episodes(db)
    report["status_while_full"] = get_run(db, log.run_id).status
    ballast.unlink()
    log = RunLogger.resume(db, log.run_id, settings=settings)
    report["resumed_at"] = log.next_episode
    log.log_episodes(
        (synthetic_episode(i) for i in range(log.next_episode, 25)), first=log.next_episode
    )
    log.close()
    report["episodes"] = count_episodes(db)
    report["intact"] = all(
        load_episode(db, log.run_id, i).record == synthetic_episode(i) for i in range(25)
    )
    report["status"] = get_run(db, log.run_id).status

    # 2. Full from a run's first episode to its end: one sentence, and close is quiet.
    log = RunLogger(db, "eval", settings=settings)
    fill(ballast)
    try:
        log.log_episodes(synthetic_episode(i) for i in range(3))
        report["close_error"] = None
    except UserError as err:
        report["close_error"] = str(err)
    log.close("interrupted")

    # 3. Full before a run starts: it does not start, in one sentence.
    try:
        RunLogger(db, "eval", settings=settings).close()
        report["start_error"] = None
    except UserError as err:
        report["start_error"] = str(err)
    ballast.unlink()
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
