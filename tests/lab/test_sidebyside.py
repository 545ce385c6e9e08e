"""Side by side: two policies on one task, rounds stepped together (AppTest on real DuckDB
stores: the lab's seeded store, and a pair of runs logged here with known outcomes)."""

from __future__ import annotations

import json
from urllib.parse import parse_qsl, urlsplit

import pytest

from core.store.queries import load_episode
from core.store.writer import RunLogger
from lab import diff, sidebyside
from tests.lab.test_diff import _episode
from tests.lab.test_page_state import _param, _visit
from tests.lab.test_pages import _open, _table

PAGE = "views/sidebyside.py"


def test_side_b_is_the_first_other_policy_that_played_the_task_asking_only_what_it_needs():
    asked = []

    def policies(run: str) -> list[str]:
        asked.append(run)
        return sidebyside.learned_first({"r1": ["chain", "qmix"], "r2": ["star"]}[run])

    assert sidebyside.pick_partner(["r1", "r2"], ("r1", "qmix"), policies) == ("r1", "chain")
    asked.clear()
    # A task only r2 played: r1's policies are never asked for.
    assert sidebyside.pick_partner(["r1", "r2"], ("r1", "qmix"), policies, {("r2", "star")}) == (
        "r2", "star"
    )  # fmt: skip
    assert asked == ["r2"]
    assert sidebyside.pick_partner(["r1"], ("r1", "qmix"), policies, {("r1", "qmix")}) is None
    assert sidebyside.unplayed((True, False), ("A", "B"), healthy=False) == "was not played by B"
    assert sidebyside.unplayed((False, False), ("A", "B"), healthy=False) == (
        "was played by neither A nor B"
    )  # fmt: skip
    assert sidebyside.code_cell("def f():\n    return 1\n") == "code, 2 lines"


def _round_shown(at, side: str) -> int:
    """The round (counted from 1) of the graph a side draws."""
    for el in at.get("plotly_chart"):
        if el.key == f"sbs_graph_{side}":
            return json.loads(el.proto.spec)["layout"]["meta"]["round"] + 1
    raise KeyError(side)


def test_replays_link_presets_a_one_control_steps_both_sides_and_a_copied_link_reopens_it(
    lab_env,
):
    db, ids = lab_env
    # What Replay's "Compare with another run" links to (tests/lab/test_pages.py checks it).
    record = load_episode(db, ids["qmix"], 3).record
    query = sidebyside.link_query((ids["qmix"], "qmix"), record.task_id, 3, not record.failures)
    at = _visit(PAGE, query)
    # Side A is the replayed episode; side B another run that played its task.
    assert at.selectbox(key="sbs_run_a").value == ids["qmix"]
    assert at.selectbox(key="sbs_task").value == record.task_id
    assert at.selectbox(key="sbs_run_b").value != ids["qmix"]
    assert (_round_shown(at, "a"), _round_shown(at, "b")) == (1, 1)

    at.button(key="sbs_next").click().run()
    assert (_round_shown(at, "a"), _round_shown(at, "b")) == (2, 2)
    headings = [m.value for m in at.markdown if m.value.startswith("##### Round 2 of 3")]
    assert len(headings) == 2, headings

    shared = {k: _param(at, k) for k in at.query_params}
    assert {k: shared[k] for k in ("a", "task", "ea", "round")} == {
        "a": ids["qmix"], "task": record.task_id, "ea": "3", "round": "2"
    }  # fmt: skip
    again = _visit(PAGE, shared)
    for key in ("sbs_run_a", "sbs_policy_a", "sbs_run_b", "sbs_policy_b", "sbs_task"):
        assert again.selectbox(key=key).value == at.selectbox(key=key).value, key
    assert again.slider(key="sbs_round").value == 2
    assert (_round_shown(again, "a"), _round_shown(again, "b")) == (2, 2)
    assert not again.warning


@pytest.fixture(scope="module")
def pair_db(tmp_path_factory) -> tuple:
    """Two runs on one benchmark: t0 A right and B wrong (B's episode of it has two rounds),
    t1 A wrong and B right, ``only-a`` played by A alone."""
    db = tmp_path_factory.mktemp("sidebyside") / "pair.duckdb"
    runs = []
    for policy, outcomes in (("star", (True, False)), ("qmix", (False, True))):
        with RunLogger(db, "eval", {"team": {}}, policy=policy, benchmark="math") as log:
            for k, (task, right) in enumerate(zip(("t0", "t1"), outcomes, strict=True)):
                rec = _episode(k, task, right, policy)
                if policy == "qmix" and task == "t0":
                    rec.rounds = rec.rounds[:2]
                log.log_episode(rec)
            if policy == "star":
                log.log_episode(_episode(9, "only-a", True, policy))
            runs.append(log.run_id)
    return db, tuple(runs)


@pytest.fixture
def pair(pair_db, monkeypatch):
    db, runs = pair_db
    monkeypatch.setenv("AGENTQMIX_DB", str(db))
    monkeypatch.setenv("AGENTQMIX_LAB_DEMO", "0")
    return runs


def test_a_task_one_side_never_played_is_refused_and_a_shorter_episode_says_so(pair):
    a, b = pair
    at = _open(PAGE, a=a, b=b, task="only-a", round="3")
    (refused,) = [w.value for w in at.warning]
    assert "task=only-a" in refused and f"was not played by B (run {b}" in refused
    # The first task listed instead (A right, B wrong first), at the linked round: A's
    # episode has a round 3, B's ended after round 2 and says so in its column.
    assert at.selectbox(key="sbs_task").value == "t0"
    assert (_param(at, "task"), _param(at, "round")) == ("t0", "3")
    assert _round_shown(at, "a") == 3
    with pytest.raises(KeyError):
        _round_shown(at, "b")
    assert [i.value for i in at.info] == [sidebyside.ended_note("B", 2, 3)]


def test_a_diff_row_opens_the_pair_side_by_side(pair):
    a, b = pair
    at = _open("views/diff.py", a=a, b=b)
    table = _table(at, "change", "side_by_side").set_index("task_id")
    assert table.loc["t0", "change"] == diff.REGRESSED
    link = table.loc["t0", "side_by_side"]
    assert urlsplit(link).path == "/sidebyside"
    at = _visit(PAGE, dict(parse_qsl(urlsplit(link).query)))
    assert not at.warning, [w.value for w in at.warning]
    assert (at.selectbox(key="sbs_run_a").value, at.selectbox(key="sbs_run_b").value) == (a, b)
    assert (at.selectbox(key="sbs_policy_a").value, at.selectbox(key="sbs_policy_b").value) == (
        "star", "qmix"
    )  # fmt: skip
    assert at.selectbox(key="sbs_task").value == "t0"
    badges = [m.value for m in at.markdown if "-badge[" in m.value]
    assert ["right" in badges[0], "wrong" in badges[1]] == [True, True], badges
