"""Run diff: two runs (or two policies of one run) task by task — which answers went from
right to wrong and back, and what each change cost in tokens and reward.

Each side is :func:`core.store.queries.task_outcomes` of one run and policy. Tasks played by
both sides are compared; a task played several times on a side counts by its accuracy there
(``2/3``), so a change is "regressed" when B answered it right less often than A, "fixed"
when more often. Pure functions of DataFrames: the page only renders them.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

REGRESSED = "right → wrong"
FIXED = "wrong → right"
SAME = "unchanged"
CHANGES = (REGRESSED, FIXED, SAME)
"""How a task's answer moved from side A to side B, as the table names it."""


@dataclass(frozen=True)
class DiffSummary:
    """Counts over the tasks both sides played, and the tasks only one side played."""

    shared: int
    regressed: int
    fixed: int
    unchanged: int
    only_a: int
    only_b: int
    mean_token_delta: float
    mean_reward_delta: float


def _tally(n_correct: int, episodes: int) -> str:
    return ("right" if n_correct else "wrong") if episodes == 1 else f"{n_correct}/{episodes} right"


def task_diff(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """The tasks both sides played, regressions first, then fixes, then the rest.

    Columns: ``task_id, benchmark, question, ground_truth, change, a, b`` (``right`` /
    ``wrong``, or ``k/n right``), ``answer_a, answer_b``, ``tokens_a, tokens_b,
    token_delta`` (B − A), ``reward_a, reward_b, reward_delta``, ``episode_a, episode_b``
    (the first episode of each side on the task).
    """
    keep = ["task_id", "episodes", "n_correct", "accuracy", "mean_tokens", "mean_reward",
            "episode", "team_answer"]  # fmt: skip
    both = a[keep + ["benchmark", "question", "ground_truth"]].merge(
        b[keep], on="task_id", suffixes=("_a", "_b")
    )
    change = [
        REGRESSED if bb < aa else FIXED if bb > aa else SAME
        for aa, bb in zip(both["accuracy_a"], both["accuracy_b"], strict=True)
    ]
    out = pd.DataFrame(
        {
            "task_id": both["task_id"],
            "benchmark": both["benchmark"],
            "question": both["question"],
            "ground_truth": both["ground_truth"],
            "change": change,
            "a": [
                _tally(int(k), int(n))
                for k, n in zip(both["n_correct_a"], both["episodes_a"], strict=True)
            ],
            "b": [
                _tally(int(k), int(n))
                for k, n in zip(both["n_correct_b"], both["episodes_b"], strict=True)
            ],
            "answer_a": both["team_answer_a"],
            "answer_b": both["team_answer_b"],
            "tokens_a": both["mean_tokens_a"],
            "tokens_b": both["mean_tokens_b"],
            "token_delta": both["mean_tokens_b"] - both["mean_tokens_a"],
            "reward_a": both["mean_reward_a"],
            "reward_b": both["mean_reward_b"],
            "reward_delta": both["mean_reward_b"] - both["mean_reward_a"],
            "episode_a": both["episode_a"].astype(int),
            "episode_b": both["episode_b"].astype(int),
        }
    )
    order = out["change"].map({c: k for k, c in enumerate(CHANGES)})
    return (
        out.assign(_order=order)
        .sort_values(["_order", "reward_delta", "task_id"])
        .drop(columns="_order")
        .reset_index(drop=True)
    )


def summary(a: pd.DataFrame, b: pd.DataFrame, diff: pd.DataFrame) -> DiffSummary:
    """How many shared tasks regressed, were fixed or stayed, and the mean deltas."""
    counts = diff["change"].value_counts()
    shared = set(diff["task_id"])
    return DiffSummary(
        shared=len(diff),
        regressed=int(counts.get(REGRESSED, 0)),
        fixed=int(counts.get(FIXED, 0)),
        unchanged=int(counts.get(SAME, 0)),
        only_a=len(set(a["task_id"]) - shared),
        only_b=len(set(b["task_id"]) - shared),
        mean_token_delta=float(diff["token_delta"].mean()) if len(diff) else float("nan"),
        mean_reward_delta=float(diff["reward_delta"].mean()) if len(diff) else float("nan"),
    )
