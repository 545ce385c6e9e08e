"""The first-start demo when the lab is started without its launcher (plain ``streamlit run``):
the first page view starts it once, it reports progress, and it logs what it set out to."""

from __future__ import annotations

import time

from streamlit.testing.v1 import AppTest

from core.store.queries import count_episodes
from core.team.topologies import FIXED_TOPOLOGIES
from lab.demo import (
    SHIPPED_POLICY,
    DemoConfig,
    DemoStatus,
    cancel_demo,
    expected_episodes,
    read_status,
)
from lab.jobs import process_alive
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
    deadline = time.monotonic() + 900  # a hang guard: ~30 CPU-s took 6 min at load 25-48
    while (status := read_status(db)).live:
        fractions.add(round(status.fraction, 2))
        assert time.monotonic() < deadline, "the demo did not finish"
        time.sleep(0.2)
    assert status.state == "finished", status.error
    assert any(0 < f < 1 for f in fractions)
    assert count_episodes(db) == sum(expected_episodes(DemoConfig(), len(FIXED_TOPOLOGIES)))


def test_the_demo_can_be_cancelled_from_the_page_and_is_not_restarted(tmp_path, monkeypatch):
    db = tmp_path / "fresh.duckdb"
    monkeypatch.setenv("AGENTQMIX_DB", str(db))
    monkeypatch.setenv("AGENTQMIX_LAB_DEMO", "1")
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.run()
    first = read_status(db)
    deadline = time.monotonic() + 120
    # Cancelled as soon as it runs (it is then importing torch): the signal handler is in
    # place from its first status on, and waiting for training would add half a minute.
    while (status := read_status(db)).state != "running":
        assert status.live and time.monotonic() < deadline, "the demo never started"
        time.sleep(0.1)
    at.run()
    at.button(key="home_demo_cancel").click().run()
    assert not at.exception, [e.message for e in at.exception]
    status = read_status(db)
    assert status.cancelled and not status.live and not process_alive(first.pid, first.proc_start)
    assert any("cancelled" in i.value for i in at.info)
    # The lab does not start it again behind the user's back: only the button does.
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.run()
    assert read_status(db).cancelled and read_status(db).pid == first.pid
    at.button(key="home_demo_restart").click().run()
    again = read_status(db)
    assert again.pid != first.pid and not again.cancelled
    assert cancel_demo(db)  # and stop it, leaving nothing behind
    assert read_status(db).cancelled and not process_alive(again.pid, again.proc_start)


def test_the_shipped_policy_is_the_default_recipes_and_fits_the_demo_team(tmp_path):
    """data/demo-policy.pt: Agent Q-Mix of ``agentqmix train --benchmark mixed --seed 0`` (the
    default recipe, all its episodes), for the demo's team, with only what evaluating needs."""
    from benchmarks.demo_policy import TRAIN_ARGS, strip_resume
    from core.qmix.checkpoint import load_checkpoint, read_payload
    from core.team.recipes import recipe_value

    shipped = load_checkpoint(SHIPPED_POLICY)
    assert shipped.meta["recipe"] == "society" and shipped.meta["seed"] == 0
    assert shipped.meta["episodes"] == recipe_value("society", "episodes")
    assert TRAIN_ARGS == ("train", "--benchmark", "mixed", "--seed", "0")
    team, demo = shipped.env["team"], DemoConfig().team
    assert (team["benchmark"], tuple(team["roles"]), team["rounds"], team["token_weight"]) == (
        demo.benchmark,
        tuple(demo.roles),
        demo.rounds,
        demo.token_weight,
    )
    assert shipped.resume is None and DemoConfig().policy == SHIPPED_POLICY
    # Stripping keeps the weights bit for bit.
    again = strip_resume(SHIPPED_POLICY, tmp_path / "copy.pt")
    a, b = read_payload(SHIPPED_POLICY), read_payload(again)
    assert all(a["agent"][k].equal(b["agent"][k]) for k in a["agent"])
