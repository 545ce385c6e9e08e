"""The spool line format: what DuckDB parses, torn lines, odd values, older segments."""

from __future__ import annotations

import json
import logging
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from core.store import RunLogger, get_run, load_episode, open_store, read_session
from core.store.queries import count_episodes, training_curves
from core.store.spool import spool_dir_for
from core.store.synthetic import synthetic_episode
from core.store.writer import LoggerConfig

NEVER = LoggerConfig(ingest_every_s=1e9)
V1_SPOOL = Path(__file__).with_name("data") / "v1_spool.jsonl"
"""A segment written by the row-per-object spool format (schema 1, before ``.v2``)."""


def test_corrupt_lines_are_skipped_live_and_at_ingest(
    db: Path, caplog: pytest.LogCaptureFixture
) -> None:
    records = [synthetic_episode(i) for i in range(5)]
    logger = RunLogger(db, "train", settings=NEVER)
    for rec in records[:3]:
        logger.log_episode(rec)
    # What a power loss can leave behind: a cut-off episode line and bytes that are not UTF-8.
    logger._spool.append(b'{"t":"ep","episode":3,"episodes":{"task_id":"tas\x00\x00\n\xff\xfe\n')
    logger.log_episodes(records[3:], first=3)
    with caplog.at_level(logging.WARNING, logger="core.store.ingest"):
        for i, rec in enumerate(records):
            assert load_episode(db, logger.run_id, i).record == rec
    # One warning for the file (not one per read): the cut-off episode and the non-UTF-8 line.
    warnings = [r.message for r in caplog.records]
    assert len(warnings) == 1 and "2 malformed line(s)" in warnings[0], warnings
    logger.close()
    assert count_episodes(db) == 5
    for i, rec in enumerate(records):
        assert load_episode(db, logger.run_id, i).record == rec


def test_nan_and_numpy_values_round_trip(db: Path) -> None:
    rec = synthetic_episode(2)
    step = rec.rounds[0].steps[0]
    step.q_values = np.array([0.5, math.nan, -1.25, math.inf, 2.0, 3.0], dtype=np.float32)
    step.epsilon = np.float64(0.125)
    rec.rounds[1].mixer_weights = np.arange(16, dtype=np.float64).reshape(4, 4) / 8
    rec.rounds[1].credit = [math.nan, 0.1, 0.2, 0.3]
    with RunLogger(db, "eval") as logger:
        logger.log_episode(rec)
    back = load_episode(db, logger.run_id, 0).record
    # JSON has no NaN or infinity: they come back as None.
    assert back.rounds[0].steps[0].q_values == [0.5, None, -1.25, None, 2.0, 3.0]
    assert back.rounds[0].steps[0].epsilon == 0.125
    assert back.rounds[1].mixer_weights == (np.arange(16).reshape(4, 4) / 8).tolist()
    assert back.rounds[1].credit == [None, 0.1, 0.2, 0.3]
    assert back.rounds[2] == rec.rounds[2] and back.decision == rec.decision


def test_rows_are_stored_in_episode_order(db: Path) -> None:
    # One big batch (parsed by several DuckDB threads), then small ones.
    logger = RunLogger(db, "train", settings=NEVER)
    logger.log_episodes(synthetic_episode(i, n_agents=2, n_rounds=1) for i in range(2500))
    logger.flush()
    for i in range(2500, 2510):
        logger.log_episode(synthetic_episode(i, n_agents=2 + i % 3))
        logger.flush()
    logger.close()
    with read_session(db) as cur:
        for table in ("episodes", "rounds", "agent_steps", "messages", "llm_calls"):
            rows = cur.execute(f"SELECT episode FROM {table} ORDER BY rowid").fetchall()
            order = [r[0] for r in rows]
            assert order == sorted(order) and order[-1] == 2509, table


def test_a_version_1_spool_left_by_a_crash_is_ingested(db: Path) -> None:
    run_id = json.loads(V1_SPOOL.read_text().splitlines()[0])["run"]["id"]
    open_store(db)
    spool = spool_dir_for(db)
    spool.mkdir()
    shutil.copy(V1_SPOOL, spool / f"{run_id}.000000.jsonl")  # no lock: its producer is gone
    run = get_run(db, run_id)
    assert run.status == "interrupted" and run.episodes == 2 and run.last_episode == 1
    assert (run.checkpoint, run.checkpoint_episode) == ("/tmp/v1-ckpt.pt", 1)
    assert run.config == {"episodes": 2}
    for i, seed in enumerate((39, 1)):
        assert load_episode(db, run_id, i).record == synthetic_episode(seed, n_agents=2, n_rounds=2)
    assert training_curves(db, run_id).loss.tolist() == [0.5]
    assert not any(spool.iterdir())
