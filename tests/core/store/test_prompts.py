"""The prompts real back-ends sent: stored once however often they were sent, deleted only
with their last user, exported with their run, carried over by repair; a schema-1 store and
a spool of the older line format are migrated with nothing lost."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pyarrow.parquet as pq

from core.records import EpisodeRecord, prompt_digest
from core.store import RunLogger, get_run, load_episode, open_store, read_session
from core.store.commands import RepairReport, _salvage, delete_run, export_run
from core.store.engine import attached
from core.store.schema import SCHEMA_VERSION, ensure_schema
from core.store.spool import spool_dir_for
from core.store.synthetic import synthetic_episode
from core.store.writer import LoggerConfig

NEVER = LoggerConfig(ingest_every_s=1e9)
DATA = Path(__file__).with_name("data")
V1_STORE = DATA / "v1_store.duckdb.gz"
"""A schema-1 store written by the code of commit 982841b (gzipped: mostly empty blocks):
run ``eval-20261123-215736-0155`` with ``synthetic_episode(5)`` and
``synthetic_episode(6, n_agents=3)``, ingested."""
V2_SPOOL = DATA / "v2_spool.jsonl"
"""The spool that code left for run ``train-20261123-215736-c64a`` (killed before any
ingest): its run row, ``synthetic_episode(7)`` and ``synthetic_episode(8, n_agents=2)`` in
line format 2 (before prompts). Both were made by running, on that commit::

    with RunLogger(db, "eval", {"episodes": 2}, policy="qmix", benchmark="gsm8k", seed=3) as log:
        log.log_episodes([synthetic_episode(5), synthetic_episode(6, n_agents=3)])
    log = RunLogger(db, "train", {"episodes": 2}, policy="qmix", benchmark="gsm8k",
                    settings=LoggerConfig(ingest_every_s=1e9, background=False))
    log.log_episodes([synthetic_episode(7), synthetic_episode(8, n_agents=2)])
    os._exit(0)
