"""Why the decision agent made no call (``episodes.pass_through``): stored and read back; a
schema-2 store and a format-3 spool, written by the code before the column, are migrated
with nothing lost and their episodes read back with it unknown (None)."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

from core.store import RunLogger, get_run, load_episode, open_store, read_session
from core.store.schema import SCHEMA_VERSION
from core.store.spool import spool_dir_for
from core.store.synthetic import synthetic_episode

DATA = Path(__file__).with_name("data")
V2_STORE = DATA / "v2_store.duckdb.gz"
"""A schema-2 store written by the code of commit e46229b: run ``eval-20261125-062110-7c5b``
with ``synthetic_episode(5)`` and ``synthetic_episode(6, n_agents=3)``, ingested."""
V3_SPOOL = DATA / "v3_spool.jsonl"
"""The spool that code left for run ``train-20261125-062111-2e5e`` (killed before any
ingest): its run row, ``synthetic_episode(7)`` and ``synthetic_episode(8, n_agents=2)`` in
line format 3. Both were made on that commit as ``test_prompts.py``'s fixtures were."""
STORED_RUN, SPOOLED_RUN = "eval-20261125-062110-7c5b", "train-20261125-062111-2e5e"


def test_the_reason_is_stored_and_read_back(db: Path) -> None:
    records = [synthetic_episode(1), synthetic_episode(2), synthetic_episode(3)]
    records[0].pass_through, records[1].pass_through = "unanimous", "single"
    with RunLogger(db, "eval") as log:
        log.log_episodes(records)
    assert [load_episode(db, log.run_id, i).record for i in range(3)] == records
    with read_session(db) as cur:
        rows = cur.execute(
            "SELECT pass_through FROM episodes WHERE run_id = ? ORDER BY episode", [log.run_id]
        ).fetchall()
    assert rows == [("unanimous",), ("single",), (None,)]


def test_a_schema_2_store_and_a_format_3_spool_are_migrated_with_nothing_lost(db: Path) -> None:
    with gzip.open(V2_STORE) as src, open(db, "wb") as out:
        shutil.copyfileobj(src, out)
    spool = spool_dir_for(db)
    spool.mkdir()
    shutil.copy(V3_SPOOL, spool / f"{SPOOLED_RUN}.000000.v3.jsonl")  # its producer is gone

    open_store(db)
    with read_session(db) as cur:
        version = cur.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        known = cur.execute("SELECT count(pass_through) FROM episodes").fetchone()[0]
    assert int(version[0]) == SCHEMA_VERSION == 3 and known == 0
    assert get_run(db, SPOOLED_RUN).status == "interrupted"
    for run_id, seeds in ((STORED_RUN, ((5, 4), (6, 3))), (SPOOLED_RUN, ((7, 4), (8, 2)))):
        assert get_run(db, run_id).episodes == 2
        for i, (seed, n_agents) in enumerate(seeds):
            assert load_episode(db, run_id, i).record == synthetic_episode(seed, n_agents=n_agents)
    assert not any(spool.glob("*.jsonl"))
    # The migrated store takes the new column like a new one.
    passed = synthetic_episode(9)
    passed.pass_through = "unanimous"
    with RunLogger(db, "eval") as log:
        log.log_episodes([passed])
    assert load_episode(db, log.run_id, 0).record.pass_through == "unanimous"
