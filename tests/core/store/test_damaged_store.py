"""Damaged files: one sentence and exit 2, never a traceback or a 30 s lock wait; repair.

Real DuckDB files damaged the way disks and people damage them (a flipped bit, a cut-off
file, a spool line of the wrong shape), driven through the real entry point
(``core.cli.main``, in process).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from core.cli import main
from core.store import RunLogger, StoreBusy, get_run, load_episode, read_session
from core.store.queries import count_episodes
from core.store.spool import spool_dir_for
from core.store.synthetic import synthetic_episode
from core.store.writer import LoggerConfig

NEVER = LoggerConfig(ingest_every_s=1e9)
HEADER = 4096 + 100
"""A byte inside DuckDB's first database header (checked on every open)."""
BLOCK = 256 * 1024
"""DuckDB's block size; blocks start after three 4 KiB headers."""


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def _one_line_error(code: int, err: str) -> str:
    assert code == 2, err
    assert "Traceback" not in err
    assert err.strip().startswith("error:") and len(err.strip().splitlines()) == 1, err
    return err


def _finished_run(db: Path, episodes: int, kind: str = "train") -> str:
    with RunLogger(db, kind, {"n": episodes}) as log:
        log.log_episodes(synthetic_episode(i) for i in range(episodes))
    return log.run_id


def _kill(log: RunLogger) -> None:
    """Leave the run as SIGKILL would: its spool on disk, its lock free."""
    log._stop_ingester()
    log._spool.close(remove=False)


def _flip(path: Path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ 0x10]))


def _data_block(db: Path) -> int:
    """Offset of a block that holds agent_steps data (read off the sound file)."""
    con = duckdb.connect(str(db), read_only=True)
    (block,) = con.execute(
        "SELECT max(block_id) FROM pragma_storage_info('agent_steps') WHERE block_id >= 0"
    ).fetchone()
    con.close()
    return 3 * 4096 + block * BLOCK