"""
STORED_RUN, SPOOLED_RUN = "eval-20261123-215736-0155", "train-20261123-215736-c64a"


def _chat(question: str, peer: str = "") -> list[dict[str, str]]:
    return [
        {"role": "system", "content": "You are the solver of a small team of AI agents."},
        {"role": "user", "content": f"Problem:\n{question}\n\n{peer}Answer: ..."},
    ]


SHARED = _chat("How many legs has a spider? ünïcödé ✓")
"""Sent by calls of several episodes and runs."""


def _with_prompts(seed: int, *chats: list[dict[str, str]]) -> EpisodeRecord:
    """``synthetic_episode(seed)`` whose first calls sent ``chats`` (the rest sent nothing)."""
    rec = synthetic_episode(seed)
    for call, chat in zip(rec.calls, chats, strict=False):
        call.prompt = [dict(m) for m in chat]
    return rec


def _prompts(db: Path) -> dict[str, tuple[str, int, str]]:
    with read_session(db) as cur:
        rows = cur.execute(
            "SELECT messages_hash, messages, n_chars, first_run_id FROM prompts"
        ).fetchall()
    return {h: (m, n, run) for h, m, n, run in rows}


def test_a_prompt_is_stored_once_however_many_calls_episodes_and_runs_send_it(db: Path) -> None:
    own = _chat("What is 3 * 3?", "Agent 1 said 9.\n")
    first = [_with_prompts(1, SHARED, SHARED, own), _with_prompts(2, SHARED)]
    log = RunLogger(db, "eval", settings=NEVER)
    log.log_episodes(first)
    # The spool carries each prompt once per run: later calls carry only its hash.
    spool = b"".join(p.read_bytes() for p in spool_dir_for(db).glob("*.jsonl"))
    assert spool.count(b"legs has a spider") == 1
    for i, rec in enumerate(first):  # live: read from the spool tail
        assert load_episode(db, log.run_id, i).record == rec
    assert len(_prompts(db)) == 2
    log.close()
    with RunLogger(db, "eval") as other:
        other.log_episodes([_with_prompts(3, SHARED), _with_prompts(4)])

    stored = _prompts(db)
    assert set(stored) == {prompt_digest(SHARED), prompt_digest(own)}
    messages, n_chars, run = stored[prompt_digest(SHARED)]
    assert run == log.run_id and n_chars == sum(len(m["content"]) for m in SHARED)
    for i, rec in enumerate(first):
        loaded = load_episode(db, log.run_id, i).record
        assert loaded == rec and loaded.calls[0].prompt == SHARED
        assert loaded.calls[0].messages_hash == prompt_digest(SHARED)
    assert load_episode(db, other.run_id, 0).record.calls[0].prompt == SHARED
    assert all(c.prompt is None for c in load_episode(db, other.run_id, 1).record.calls)


def test_deleting_a_run_keeps_the_prompts_other_runs_sent(db: Path, tmp_path: Path) -> None:
    own = _chat("Only the first run asked this.")
    with RunLogger(db, "eval") as a:
        a.log_episodes([_with_prompts(1, SHARED, own)])
    with RunLogger(db, "eval") as b:
        b.log_episodes([_with_prompts(2, SHARED), _with_prompts(3)])

    assert export_run(b.run_id, tmp_path / "b", db)["prompts"] == 1
    exported = pq.read_table(tmp_path / "b" / "prompts.parquet").to_pylist()
    assert [p["messages_hash"] for p in exported] == [prompt_digest(SHARED)]

    assert delete_run(a.run_id, db)["prompts"] == 1  # its own; the shared one stays
    stored = _prompts(db)
    assert list(stored) == [prompt_digest(SHARED)]
    assert stored[prompt_digest(SHARED)][2] == b.run_id  # no longer names the deleted run
    assert load_episode(db, b.run_id, 0).record.calls[0].prompt == SHARED
    assert delete_run(b.run_id, db)["prompts"] == 1
    assert _prompts(db) == {}


def test_a_schema_1_store_and_a_format_2_spool_are_migrated_with_nothing_lost(
    db: Path,
) -> None:
    with gzip.open(V1_STORE) as src, open(db, "wb") as out:
        shutil.copyfileobj(src, out)
    spool = spool_dir_for(db)
    spool.mkdir()
    shutil.copy(V2_SPOOL, spool / f"{SPOOLED_RUN}.000000.v2.jsonl")  # its producer is gone

    open_store(db)
    with read_session(db) as cur:
        version = cur.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        hashes = cur.execute("SELECT count(messages_hash) FROM llm_calls").fetchone()[0]
    assert int(version[0]) == SCHEMA_VERSION and hashes == 0
    assert get_run(db, STORED_RUN).status == "finished"
    assert get_run(db, SPOOLED_RUN).status == "interrupted"
    for run_id, seeds in ((STORED_RUN, ((5, 4), (6, 3))), (SPOOLED_RUN, ((7, 4), (8, 2)))):
        assert get_run(db, run_id).episodes == 2
        for i, (seed, n_agents) in enumerate(seeds):
            expected = synthetic_episode(seed, n_agents=n_agents)
            assert load_episode(db, run_id, i).record == expected
    assert not any(spool.glob("*.jsonl"))
    # The migrated store takes prompts like a new one.
    with RunLogger(db, "eval") as log:
        log.log_episodes([_with_prompts(9, SHARED)])
    assert load_episode(db, log.run_id, 0).record.calls[0].prompt == SHARED


def test_repair_copies_a_runs_prompts_and_reads_schema_1(db: Path, tmp_path: Path) -> None:
    own = _chat("Asked once.")
    with RunLogger(db, "eval") as log:
        log.log_episodes([_with_prompts(1, SHARED, own), _with_prompts(2, SHARED)])
    old = tmp_path / "old.duckdb"
    with gzip.open(V1_STORE) as src, open(old, "wb") as out:
        shutil.copyfileobj(src, out)
    # What `agentqmix repair` does with each table of a damaged file that reads back whole.
    for source, run_id, prompts in ((db, log.run_id, 2), (old, STORED_RUN, 0)):
        new = tmp_path / f"rebuilt-{source.stem}.duckdb"
        report = RepairReport(new, damaged=True)
        with attached(new, write=True, timeout=0, private=True) as cur:
            ensure_schema(cur, str(new))
            _salvage(cur, source, report)
        assert report.from_file == 1 and not report.damaged
        assert all(t.kept == t.total and not t.problem for t in report.tables.values())
        assert len(_prompts(new)) == prompts
        for i in range(2):
            assert load_episode(new, run_id, i).record == load_episode(source, run_id, i).record
