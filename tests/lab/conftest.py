"""A real DuckDB store seeded with logged runs, shared by the lab's tests."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from core.store.synthetic import synthetic_episode
from core.store.writer import RunLogger

POLICIES = ("qmix", "full", "chain", "single")


def seed_store(db: Path, episodes_per_run: int = 12) -> dict[str, str]:
    """Log one training run (with metrics) and one evaluation run per policy; returns run ids.

    As in a real store, the training run's episodes carry the policy name ``env`` (played
    with exploration, by the environment's own loop).
    """
    ids = {}
    with RunLogger(
        db,
        "train",
        {"episodes": episodes_per_run, "sandbox": "none"},
        policy="qmix",
        benchmark="mixed",
    ) as log:
        for k in range(episodes_per_run):
            log.log_episode(synthetic_episode(k, policy="env"))
            log.log_metrics(
                [{"step": k, "episode": k, "loss": 1.0 / (k + 1), "epsilon": 1.0 - k / 20}]
            )
        ids["train"] = log.run_id
    for p, policy in enumerate(POLICIES):
        with RunLogger(db, "eval", {}, policy=policy, benchmark="mixed") as log:
            log.log_episodes(
                synthetic_episode(1000 * (p + 1) + k, policy=policy)
                for k in range(episodes_per_run)
            )
            ids[policy] = log.run_id
    return ids


@pytest.fixture(scope="session")
def seeded_db(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    db = tmp_path_factory.mktemp("lab") / "seeded.duckdb"
    return db, seed_store(db)


@pytest.fixture
def lab_env(monkeypatch: pytest.MonkeyPatch, seeded_db):
    """Point the lab at the seeded store and keep the first-start demo off."""
    db, ids = seeded_db
    monkeypatch.setenv("AGENTQMIX_DB", str(db))
    monkeypatch.setenv("AGENTQMIX_LAB_DEMO", "0")
    return db, ids


@pytest.fixture
def own_db(tmp_path, monkeypatch, seeded_db):
    """A private copy of the seeded store, for tests that write into it."""
    db = tmp_path / "own.duckdb"
    shutil.copy(seeded_db[0], db)
    monkeypatch.setenv("AGENTQMIX_DB", str(db))
    monkeypatch.setenv("AGENTQMIX_LAB_DEMO", "0")
    return db


ROOT = Path(__file__).resolve().parents[2]
os.environ.setdefault("AGENTQMIX_LAB_DEMO", "0")
