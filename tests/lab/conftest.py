"""A real DuckDB store seeded with logged runs, shared by the lab's tests."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from core.store.synthetic import synthetic_episode
from core.store.writer import RunLogger


def _share_the_component_scan() -> None:
    """Every new ``AppTest`` scans every installed distribution's metadata for custom
    components (0.2-0.6 s each, ~100 instances in the suite) and finds the same: none. The
    first instance's scan is kept and handed to the others. Streamlit keeps it in a private
    attribute; when a release renames it, nothing is shared and nothing breaks."""
    init = AppTest.__init__
    shared: list[object] = []

    def init_sharing(self, *args, **kwargs) -> None:
        init(self, *args, **kwargs)
        if not hasattr(self, "_bidi_component_manager"):
            return
        if not shared:
            from streamlit.components.v2.component_manager import BidiComponentManager

            manager = BidiComponentManager()
            manager.discover_and_register_components(start_file_watching=False)
            shared.append(manager)
        self._bidi_component_manager = shared[0]

    AppTest.__init__ = init_sharing


_share_the_component_scan()

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
