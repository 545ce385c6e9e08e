"""Every page under streamlit.testing.v1.AppTest on a real seeded DuckDB store."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from core.store.queries import count_episodes, list_runs
from tests.lab.conftest import ROOT, seed_store

APP = str(ROOT / "app.py")


def _open(page: str | None) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    if page:
        at.switch_page(page)
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def _keys(at: AppTest, kind: str) -> set[str]:
    return {w.key for w in getattr(at, kind)}


def test_home(lab_env):
    at = _open(None)
    assert at.title[0].value == "Agent Q-Mix Lab"
    assert [m.value for m in at.metric][:2] == ["5", "60"]


def test_replay_moves_every_panel_with_the_round(lab_env):
    at = _open("pages/replay.py")
    assert {"replay_run", "replay_episode", "replay_policy", "replay_correct"} <= _keys(
        at, "selectbox"
    )
    assert {"replay_play", "replay_prev", "replay_next"} <= _keys(at, "button")
    assert at.slider(key="replay_round").value == 0
    assert any("Round 0 of 2" in m.value for m in at.markdown)
    at.button(key="replay_next").click().run()
    assert at.slider(key="replay_round").value == 1
    assert any("Round 1 of 2" in m.value for m in at.markdown)
    at.slider(key="replay_round").set_value(2).run()
    assert any("Round 2 of 2" in m.value for m in at.markdown)
    # Filtering to wrong answers only lists wrong episodes.
    at.selectbox(key="replay_correct").set_value(False).run()
    assert not at.exception
    assert all("✘" in o for o in at.selectbox(key="replay_episode").options)


def test_train_page_watches_the_training_run(lab_env):
    at = _open("pages/train.py")
    assert {"train_agents", "train_rounds", "train_episodes", "train_seed"} <= _keys(
        at, "number_input"
    )
    assert {"train_token_weight", "train_fail_prob"} <= _keys(at, "slider")
    assert at.selectbox(key="train_watch_run").value == lab_env[1]["train"]
    assert [m.value for m in at.metric][:2] == ["finished", "12"]


def test_compare_ctde_runs_pages(lab_env):
    at = _open("pages/compare.py")
    assert {"compare_benchmark", "compare_policy", "compare_run_a", "compare_run_b"} <= _keys(
        at, "selectbox"
    )
    assert {"qmix", "full", "chain", "single"} <= set(at.dataframe[0].value["policy"])
    at = _open("pages/ctde.py")
    assert len([s for s in at.slider if s.key.startswith("ctde_q_")]) == 18
    assert at.success, "greedy choices should reach the joint argmax"
    at.slider(key=next(s.key for s in at.slider if s.key.endswith("_0_0"))).set_value(3.0).run()
    assert at.success and not at.exception
    at = _open("pages/runs.py")
    assert len(at.dataframe[0].value) == 5
    assert {"runs_export", "runs_delete"} <= _keys(at, "button")


def test_failure_lab_renders(lab_env):
    at = _open("pages/failure_lab.py")
    assert {"fail_run", "fail_episode", "fail_policy", "fail_mode"} <= _keys(at, "selectbox")
    assert at.multiselect(key="fail_agents").value == [1]
    assert at.button(key="fail_run_now")


@pytest.mark.parametrize("broken", ["empty", "not_a_db"])
def test_friendly_messages_for_a_bad_database(tmp_path, monkeypatch, broken):
    db = tmp_path / "x.duckdb"
    if broken == "not_a_db":
        db.write_text("this is not a database")
    monkeypatch.setenv("AGENTQMIX_DB", str(db))
    monkeypatch.setenv("AGENTQMIX_LAB_DEMO", "0")
    for page in ("pages/replay.py", "pages/compare.py", "pages/runs.py", "pages/failure_lab.py"):
        at = _open(page)
        if broken == "empty":
            assert any("empty" in i.value for i in at.info)
        else:
            assert any("not a DuckDB database" in e.value for e in at.error)


@pytest.fixture
def own_db(tmp_path, monkeypatch, seeded_db):
    """A private copy of the seeded store, for tests that write into it."""
    db = tmp_path / "own.duckdb"
    shutil.copy(seeded_db[0], db)
    monkeypatch.setenv("AGENTQMIX_DB", str(db))
    monkeypatch.setenv("AGENTQMIX_LAB_DEMO", "0")
    return db


def _wait_for(predicate, timeout: float = 150.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.5)


def test_failure_lab_run_adds_episodes_and_shows_both_sides(own_db):
    before = count_episodes(own_db)
    at = _open("pages/failure_lab.py")
    at.selectbox(key="fail_policy").set_value("fixed · full")
    at.selectbox(key="fail_mode").set_value("crash")
    at.button(key="fail_run_now").click().run()
    assert not at.exception
    # Episode #0 of the chosen run, twice (with and without the failure).
    _wait_for(lambda: len(list_runs(own_db)) == 7 and count_episodes(own_db) == before + 2)
    runs = list_runs(own_db)
    new = runs[runs["started_at"] > runs["started_at"].sort_values().iloc[4]]
    assert set(new["status"]) == {"finished"} and set(new["policy"]) == {"full"}
    at.run()
    _wait_for(lambda: not at.run().exception and any(m.label == "tokens" for m in at.metric), 60)
    assert {m.label for m in at.metric} >= {"answer", "tokens", "reward"}


def test_training_from_the_train_page_logs_episodes(own_db):
    at = _open("pages/train.py")
    at.number_input(key="train_episodes").set_value(8)
    at.number_input(key="train_agents").set_value(3)
    next(b for b in at.button if b.label == "Start training").click().run()
    assert not at.exception
    _wait_for(lambda: not list_runs(own_db, kind="train", status="finished").pipe(
        lambda d: d[d["episodes"] == 8]).empty)  # fmt: skip
    at.run()
    assert not at.exception
    runs = list_runs(own_db, kind="train")
    assert runs.iloc[0]["episodes"] == 8
    assert at.selectbox(key="train_watch_run").value == runs.iloc[0]["id"]
    assert Path(runs.iloc[0]["checkpoint"]).exists()


def test_seed_store_is_what_the_tests_assume(tmp_path):
    ids = seed_store(tmp_path / "s.duckdb", episodes_per_run=2)
    assert set(ids) == {"train", "qmix", "full", "chain", "single"}
    assert count_episodes(tmp_path / "s.duckdb") == 10
