"""``repair`` keeps what DuckDB can still read, table by table (issue 19 item 4).

A real 1,000-episode store, copied and damaged two ways: truncated to 60 % of its size,
and one bit flipped in the middle of a data block of the ``episodes`` table. Plain DuckDB
(read-only, another connection) says which tables of each damaged copy still read back
whole; after ``agentqmix repair`` the rebuilt store must hold every row of those tables,
report per table what it kept, and the damaged file must be byte for byte what it was.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import duckdb
import pytest

from core.cli import main
from core.store.synthetic import synthetic_episode
from core.store.writer import LoggerConfig, RunLogger

EPISODES = 1000
BLOCK = 256 * 1024


@pytest.fixture(scope="module")
def sound(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("sound") / "store.duckdb"
    with RunLogger(db, "eval", {}, settings=LoggerConfig(background=False)) as log:
        log.log_episodes(synthetic_episode(i) for i in range(EPISODES))
    return db


def _readable(db: Path) -> dict[str, int]:
    """Rows of each table that plain DuckDB reads back whole from ``db``."""
    out = {}
    with duckdb.connect(str(db), read_only=True) as con:
        tables = [t for (t,) in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()]
        for table in tables:
            try:
                out[table] = len(con.execute(f"SELECT * FROM {table}").fetchall())
            except duckdb.Error:
                pass
    return out


def _truncate(db: Path) -> None:
    os.truncate(db, int(db.stat().st_size * 0.6))


def _flip_in_episodes(db: Path) -> None:
    with duckdb.connect(str(db), read_only=True) as con:
        (block,) = con.execute(
            "SELECT max(block_id) FROM pragma_storage_info('episodes') WHERE block_id >= 0"
        ).fetchone()
    offset = 3 * 4096 + block * BLOCK + BLOCK // 2
    with open(db, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ 0x10]))


@pytest.mark.parametrize("damage", [_truncate, _flip_in_episodes], ids=["truncated", "bit flip"])
def test_repair_keeps_every_row_duckdb_still_reads(
    damage, sound: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "store.duckdb"
    shutil.copy(sound, db)
    damage(db)
    damaged = db.read_bytes()
    readable = _readable(db)
    assert readable.get("episodes", 0) > 0 or readable.get("agent_steps", 0) > 0

    assert main(["repair", "--db", str(db)]) == 0
    said = " ".join(capsys.readouterr().err.split())
    (moved,) = tmp_path.glob("store.duckdb.damaged-*")
    assert moved.read_bytes() == damaged, "the damaged file was changed"

    rebuilt = _readable(db)
    for table, rows in readable.items():
        if table not in ("meta", "spool_progress") and rows:  # bookkeeping, tidied on open
            assert rebuilt.get(table, 0) >= rows, (table, rows, rebuilt)
            assert f"{table} {rebuilt[table]}/" in said, said
    assert f"recovered 1 runs and {rebuilt['episodes']} episodes" in said, said
    # What came back is what was logged.
    with duckdb.connect(str(db), read_only=True) as con:
        got = con.execute(
            "SELECT episode, task_id, score FROM episodes ORDER BY episode"
        ).fetchall()
    want = {i: synthetic_episode(i) for i in range(EPISODES)}
    assert all((want[e].task_id, want[e].score) == (t, c) for e, t, c in got)
    if "episodes" in readable:
        assert len(got) == EPISODES
