"""Logging failures never stop a run: a damaged database or a full disk mid-run.

The writer keeps spooling (or, when the spool's disk is full, keeps the log in memory),
warns once, and everything goes into the database once the store is usable again.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.store import RunLogger, get_run, load_episode
from core.store.engine import _engine
from core.store.queries import count_episodes
from core.store.spool import spool_dir_for
from core.store.synthetic import synthetic_episode
from core.store.writer import LoggerConfig

from .conftest import REPO

HEADER = 4096 + 100
"""A byte inside DuckDB's first database header (checked on every open)."""


def _flip(path: Path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ 0x10]))


def _messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "core.store.writer"]


def test_a_database_damaged_mid_run_keeps_the_spool_until_it_is_usable(
    db: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = RunLogger(db, "train", settings=LoggerConfig(ingest_every_s=0.01))
    try:
        log.log_episodes(synthetic_episode(i) for i in range(5))
        assert log.flush()
        with _engine.lock:  # no ingest in flight (it could rewrite the header) while we damage it
            sound = db.read_bytes()
            _flip(db, HEADER)
        with caplog.at_level(logging.WARNING, logger="core.store.writer"):
            log.log_episodes((synthetic_episode(i) for i in range(5, 20)), first=5)
            assert not log.flush()  # the lines stay in the spool
            # The background ingester meets the damage too, and must neither stop nor raise.
            tried = log._since_ingest
            deadline = time.monotonic() + 60
            while log._since_ingest == tried and time.monotonic() < deadline:
                time.sleep(0.01)
            assert log._since_ingest != tried and log._thread.is_alive()
            log.log_episode(synthetic_episode(20))
            warned = _messages(caplog)
            assert len(warned) == 1 and "is damaged (checksum error)" in warned[0], warned
            assert str(spool_dir_for(db)) in warned[0]

            with _engine.lock:
                db.write_bytes(sound)  # usable again (a restored copy, or `agentqmix repair`)
            log.log_episodes((synthetic_episode(i) for i in range(21, 25)), first=21)
            assert log.flush()
            assert "usable again" in _messages(caplog)[-1]
    finally:
        log.close()  # stops the ingest thread even if an assertion failed
    assert count_episodes(db) == 25 and get_run(db, log.run_id).status == "finished"
    for i in range(25):
        assert load_episode(db, log.run_id, i).record == synthetic_episode(i)


def test_a_database_still_damaged_at_the_end_leaves_the_spool_for_later(
    db: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = RunLogger(db, "train", settings=LoggerConfig(ingest_every_s=1e9, close_timeout_s=0))
    log.log_episodes(synthetic_episode(i) for i in range(3))
    assert log.flush()
    sound = db.read_bytes()
    _flip(db, HEADER)
    log.log_episodes((synthetic_episode(i) for i in range(3, 6)), first=3)
    with caplog.at_level(logging.WARNING, logger="core.store.writer"):
        log.close()  # no exception: the run itself went fine
    assert "wait in the spool" in _messages(caplog)[-1]
    db.write_bytes(sound)
    run = get_run(db, log.run_id)  # the next opener ingests the spool, end event included
    assert run.status == "finished" and run.episodes == 6


def test_a_database_moved_aside_mid_run_is_started_afresh(db: Path) -> None:
    # What the damaged-file message suggests ("move it aside"), done while a run logs.
    log = RunLogger(db, "train", settings=LoggerConfig(ingest_every_s=1e9))
    try:
        log.log_episodes(synthetic_episode(i) for i in range(4))
        assert log.flush()
        with _engine.lock:
            db.rename(db.with_name("aside.duckdb"))
        log.log_episodes((synthetic_episode(i) for i in range(4, 7)), first=4)
        assert log.flush()  # a new store, filled from the spool (the run's whole segment)
    finally:
        log.close()
    assert count_episodes(db) == 7 and get_run(db, log.run_id).status == "finished"


def _bwrap_tmpfs_works(tmp_path: Path) -> bool:
    if shutil.which("bwrap") is None:
        return False
    probe = tmp_path / "probe"
    probe.mkdir()
    cmd = ["bwrap", "--dev-bind", "/", "/", "--tmpfs", str(probe), "true"]
    return subprocess.run(cmd, capture_output=True).returncode == 0


def test_a_full_disk_mid_run(tmp_path: Path) -> None:
    # A tmpfs of 8 MB of its own (bubblewrap), so the disk really fills up: ENOSPC for the
    # spool and for DuckDB, without touching the machine's disks.
    if not _bwrap_tmpfs_works(tmp_path):
        pytest.skip("bubblewrap cannot mount a tmpfs here")
    small = tmp_path / "small"
    small.mkdir()
    proc = subprocess.run(
        ["bwrap", "--dev-bind", "/", "/", "--size", str(8 * 1024 * 1024), "--tmpfs", str(small)]
        + [sys.executable, str(Path(__file__).with_name("disk_full_proc.py")), str(small)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    # Full mid-run: the run stops with one sentence that says what is kept and how to go
    # on; reads work while the disk is full; with room again it resumes, nothing lost.
    error = report["stop_error"]
    assert error is not None and "\n" not in error and "first 3 episodes are kept" in error
    assert "agentqmix train --resume" in error
    assert report["read_while_full"] == 3 and report["status_while_full"] == "interrupted"
    assert report["resumed_at"] == 3
    assert report["episodes"] == 25 and report["intact"] and report["status"] == "finished"
    # Full from the first episode: one sentence too.
    error = report["close_error"]
    assert error is not None and "\n" not in error and "No space left on device" in error
    # Full before a run starts: it does not start, and says why in one sentence.
    error = report["start_error"]
    assert error is not None and "\n" not in error and "No space left on device" in error
