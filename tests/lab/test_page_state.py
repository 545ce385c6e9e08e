"""The state a page shows: what its URL brings, what its widgets hold, what it says about both
(issue 21's bugs, each reproduced here first, AppTest on a real seeded store)."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from core.store.queries import list_runs
from core.store.synthetic import synthetic_episode
from core.store.writer import RunLogger
from lab import ctde, data
from tests.lab.test_pages import APP, AppTest, _chart, _open


def _said(at, *needles: str) -> bool:
    """Whether a warning, error or info on the page contains every needle."""
    texts = [m.value for kind in ("warning", "error", "info") for m in getattr(at, kind)]
    return any(all(n in t for n in needles) for t in texts)


def _visit(page: str, query: dict[str, str]) -> AppTest:
    """:func:`_open` for any query (a parameter may be called ``page``)."""
    at = AppTest.from_file(APP, default_timeout=60)
    for name, value in query.items():
        at.query_params[name] = value
    at.switch_page(page)
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def _param(at, name: str) -> str | None:
    value = at.query_params.get(name)
    return value[0] if isinstance(value, list) else value


# ------------------------------------------------------------------ 1. a sweep half written


def test_compare_survives_a_sweep_whose_rows_are_half_written(own_db):
    # The fixed topologies' task finishes first: the sweep has runs but no learned trial
    # yet (its token-weight list is NULL), and a trial's training run has no eval run.
    tag = {"sweep": {"id": "sweep-20260101-000000-half", "token_weight": None, "seed": None}}
    with RunLogger(own_db, "eval", {**tag, "team": {}}, policy="full", benchmark="mixed") as log:
        log.log_episodes(synthetic_episode(k, policy="full") for k in range(4))
    at = _open("views/compare.py")
    assert at.selectbox(key="compare_sweep").value == "sweep-20260101-000000-half"
    names = [t["name"] for t in _chart(at, "compare_sweep_chart")["data"]]
    assert any("full" in n or "fixed" in n for n in names)
    trial = {"sweep": {"id": "sweep-20260101-000000-half", "token_weight": 0.3, "seed": 0}}
    with RunLogger(own_db, "train", {**trial, "team": {}}, policy="qmix", benchmark="mixed"):
        pass  # started, nothing logged yet
    at = _open("views/compare.py")
    assert at.selectbox(key="compare_sweep").value == "sweep-20260101-000000-half"


# ------------------------------------------------------------------ 2. every parameter checked

BAD_LINKS = [
    ("views/ctde.py", {"mixer": "garbage"}),
    ("views/ctde.py", {"state": "nan"}),
    ("views/train.py", {"smoothing": "5"}),
    ("views/train.py", {"smoothing": "nan"}),
    ("views/train.py", {"smoothing": "-1"}),
    ("views/train.py", {"runs": "no-such-run"}),
    ("views/replay.py", {"round": "-3"}),
    ("views/replay.py", {"round": "99"}),
    ("views/replay.py", {"page": str(10**30)}),
    ("views/replay.py", {"episode": "abc"}),
    ("views/replay.py", {"episode": "100000"}),
    ("views/replay.py", {"result": "maybe"}),
    ("views/replay.py", {"sort": "sideways"}),
    ("views/failure_lab.py", {"from": "99"}),
    ("views/failure_lab.py", {"from": "nan"}),
    ("views/failure_lab.py", {"agents": "7,x"}),
    ("views/failure_lab.py", {"mode": "meltdown"}),
    ("views/runs.py", {"kind": "bogus"}),
    ("views/runs.py", {"status": "-1"}),
    ("views/compare.py", {"healthy": "maybe"}),
    ("views/compare.py", {"point": "x:y"}),
    ("views/compare.py", {"sweep": "inf"}),
]


@pytest.mark.parametrize(("page", "query"), BAD_LINKS, ids=lambda v: str(v))
def test_a_bad_link_value_is_replaced_by_the_default_and_named(lab_env, page, query):
    at = _visit(page, query)
    ((name, raw),) = query.items()
    assert _said(at, f"{name}="), f"{page}?{name}={raw}: no message names the parameter"


def test_a_link_to_a_run_that_does_not_exist_says_so_and_offers_the_runs(lab_env):
    db, ids = lab_env
    at = _open("views/replay.py", run="eval-19990101-000000-dead")
    assert _said(at, "eval-19990101-000000-dead", "does not exist")
    listed = [m.value for m in at.markdown if ids["qmix"] in m.value]
    assert listed, "the runs that do exist are offered"
    # Replay's default run: the learned policy's held-out episodes, not the newest run.
    assert at.selectbox(key="replay_run").value == ids["qmix"] != list_runs(str(db)).id[0]


def test_replay_opens_on_a_learned_policys_evaluation_not_a_robustness_sweep():
    runs = pd.DataFrame(
        {
            "id": ["rob", "fixed", "learned", "train", "empty"],
            "kind": ["compare", "eval", "eval", "train", "eval"],
            "policy": ["robustness", "star", "qmix", "qmix", "qmix"],
            "episodes": [300, 50, 50, 400, 0],
        }
    )  # newest first, as the runs table lists them
    assert data.replay_first(runs) == "learned"
    assert data.replay_first(runs[runs.policy != "qmix"]) == "fixed"
    assert data.replay_first(runs[runs.id.isin(["rob", "train"])]) == "rob"
    assert data.replay_first(runs[runs.id == "empty"]) is None


# ------------------------------------------------------------------ 3. Replay's own link


def test_replay_reads_its_own_result_parameter(lab_env):
    _, ids = lab_env
    at = _open("views/replay.py", run=ids["qmix"], result="wrong")
    assert at.selectbox(key="replay_correct").value is False
    assert not _said(at, "result=")


def test_an_episode_link_keeps_the_filters_search_and_sort(lab_env):
    db, ids = lab_env
    wrong = data.episodes.__wrapped__(str(db), data.Listing(ids["qmix"], correct=False), limit=50)
    target = wrong.iloc[-1]
    link = {
        "run": ids["qmix"], "result": "wrong", "q": "task-", "sort": "tokens, most first",
        "episode": str(int(target["episode"])),
    }  # fmt: skip
    at = _open("views/replay.py", **link)
    assert at.selectbox(key="replay_correct").value is False
    assert at.text_input(key="replay_search").value == "task-"
    assert at.selectbox(key="replay_order").value == "tokens, most first"
    assert at.selectbox(key="replay_episode").value == int(target["episode"])
    assert all(" · wrong · " in o for o in at.selectbox(key="replay_episode").options)
    for name in ("result", "q", "sort", "episode"):
        assert _param(at, name) == link[name], f"{name} left the URL"


def test_a_shared_replay_link_reopens_the_same_view(lab_env):
    _, ids = lab_env
    at = _open("views/replay.py", run=ids["chain"])
    at.selectbox(key="replay_correct").set_value(True).run()
    at.selectbox(key="replay_order").set_value("reward, worst first").run()
    options = at.selectbox(key="replay_episode").options
    at.selectbox(key="replay_episode").set_value(int(options[-1].split(" · ")[0][1:])).run()
    at.slider(key="replay_round").set_value(2).run()
    shared = {k: _param(at, k) for k in at.query_params}
    again = _visit("views/replay.py", shared)
    for key in ("replay_run", "replay_correct", "replay_order", "replay_episode"):
        assert again.selectbox(key=key).value == at.selectbox(key=key).value, key
    assert again.slider(key="replay_round").value == at.slider(key="replay_round").value
    assert not again.warning


# ------------------------------------------------------------------ 4. search and the picker


def test_a_search_never_leaves_the_picker_outside_its_results(lab_env):
    db, ids = lab_env
    eps = data.episodes.__wrapped__(str(db), data.Listing(ids["qmix"]), limit=50)
    outside, task = int(eps.iloc[7]["episode"]), str(eps.iloc[2]["task_id"])
    at = _open("views/replay.py", run=ids["qmix"], episode=str(outside), q=task)
    picked = at.selectbox(key="replay_episode")
    assert picked.value != outside and all(f" · {task} · " in o for o in picked.options)
    assert _said(at, "episode=")  # the link's episode is not among the search results
    at.text_input(key="replay_search").input("no-such-task-anywhere").run()
    assert _said(at, "No episode")
    assert _param(at, "q") == "no-such-task-anywhere"
    assert _param(at, "episode") is None


# ------------------------------------------------------------------ 5. Train follows its start


def test_train_shows_the_run_it_starts_and_not_the_previous_runs_settings(own_db):
    at = _open("views/train.py")
    old = list_runs(own_db, kind="train").iloc[0]["id"]
    at.number_input(key="train_episodes").set_value(6)
    at.number_input(key="train_agents").set_value(3)
    next(b for b in at.button if b.label == "Start training").click().run()
    assert not at.exception
    # Until the new run logs, the page says so and shows the settings it was started with.
    assert not any(old in e.label for e in at.expander), "the previous run's settings shown"
    assert _said(at, "Starting")
    started = [json.loads(j.value) for j in at.json]
    assert [j["episodes"] for j in started] == [6]


# ------------------------------------------------------------------ 6. rounds count from 1


def test_rounds_are_counted_from_one_everywhere(lab_env):
    _, ids = lab_env
    at = _open("views/replay.py", run=ids["qmix"], episode="0")
    assert any("Round 1 of 3" in m.value for m in at.markdown)
    assert at.slider(key="replay_round").value == 1 and at.slider(key="replay_round").min == 1
    assert _param(at, "round") == "1"
    tokens = _chart(at, "replay_tokens")
    assert tokens["data"][0]["x"][:3] == ["round 1", "round 2", "round 3"]
    at = _open("views/replay.py", run=ids["qmix"], episode="0", round="3")
    assert any("Round 3 of 3" in m.value for m in at.markdown)
    at = _open("views/compare.py")
    by_round = _chart(at, "compare_by_round")
    assert by_round["data"][0]["x"][0] == "round 1"
    at = _open("views/failure_lab.py", run=ids["full"], episode="2", **{"from": "2"})
    assert at.number_input(key="fail_from_round").value == 2
    assert at.number_input(key="fail_from_round").min == 1


# ------------------------------------------------------------------ 7. CTDE explained


def test_ctde_counts_joint_actions_of_a_crashed_team(lab_env):
    # The count is said under the table (in its header it was cut off at 1280 px).
    at = _open("views/ctde.py", state="multiple choice, one agent crashed")
    assert any("all 36 joint actions" in c.value for c in at.caption)
    at = _open("views/ctde.py")
    assert any("all 216 joint actions" in c.value for c in at.caption)
    assert max(len(c) for c in at.dataframe[0].value.columns) <= 28


@pytest.mark.parametrize("state", list(ctde.STATES))
def test_ctde_numbers_sit_on_the_scale_the_page_states(lab_env, state):
    at = _open("views/ctde.py", state=state)
    lo, hi = ctde.REWARD_RANGE
    note = next(i.value for i in at.info if "What the numbers mean" in i.value)
    assert f"{lo:g}" in note and f"{hi:g}" in note
    for metric in at.metric:
        assert lo - 1e-9 <= float(metric.value) <= hi + 1e-9, (metric.label, metric.value)
    sliders = [s for s in at.slider if s.key.startswith("ctde_q_")]
    assert all(s.min >= lo - 1e-9 and s.max <= hi + 1e-9 for s in sliders)


def test_ctde_credit_is_not_called_a_share_unless_it_adds_up(lab_env):
    at = _open("views/ctde.py")
    credit = _chart(at, "ctde_credit")["data"][0]
    shares = [float(t.split("(")[1].rstrip("%) ")) for t in credit["text"]]
    assert math.isclose(sum(shares), 100.0, abs_tol=1.5)  # each rounded to 1 %
    assert not any("share of the blame" in c.value for c in at.caption)