def _damage(db: Path, how: str) -> None:
    if how == "bit flip":
        _flip(db, HEADER)
    elif how == "truncated":
        os.truncate(db, 3 * 4096 + 4096)  # the headers and a sliver of the first block
    elif how == "data bit flip":  # opens fine, fails when the steps are read
        _flip(db, _data_block(db) + BLOCK // 2)
    else:  # cut off before the steps' data: opens fine, fails when they are read
        os.truncate(db, _data_block(db))


def _commands(db: Path, run_id: str, out: Path) -> dict[str, list[str]]:
    return {
        "runs": ["runs", "--db", str(db)],
        "sql": ["sql", "SELECT * FROM agent_steps", "--db", str(db)],
        "export": ["export", "--run", run_id, "--parquet", str(out), "--db", str(db)],
        "delete-run": ["delete-run", "--run", run_id, "--db", str(db)],
        "eval": ["eval", "--policy", "star", "--benchmark", "math", "--episodes", "1"]
        + ["--db", str(db)],
    }


@pytest.mark.parametrize(
    ("how", "reason", "commands"),
    [
        ("bit flip", "checksum error", ["runs", "sql", "export", "delete-run", "eval"]),
        ("truncated", "truncated", ["runs", "sql", "export", "delete-run", "eval"]),
        ("data bit flip", "checksum error", ["sql", "export"]),
        ("data cut off", "truncated", ["sql", "export"]),
    ],
)
def test_damaged_database_is_one_sentence(
    db: Path,
    tmp_path: Path,
    how: str,
    reason: str,
    commands: list[str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    run_id = _finished_run(db, 30)
    _finished_run(db, 30, "eval")
    _damage(db, how)
    damaged = db.read_bytes()
    table = _commands(db, run_id, tmp_path / "out")
    for name in commands:
        # Not a lock: before, "block" in DuckDB's checksum error read as one and every
        # command waited 30 s for it to go away.
        err = _one_line_error(*_run(table[name], capsys)[::2])
        assert f"database {db} is damaged" in err and reason in err, (name, err)
        assert f"agentqmix repair --db {db}" in err, (name, err)
    assert db.read_bytes() == damaged


def test_a_real_lock_conflict_is_still_busy(db: Path) -> None:
    _finished_run(db, 2)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import duckdb, sys; c = duckdb.connect(sys.argv[1]); print('up', flush=True); "
            "sys.stdin.read()",
            str(db),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "up"
        with pytest.raises(StoreBusy, match="stayed locked by another process"):
            with read_session(db, timeout=0):
                pass
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)


WRONG_SHAPE = [
    b'{"t":"ep","episode":"three","episodes":{}}\n',
    b'{"t":"metrics","train_metrics":5}\n',
    b'{"t":"ckpt","path":7}\n',
    b'{"t":"end","status":"finished"}\n',
    b'{"t":"run","run":{"id":"someone-else"}}\n',
    b'{"t":"party"}\n',
    b"[1, 2, 3]\n",
    b'"just a string"\n',
]


@pytest.mark.parametrize("producer", ["dead", "live"])
@pytest.mark.parametrize("command", ["runs", "sql", "eval"])
def test_wrong_shape_spool_lines_are_skipped_with_one_warning(
    db: Path,
    tmp_path: Path,
    producer: str,
    command: str,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    log = RunLogger(db, "train", settings=NEVER)
    log.log_episodes(synthetic_episode(i) for i in range(3))
    log._spool.append(b"".join(WRONG_SHAPE))
    log.log_episodes((synthetic_episode(i) for i in range(3, 5)), first=3)
    if producer == "dead":
        log._stop_ingester()
        log._spool.close(remove=False)
    args = {
        "runs": ["runs", "--json"],
        "sql": ["sql", "SELECT run_id, count(*) AS n FROM episodes GROUP BY 1", "--json"],
        "eval": ["eval", "--policy", "star", "--benchmark", "math", "--episodes", "1"],
    }[command]
    with caplog.at_level(logging.WARNING, logger="core.store.ingest"):
        code, out, err = _run([*args, "--db", str(db)], capsys)
    assert code == 0 and "Traceback" not in err, err
    warnings = [r.getMessage() for r in caplog.records if r.name == "core.store.ingest"]
    assert len(warnings) == 1, warnings
    assert f"skipping {len(WRONG_SHAPE)} malformed line(s)" in warnings[0]
    if command == "runs":
        row = next(r for r in json.loads(out) if r["id"] == log.run_id)
        assert row["episodes"] == 5
        assert row["status"] == ("interrupted" if producer == "dead" else "running")
    elif command == "sql":
        assert json.loads(out) == [{"run_id": log.run_id, "n": 5}]
    if producer == "live":
        log.close()
    for i in range(5):
        assert load_episode(db, log.run_id, i).record == synthetic_episode(i)
    assert get_run(db, log.run_id).status == ("interrupted" if producer == "dead" else "finished")


# ------------------------------------------------------------------ repair


def test_repair_rebuilds_from_the_spools_and_keeps_the_damaged_file(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _finished_run(db, 10)  # ingested and its spool gone: only the damaged file had it
    logs = [RunLogger(db, "train", settings=NEVER) for _ in range(2)]
    logs[0].log_episodes(synthetic_episode(i) for i in range(6))  # spool only...
    logs[1].log_episodes(synthetic_episode(i) for i in range(3))
    assert logs[1].flush()  # ...until now: these 9 episodes are ingested, their spools stay
    logs[1].log_episodes((synthetic_episode(i) for i in range(3, 8)), first=3)
    for log in logs:
        _kill(log)
    dead, half = (log.run_id for log in logs)
    _flip(db, HEADER)
    damaged = db.read_bytes()

    code, out, err = _run(["repair", "--db", str(db)], capsys)
    assert code == 0, err
    moved = list(tmp_path.glob("store.duckdb.damaged-*"))
    assert len(moved) == 1 and moved[0].read_bytes() == damaged  # moved aside, never deleted
    said = " ".join(err.split())  # the CLI reports on stderr, like delete-run
    assert "recovered 2 runs and 14 episodes" in said and "checksum error" in said, said
    assert str(moved[0]) in said

    code, out, err = _run(["runs", "--db", str(db), "--json"], capsys)
    assert code == 0, err
    runs = {r["id"]: r for r in json.loads(out)}
    assert set(runs) == {dead, half}
    assert runs[dead]["episodes"] == 6 and runs[half]["episodes"] == 8
    assert {r["status"] for r in runs.values()} == {"interrupted"}
    for run_id, n in ((dead, 6), (half, 8)):
        for i in range(n):
            assert load_episode(db, run_id, i).record == synthetic_episode(i)
    assert not any(spool_dir_for(db).glob("*.jsonl"))  # ingested, so cleaned up
    assert not list(tmp_path.glob("*.repair-*"))


def test_repair_keeps_the_tables_that_read_back_and_says_which_did_not(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A flipped bit in the steps' data loses the steps, not the run's episodes."""
    kept = _finished_run(db, 30)
    log = RunLogger(db, "train", settings=NEVER)
    log.log_episodes(synthetic_episode(i) for i in range(4))
    _damage(db, "data bit flip")
    _kill(log)
    dead = log.run_id
    code, out, err = _run(["repair", "--db", str(db)], capsys)
    assert code == 0, err
    said = " ".join(err.split())
    assert "recovered 2 runs and 34 episodes" in said, said
    assert "episodes 30/30" in said and "agent_steps 0/390" in said, said
    assert count_episodes(db) == 34 and get_run(db, dead).episodes == 4
    assert get_run(db, kept).episodes == 30


def test_repair_leaves_a_sound_store_alone(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = _finished_run(db, 5), _finished_run(db, 7, "eval")
    code, out, err = _run(["repair", "--db", str(db)], capsys)
    assert code == 0, err
    assert "no damage found" in " ".join(err.split())
    assert not list(tmp_path.glob("*.damaged-*")) and not list(tmp_path.glob("*.repair-*"))
    assert (get_run(db, a).episodes, get_run(db, b).episodes) == (5, 7)


def test_repair_refuses_while_a_run_is_logging(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = RunLogger(db, "train", settings=NEVER)
    log.log_episode(synthetic_episode(0))
    try:
        err = _one_line_error(*_run(["repair", "--db", str(db)], capsys)[::2])
        assert "still logging" in err
    finally:
        log.close()
    assert count_episodes(db) == 1


def test_repair_without_anything_to_repair(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _one_line_error(*_run(["repair", "--db", str(tmp_path / "none.duckdb")], capsys)[::2])
    assert "nothing" in err or "no spools" in err
