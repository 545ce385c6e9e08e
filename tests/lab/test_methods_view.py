"""Compare: methods (views/methods.py) under AppTest, on a real tiny contest: ``agentqmix
bench methods``' own entry point with tiny settings (two methods, two training seeds, both
protocols) logging into a real DuckDB file; and the empty state of a store with no contest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.methods import main as bench_methods
from core.experiment.contest_store import list_contests
from tests.lab.test_pages import _open, _table

TINY = ["--benchmark", "mixed", "--episodes", "8", "--tune-episodes", "4", "--eval-episodes",
        "8", "--seeds", "1,2", "--methods", "qmix,gdesigner", "--grid-size", "1",
        "--n-envs", "4", "--bootstrap", "100"]  # fmt: skip


@pytest.fixture(scope="module")
def contest(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, dict]:
    """The store, the contest's id and the contest's own result (its result.json)."""
    root = tmp_path_factory.mktemp("contest")
    db = root / "lab.duckdb"
    bench_methods([*TINY, "--out", str(root / "out"), "--db", str(db)])
    result = json.loads((root / "out" / "result.json").read_text())
    return db, list_contests(str(db))["contest"][0], result


@pytest.fixture
def contest_env(monkeypatch: pytest.MonkeyPatch, contest):
    monkeypatch.setenv("AGENTQMIX_DB", str(contest[0]))
    monkeypatch.setenv("AGENTQMIX_LAB_DEMO", "0")
    return contest


def _board(at) -> dict[str, dict]:
    table = _table(at, "policy", "reward", "Q-Mix − it: reward")
    return {row["policy"]: row for _, row in table.iterrows()}


def test_the_leaderboard_has_intervals_and_follows_the_protocol(contest_env) -> None:
    _, contest_id, result = contest_env
    at = _open("views/methods.py", contest=contest_id, protocol="graph", tasks="0,5")
    assert "Protocol **`graph`**" in at.info[0].value
    graph = _board(at)
    assert set(graph) == {"qmix", "gdesigner", "fixed:single", "fixed:full", "fixed:random"}
    assert graph["qmix"]["seeds"] == 2 and graph["fixed:full"]["seeds"] == 1
    # The mean is the contest's own figure; the interval brackets it.
    stored = result["protocols"]["graph"]["policies"]["gdesigner"]["reward"]
    mean, lo, hi = (float(x) for x in graph["gdesigner"]["reward"].replace("[", "").replace(
        ",", "").replace("]", "").split())  # fmt: skip
    assert mean == pytest.approx(stored, abs=5e-4) and lo <= mean <= hi
    assert graph["gdesigner"]["Q-Mix − it: reward"].startswith(("+", "-"))
    assert graph["qmix"]["Q-Mix − it: reward"] == "—"
    # One round-0 graph per contestant and chosen task, at the linked tasks.
    keys = {c.key for c in at.get("plotly_chart")}
    assert {f"methods_graph_{m}_{t}" for m in ("qmix", "gdesigner") for t in (0, 5)} <= keys
    assert at.multiselect(key="methods_tasks").value == [0, 5]

    at.radio(key="methods_protocol").set_value("tools").run()
    assert not at.exception and "Protocol **`tools`**" in at.info[0].value
    tools = _board(at)
    assert set(tools) == set(graph) and tools["qmix"]["reward"] != graph["qmix"]["reward"]
    assert at.query_params["protocol"] in ("tools", ["tools"])
    headers = [h.value for h in at.subheader]
    assert all("protocol `tools`" in h for h in headers), headers


def test_a_bad_link_and_the_by_domain_bars(contest_env) -> None:
    _, contest_id, _ = contest_env
    at = _open("views/methods.py", contest=contest_id, protocol="nope", by="domain", all="true")
    assert any("protocol=nope" in w.value for w in at.warning)
    assert "Protocol **`graph`**" in at.info[0].value  # the default, and it says so
    keys = {c.key for c in at.get("plotly_chart")}
    assert {"methods_by_subset", "methods_margins"} <= keys


def test_no_contest_says_which_command_to_run(lab_env) -> None:
    at = _open("views/methods.py", contest="nope", tasks="1,2", metric="nan")
    assert len(at.info) == 1 and "agentqmix bench methods" in at.info[0].value
    assert not at.dataframe
    said = " ".join(w.value for w in at.warning)  # a link's values are named, not dropped
    assert all(f"{p}=" in said for p in ("contest", "tasks", "metric")), said
