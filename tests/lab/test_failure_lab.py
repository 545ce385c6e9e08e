"""The Failure lab plays forks and measures robustness in the lab's own process (AppTest on a
real DuckDB store, the real rollout path, the sim back-end)."""

from __future__ import annotations

from core.store.queries import get_run, list_runs
from lab import forks
from tests.lab.test_pages import _chart, _open, _table


def test_a_fork_is_played_here_logged_as_one_labelled_run_and_shown_side_by_side(own_db):
    before = list_runs(own_db)
    at = _open("views/failure_lab.py")
    base_run = at.selectbox(key="fail_run").value
    at.selectbox(key="fail_episode").set_value(3)
    at.selectbox(key="fail_policy").set_value("fixed · full")
    at.multiselect(key="fail_agents").set_value([1])
    at.selectbox(key="fail_mode").set_value("byzantine")
    at.number_input(key="fail_from_round").set_value(2)  # round 2, as people count
    at.button(key="fail_run_now").click().run()
    assert not at.exception, [e.message for e in at.exception]

    # Done in this process: the run is in the store when the click returns (no job to wait on).
    runs = list_runs(own_db)
    assert len(runs) == len(before) + 1
    new = runs[~runs["id"].isin(before["id"])].iloc[0]
    assert (new["kind"], new["policy"], new["status"]) == ("lab", "full", "finished")
    info = get_run(own_db, new["id"])
    fork = info.config["fork"]
    assert (fork["run"], fork["episode"]) == (base_run, 3)
    assert fork["failures"] == [{"agent": 1, "mode": "byzantine", "from_round": 1}]
    assert fork["label"].startswith(f"fork of {base_run} #3 · fixed · full")

    # The fork is picked, labelled, and not offered as a task source (it is no evaluation).
    picker = at.selectbox(key="fail_fork")
    assert picker.value == new["id"]
    assert picker.options[0].startswith(f"fork of {base_run} #3")
    assert new["id"] not in at.selectbox(key="fail_run").options
    assert at.query_params["fork"] == [new["id"]] or at.query_params["fork"] == new["id"]

    # The note times the wait from the click (it left out the page drawn before and after).
    assert any(m.value.endswith(" s (from your click).") for m in at.success)
    # The round shown is counted from 1, as the page counts rounds (it ran 0-2).
    shown = at.slider(key="fail_show_round")
    assert (shown.min, shown.max, shown.value) == (1, 3, 3)
    # Both sides drawn, each with its Replay link; what the byzantine agent sent is shown.
    assert {"fail_graph_0", "fail_graph_1"} <= {c.key for c in at.get("plotly_chart")}
    assert sum(m.label == "tokens" for m in at.metric) == 2
    links = "".join(m.value for m in at.markdown)
    for k in (0, 1):
        assert f"/replay?run={new['id']}&episode={k}&round=1" in links
    sent = [f.value for f in at.dataframe if "what" in f.value.columns]
    assert len(sent) == 2
    failed_side, healthy_side = sent
    assert set(failed_side["agent"]) == {"1 coder"}
    assert set(failed_side.loc[failed_side["round"] >= 2, "fault"]) == {"byzantine"}
    assert set(healthy_side["fault"]) == {""}
    # A fork at round 2 (rounds counted from 1): round 1 is the same on both sides.
    r0 = [side[side["round"] == 1][["what", "answer", "text"]].values.tolist() for side in sent]
    assert r0[0] == r0[1]

    # The Replay link opens the fork's failed episode.
    replay = _open("views/replay.py", run=new["id"], episode="0", round="0")
    assert replay.selectbox(key="replay_run").value == new["id"]
    assert replay.selectbox(key="replay_run").options[-1].startswith("lab · fork of")


def test_compare_leaves_forks_out(own_db):
    at = _open("views/failure_lab.py")
    at.selectbox(key="fail_policy").set_value("fixed · chain")
    at.button(key="fail_run_now").click().run()
    assert not at.exception
    fork_id = list_runs(own_db, kind="lab").iloc[0]["id"]
    compare = _open("views/compare.py")
    points = {tuple(c[:2]) for t in _chart(compare, "compare_pareto")["data"]
              for c in t.get("customdata") or []}  # fmt: skip
    assert points and not any(run == fork_id for run, _ in points)


def test_robustness_is_measured_here_and_drawn_for_its_benchmark(own_db):
    at = _open("views/failure_lab.py")
    at.multiselect(key="fail_robust_topologies").set_value(["single", "full"])
    at.number_input(key="fail_robust_episodes").set_value(10)
    at.number_input(key="fail_robust_k").set_value(1)
    at.button(key="fail_measure").click().run()
    assert not at.exception, [e.message for e in at.exception]
    run = list_runs(own_db, kind="compare").iloc[0]
    assert run["policy"] == "robustness"
    # 2 policies x (0 and 1 failed) x 10 episodes, logged as one run tagged as the lab's.
    assert run["episodes"] == 40
    assert get_run(own_db, run["id"]).config["lab"] == forks.ROBUSTNESS_TAG["lab"]
    assert at.selectbox(key="fail_robust_run").value == run["id"]
    assert at.selectbox(key="fail_robust_bench").value == run["benchmark"]
    assert any(f"Robustness on {run['benchmark']}" in h.value for h in at.subheader)
    spec = _chart(at, "fail_robustness")
    assert sorted(t["name"] for t in spec["data"]) == ["full (n = 10)", "single (n = 10)"]
    table = _table(at, "failed agents", "n", "95 % interval")
    assert table["n"].tolist() == [10, 10, 10, 10]
    assert sorted(table["failed agents"].tolist()) == [0, 0, 1, 1]
