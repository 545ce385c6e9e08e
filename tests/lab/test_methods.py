"""lab/methods.py on hand-built standings: the leaderboard's figures and intervals, the
subsets, the tasks drawn by default and the count of designed graphs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lab import methods


def _standings(spread: float = 0.0) -> methods.Standings:
    """Agent Q-Mix (two seeds, ``spread`` apart) and a fixed topology on six tasks."""
    base = np.array([1.0, 0.0, 1.0, 1.0, 0.0, 1.0])
    qmix = np.stack([base + spread, base - spread])
    fixed = np.full((1, 6), 0.5)
    policies = pd.DataFrame(
        [
            {"label": "qmix", "method": "qmix", "phase": "final", "kind": "contestant",
             "seeds": (1, 2), "run_ids": ("a", "b")},
            {"label": "fixed:full", "method": "full", "phase": "final", "kind": "fixed",
             "seeds": (-1,), "run_ids": ("c",)},
        ]
    )  # fmt: skip
    arrays = {
        "qmix": {m: qmix for m in methods.METRICS},
        "fixed:full": {m: fixed for m in methods.METRICS},
    }
    tasks = pd.DataFrame(
        {"episode": range(6), "task_id": [f"t{k}" for k in range(6)],
         "domain": ["math", "code"] * 3, "difficulty": [1, 1, 3, 3, 5, 5]}
    )  # fmt: skip
    return methods.Standings(policies, arrays, tasks)


def test_the_leaderboard_means_margins_and_their_intervals() -> None:
    board = methods.leaderboard(_standings(), resamples=200).set_index("label")
    assert board.loc["qmix", "reward"] == pytest.approx(4 / 6)
    assert board.loc["fixed:full", "qmix_minus_reward"] == pytest.approx(4 / 6 - 0.5)
    assert np.isnan(board.loc["qmix", "qmix_minus_reward"])
    lo, hi = board.loc["qmix", "reward_lo"], board.loc["qmix", "reward_hi"]
    assert lo < 4 / 6 < hi
    # Seeds that disagree widen the interval (seed-to-seed variation is inside it).
    wide = methods.leaderboard(_standings(spread=0.4), resamples=200).set_index("label")
    assert wide.loc["qmix", "reward_hi"] - wide.loc["qmix", "reward_lo"] > hi - lo
    text = methods.leaderboard_table(board.reset_index())
    assert text.loc[1, "Q-Mix − it: reward"].startswith("+0.167 [")
    assert text.loc[0, "Q-Mix − it: reward"] == "—"


def test_subsets_and_the_tasks_drawn() -> None:
    s = _standings()
    by = methods.by_subset(s, "difficulty", "reward", ["qmix", "fixed:full"], resamples=100)
    qmix = by[by["label"] == "qmix"].set_index("subset")["mean"]
    assert qmix.to_dict() == {"1": 0.5, "3": 1.0, "5": 0.5}
    margins = methods.margins_by_subset(s, "domain", "reward", ["qmix", "fixed:full"], 100)
    assert set(margins["label"]) == {"fixed:full"} and set(margins["subset"]) == {"code", "math"}
    assert methods.default_tasks(s.tasks) == [0, 2, 4]  # easiest, middle, hardest
    assert methods.dropout_claim(s) is None  # neither AgentDropout nor AgentPrune here
    s.arrays["agentdropout"] = {"prompt": np.full((2, 6), 80.0), "completion": np.ones((2, 6))}
    s.arrays["agentprune"] = {"prompt": np.full((1, 6), 100.0), "completion": np.ones((1, 6))}
    claim = methods.dropout_claim(s, resamples=100)
    assert "prompt -20.0% [-20.0%, -20.0%]" in claim and "completion +0.0%" in claim


def test_design_counts() -> None:
    plans = pd.DataFrame(
        {"run_id": ["a"] * 4 + ["b"] * 4, "episode": list(range(4)) * 2,
         "plan": ["x", "x", "y", "z", "x", "x", "x", "x"]}
    )  # fmt: skip
    counts = methods.design_counts(plans, _standings(), ["qmix"]).set_index("training seed")
    assert counts.loc[1, "distinct graphs"] == 3 and counts.loc[1, "most common"] == 0.5
    assert counts.loc[2, "distinct graphs"] == 1 and counts.loc[2, "most common"] == 1.0
