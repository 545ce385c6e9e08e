"""The first-start demo when the lab is started without its launcher (plain ``streamlit run``):
the first page view starts it once, it reports progress, and it logs what it set out to."""

from __future__ import annotations

import time

from streamlit.testing.v1 import AppTest

from core.store.queries import count_episodes
from core.team.topologies import FIXED_TOPOLOGIES
from lab.demo import DemoConfig, DemoStatus, expected_episodes, read_status
from tests.lab.conftest import ROOT


def test_status_round_trips_and_a_dead_pid_is_not_live(tmp_path):
    path = tmp_path / "demo.json"
    DemoStatus(state="running", fraction=0.5, phase="train", pid=2**22 + 7).write(path)
    status = DemoStatus.read(path)
    assert status.fraction == 0.5 and status.phase == "train"
    assert not status.live and status.lost
    assert DemoStatus.read(tmp_path / "missing.json") is None


def test_first_page_view_starts_the_demo_once_and_it_fills_the_store(tmp_path, monkeypatch):
    db = tmp_path / "fresh.duckdb"
    monkeypatch.setenv("AGENTQMIX_DB", str(db))
    monkeypatch.setenv("AGENTQMIX_LAB_DEMO", "1")
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.run()
    assert not at.exception
    first = read_status(db)
    assert first is not None and first.pid
    assert any("Preparing a demo" in h.value for h in at.subheader)
    at.run()  # a second view (or session) does not start a second demo
    assert read_status(db).pid == first.pid
    fractions = set()
    deadline = time.monotonic() + 300
    while (status := read_status(db)).live:
        fractions.add(round(status.fraction, 2))
        assert time.monotonic() < deadline, "the demo did not finish"
        time.sleep(0.2)
    assert status.state == "finished", status.error
    assert any(0 < f < 1 for f in fractions)
    assert count_episodes(db) == sum(expected_episodes(DemoConfig(), len(FIXED_TOPOLOGIES)))
