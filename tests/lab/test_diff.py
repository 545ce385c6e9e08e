"""Run diff on two stored runs with known flips (a real DuckDB store; AppTest for the page)."""

from __future__ import annotations

import pytest

from core.store.queries import EpisodeFilter, task_outcomes
from core.store.synthetic import synthetic_episode
from core.store.writer import RunLogger
from lab import diff
from tests.lab.test_pages import _open, _table

# task -> (A right?, B right?); t3 is played twice by B (once right, once wrong).
OUTCOMES = {"t0": (True, False), "t1": (False, True), "t2": (True, True), "t4": (False, False)}


def _episode(seed: int, task: str, right: bool, policy: str, failed: bool = False):
    rec = synthetic_episode(seed, policy=policy)
    rec.task_id, rec.question, rec.ground_truth = task, f"question {task}", "7"
    rec.decision.correct, rec.score = right, 1.0 if right else 0.0
    rec.team_answer = "7" if right else "3"
    rec.reward = 1.0 if right else 0.0
    rec.failures = [{"agent": 0, "mode": "crash", "from_round": 1}] if failed else []
    return rec


def _log_pair(db) -> tuple[str, str]:
    with RunLogger(db, "eval", {"team": {}}, policy="star", benchmark="math", seed=0) as log:
        for k, (task, (right, _)) in enumerate(OUTCOMES.items()):
            log.log_episode(_episode(k, task, right, "star"))
        log.log_episode(_episode(50, "only-a", True, "star"))
        a = log.run_id
    with RunLogger(db, "eval", {"team": {}}, policy="qmix", benchmark="math", seed=0) as log:
        for k, (task, (_, right)) in enumerate(OUTCOMES.items()):
            log.log_episode(_episode(10 + k, task, right, "qmix"))
        # A failed-agent episode of t2, wrong: healthy-only leaves it out.
        log.log_episode(_episode(60, "t2", False, "qmix", failed=True))
        b = log.run_id
    return a, b


def test_task_diff_finds_the_known_flips(own_db):
    a_run, b_run = _log_pair(own_db)
    a = task_outcomes(own_db, EpisodeFilter(run_ids=[a_run], with_failures=False))
    b = task_outcomes(own_db, EpisodeFilter(run_ids=[b_run], with_failures=False))
    table = diff.task_diff(a, b)
    changes = dict(zip(table["task_id"], table["change"], strict=True))
    assert changes == {"t0": diff.REGRESSED, "t1": diff.FIXED, "t2": diff.SAME, "t4": diff.SAME}
    assert table["task_id"].iloc[0] == "t0"  # regressions first
    t0 = table.iloc[0]
    assert (t0["a"], t0["b"], t0["answer_a"], t0["answer_b"]) == ("right", "wrong", "7", "3")
    assert t0["reward_delta"] == pytest.approx(-1.0)
    assert t0["token_delta"] == pytest.approx(t0["tokens_b"] - t0["tokens_a"])
    total = diff.summary(a, b, table)
    assert (total.shared, total.regressed, total.fixed, total.only_a, total.only_b) == (
        4, 1, 1, 1, 0
    )  # fmt: skip
    # With the failed episode, t2 on B is right one time in two: a regression.
    b_all = task_outcomes(own_db, EpisodeFilter(run_ids=[b_run]))
    t2 = diff.task_diff(a, b_all).set_index("task_id").loc["t2"]
    assert (t2["change"], t2["b"]) == (diff.REGRESSED, "1/2 right")


def test_diff_page_lists_regressions_and_links_both_replays(own_db):
    a_run, b_run = _log_pair(own_db)
    at = _open("views/diff.py", a=a_run, b=b_run, regressed="true")
    assert not at.warning, [w.value for w in at.warning]
    table = _table(at, "change", "replay_a", "replay_b")
    assert table["task_id"].tolist() == ["t0"]
    assert table["replay_a"].iloc[0] == f"/replay?run={a_run}&episode=0"
    assert table["replay_b"].iloc[0] == f"/replay?run={b_run}&episode=0"
    metrics = {m.label: m.value for m in at.metric}
    assert (metrics["tasks in both"], metrics[diff.REGRESSED], metrics[diff.FIXED]) == (
        "4", "1", "1"
    )  # fmt: skip
    # The view is in the URL: the receiver of the link sees the same thing.
    query = {k: at.query_params[k] for k in ("a", "pa", "b", "pb", "regressed")}
    assert query == {"a": a_run, "pa": "star", "b": b_run, "pb": "qmix", "regressed": "true"}
    at.toggle(key="diff_regressed").set_value(False).run()
    assert len(_table(at, "change", "replay_a")) == 4


def test_diff_page_names_a_bad_link(own_db):
    a_run, _ = _log_pair(own_db)
    at = _open("views/diff.py", a="no-such-run", pa="garbage", regressed="maybe")
    text = " ".join(w.value for w in at.warning)
    assert "no-such-run" in text and "does not exist" in text
    assert "regressed=maybe" in text
