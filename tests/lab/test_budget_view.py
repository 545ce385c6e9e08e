"""The Runs page and the Replay page's run header show a budgeted run's spend against its
budget (issue 32); runs without a budget show nothing of it."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from core.store.synthetic import synthetic_episode
from core.store.writer import RunLogger
from tests.lab.conftest import ROOT


def _open(page: str) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.switch_page(page)
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def test_runs_and_replay_show_spend_against_budget(own_db) -> None:
    episode = synthetic_episode(7)
    spent = sum(c.prompt_tokens + c.completion_tokens for c in episode.calls)
    config = {"budget": {"tokens": 50_000, "calls": None}}
    with RunLogger(own_db, "eval", config, backend="openai", model="m", policy="full") as log:
        log.log_episodes([episode])
        run_id = log.run_id
    at = _open("views/runs.py")
    table = next(f.value for f in at.dataframe if "budget" in f.value.columns)
    shown = dict(zip(table["id"], table["budget"], strict=True))
    assert shown[run_id] == f"{spent:,}/50,000 tokens"
    assert sum(isinstance(v, str) for v in shown.values()) == 1  # the seeded runs had none

    at = _open("views/replay.py")
    at.selectbox(key="replay_run").set_value(run_id).run()
    assert not at.exception
    assert any(f"spent {spent:,}/50,000 tokens of its budget" in c.value for c in at.caption)
