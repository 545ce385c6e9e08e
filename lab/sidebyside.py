"""Two policies, one task, side by side: which runs can stand beside run A, the tasks both
sides played and how each did (:func:`lab.diff.task_diff`, the Run diff's table), the
picker's filter and labels, the view's link, and what a side says at a round its episode
never reached. Plain functions (no Streamlit); ``views/sidebyside.py`` renders them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from urllib.parse import urlencode

import pandas as pd

from core.team.topologies import FIXED_TOPOLOGIES
from lab import diff

SHOWS = {
    "all": ("every shared task", None),
    "a-right": ("A right, B wrong", diff.REGRESSED),
    "b-right": ("A wrong, B right", diff.FIXED),
    "same": ("the same result", diff.SAME),
}
"""The picker's filter: its value in the URL → its label and the change (:mod:`lab.diff`) it
keeps. A task played several times on a side counts by how often it was answered right
there, as in the Run diff ("A right, B wrong": A right more often than B)."""

TRAIN_KIND = "train"


def by_kind(runs: pd.DataFrame) -> list[str]:
    """Run ids, evaluations (and every other kind) before training runs, each group in the
    table's order (newest first): a training run's episodes explore, so it is the last
    thing one means to compare."""
    order = (runs["kind"] == TRAIN_KIND).astype(int)
    return runs.assign(_t=order).sort_values("_t", kind="stable")["id"].tolist()


def learned_first(policies: list[str]) -> list[str]:
    """A run's policies with the learned ones (not a fixed topology) first: side A's default
    in a comparison run is then the policy under study, B a fixed topology beside it."""
    return sorted(policies, key=lambda p: p in FIXED_TOPOLOGIES)


def partner_runs(runs: pd.DataFrame, run_a: str) -> list[str]:
    """The runs that can stand beside ``run_a``: those on its benchmark, itself included
    (two policies of one run), in :func:`by_kind` order."""
    benchmark = runs.loc[runs["id"] == run_a, "benchmark"]
    if benchmark.empty:
        return []
    if pd.isna(benchmark.iloc[0]):  # a run that names no benchmark: those that name none
        return by_kind(runs[runs["benchmark"].isna()])
    return by_kind(runs[runs["benchmark"] == benchmark.iloc[0]])


def pick_partner(
    partners: Iterable[str],
    side_a: tuple[str, str],
    policies: Callable[[str], list[str]],
    players: set[tuple[str, str]] | None = None,
) -> tuple[str, str] | None:
    """Side B's default: the first (run, policy) among ``partners`` (each run's
    ``policies`` in order) that is not side A and, when ``players`` is given (a task is
    asked for), played that task; None when there is none. ``policies`` is asked only for
    the runs it needs (a store may hold hundreds of runs on one benchmark)."""
    played = None if players is None else {run for run, _ in players}
    for run in partners:
        if played is not None and run not in played:
            continue
        for policy in policies(run):
            if (run, policy) != side_a and (players is None or (run, policy) in players):
                return run, policy
    return None


def listed(table: pd.DataFrame, show: str) -> pd.DataFrame:
    """The rows of a :func:`lab.diff.task_diff` table the filter ``show`` keeps."""
    change = SHOWS[show][1]
    return table if change is None else table[table["change"] == change]


def task_labels(table: pd.DataFrame) -> dict[str, str]:
    """``task-3 · A right · B wrong`` (or ``A 2/3 right``) per task of the table."""
    return {
        task: f"{task} · A {a} · B {b}"
        for task, a, b in zip(table["task_id"], table["a"], table["b"], strict=True)
    }


def unplayed(task_played: tuple[bool, bool], sides: tuple[str, str], healthy: bool) -> str:
    """Why a linked task cannot be shown, finishing "The link's ``task=…`` ...": which side
    (named) never played it, in the episodes counted."""
    missing = [s for s, played in zip(sides, task_played, strict=True) if not played]
    counted = " in the healthy episodes (turn off Healthy episodes only)" if healthy else ""
    if len(missing) == 2:
        return f"was played by neither {missing[0]} nor {missing[1]}{counted}"
    return f"was not played by {missing[0]}{counted}"


def code_cell(answer: object) -> str:
    """A code answer as the agent table shows it: how long it is (the code itself is
    shown whole under the table)."""
    text = str(answer)
    if text == "—":
        return text
    lines = len(text.strip().splitlines())
    return f"code, {lines} line{'s' if lines != 1 else ''}"


def ended_note(side: str, n_rounds: int, number: int) -> str | None:
    """What side ``side`` says at round ``number`` when its episode had fewer rounds (None
    when it reached it)."""
    if number <= n_rounds:
        return None
    return (
        f"{side}'s episode ended after round {n_rounds}: it has no round {number}. "
        "Its team answer above is final."
    )


def link(
    a: tuple[str, str],
    b: tuple[str, str],
    task: str,
    healthy: bool = True,
    round_number: int | None = None,
) -> str:
    """``/sidebyside?a=…&pa=…&b=…&pb=…&task=…`` (``&healthy=false``, ``&round=R`` counted
    from 1): opens that pair, run and policy each, on that task."""
    query = {"a": a[0], "pa": a[1], "b": b[0], "pb": b[1], "task": task}
    if not healthy:
        query["healthy"] = "false"
    if round_number is not None:
        query["round"] = str(round_number)
    return "/sidebyside?" + urlencode(query)


def link_query(a: tuple[str, str], task: str, episode: int, healthy: bool) -> dict[str, str]:
    """The query that opens the view with side A preset to this episode (run, policy and
    index) of ``task``; side B is then the first other run or policy that played it."""
    query = {"a": a[0], "pa": a[1], "task": task, "ea": str(episode)}
    if not healthy:
        query["healthy"] = "false"
    return query
