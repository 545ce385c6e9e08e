"""A methods contest as the Methods view shows it (views/methods.py): the leaderboard with
intervals, the per-difficulty and per-domain bars, the round-0 graph each checkpoint designs
for a task, the tuning record. Plain functions over what :mod:`lab.data` reads (no
Streamlit).

Every interval is the contest's own hierarchical bootstrap (:func:`core.experiment.contest.
paired_bootstrap`; :func:`~core.experiment.contest.bootstrap_mean` for one policy): the
policy's training seeds resampled, then the held-out episodes (shared by all policies, so a
difference stays paired by task) — seed-to-seed variation is inside every interval. A fixed
topology has one deterministic run: its intervals carry episode noise only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from core.actions import ACTION_NAMES, Action
from core.experiment.contest import (
    CONTESTANTS,
    bootstrap_mean,
    paired_bootstrap,
    relative_change,
)
from core.records import EpisodeRecord
from lab import figures
from lab.palette import policy_color

PROTOCOL_TEXT = {
    "graph": "graph-only — no agent may verify with a tool (Agent Q-Mix restricted to the "
    "actions a graph can express; the methods as published)",
    "tools": "with tools — all six actions; each graph method also learns a verify bit per "
    "agent and round (our extension)",
}
"""What each protocol is, in the words the view always shows beside its figures."""

RESAMPLES = 500
"""Bootstrap resamples of the lab's intervals (the contest's own table: ``--bootstrap``)."""

METRICS = {
    "reward": "reward",
    "score": "accuracy",
    "tokens": "tokens",
    "prompt": "prompt tokens",
    "completion": "completion tokens",
}
"""Per-episode columns (as the store's contest episodes name them) and their names here."""

MARGIN = "qmix"
"""Every margin is Agent Q-Mix minus the other policy."""


@dataclass
class Standings:
    """One protocol of one contest: each policy's per-seed, per-episode figures."""

    policies: pd.DataFrame
    """One row per policy (contest label): ``label``, ``method``, ``phase``, ``kind``
    (``contestant``, ``fixed``, ``ablation``), ``seeds`` (its training seeds, a tuple),
    ``run_ids`` (in seed order)."""
    arrays: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    """``arrays[label][metric]``: ``(S, E)`` — per training seed, per held-out episode."""
    tasks: pd.DataFrame = field(default_factory=pd.DataFrame)
    """Per held-out episode (the same task for every policy): ``episode``, ``task_id``,
    ``domain``, ``difficulty``."""


def kind_of(label: str, phase: str) -> str:
    if label.startswith("fixed:"):
        return "fixed"
    return "ablation" if phase == "ablation" else "contestant"


def _order(label: str, kind: str) -> tuple[int, int, str]:
    rank = CONTESTANTS.index(label) if label in CONTESTANTS else len(CONTESTANTS)
    return ({"contestant": 0, "fixed": 1, "ablation": 2}[kind], rank, label)


def standings(runs: pd.DataFrame, episodes: pd.DataFrame) -> Standings:
    """:class:`Standings` of one protocol's ``runs`` (:func:`lab.data.contest_runs`) from
    their ``episodes`` (:func:`lab.data.contest_episodes`); only the held-out episodes
    every run has are compared (all of them, for finished runs)."""
    common = set.intersection(*(set(g["episode"]) for _, g in episodes.groupby("run_id")))
    episodes = episodes[episodes["episode"].isin(common)].sort_values(["run_id", "episode"])
    rows, arrays = [], {}
    for label, group in runs.sort_values("seed").groupby("label", sort=False):
        first = group.iloc[0]
        kind = kind_of(label, first["phase"])
        ids = tuple(group["run_id"])
        per_run = [episodes[episodes["run_id"] == r] for r in ids]
        arrays[label] = {m: np.stack([e[m].to_numpy(float) for e in per_run]) for m in METRICS}
        rows.append(
            {"label": label, "method": first["method"], "phase": first["phase"], "kind": kind,
             "seeds": tuple(int(s) for s in group["seed"]), "run_ids": ids}
        )  # fmt: skip
    policies = pd.DataFrame(rows)
    policies = policies.iloc[
        sorted(range(len(rows)), key=lambda i: _order(rows[i]["label"], rows[i]["kind"]))
    ].reset_index(drop=True)
    one = episodes[episodes["run_id"] == episodes["run_id"].iloc[0]]
    tasks = one[["episode", "task_id", "domain", "difficulty"]].reset_index(drop=True)
    return Standings(policies, arrays, tasks)


def _interval(d: dict[str, float]) -> tuple[float, float, float]:
    return d["mean"], d["lo"], d["hi"]


def leaderboard(s: Standings, resamples: int = RESAMPLES) -> pd.DataFrame:
    """One row per policy: ``label``, ``kind``, ``method``, ``n_seeds``, each metric of
    :data:`METRICS` with ``_lo``/``_hi`` (its 95 % interval), and Agent Q-Mix minus it in
    reward, accuracy and tokens (``qmix_minus_reward`` ... with ``_lo``/``_hi``; NaN for
    Agent Q-Mix itself and when the contest has no Agent Q-Mix)."""
    rng = np.random.default_rng(0)
    rows = []
    for _, p in s.policies.iterrows():
        a = s.arrays[p["label"]]
        row: dict[str, Any] = {
            "label": p["label"], "kind": p["kind"], "method": p["method"],
            "n_seeds": len(p["seeds"]),
        }  # fmt: skip
        for m in METRICS:
            row[m], row[f"{m}_lo"], row[f"{m}_hi"] = _interval(bootstrap_mean(a[m], resamples, rng))
        for m in ("reward", "score", "tokens"):
            d = (np.nan, np.nan, np.nan)
            if MARGIN in s.arrays and p["label"] != MARGIN:
                d = _interval(paired_bootstrap(s.arrays[MARGIN][m], a[m], resamples, rng))
            row[f"qmix_minus_{m}"], row[f"qmix_minus_{m}_lo"], row[f"qmix_minus_{m}_hi"] = d
        rows.append(row)
    return pd.DataFrame(rows)


def ci_text(mean: float, lo: float, hi: float, fmt: str = ".3f", signed: bool = False) -> str:
    """``0.873 [0.851, 0.890]`` (``+`` signs for a margin); ``—`` when there is none."""
    if mean != mean:
        return "—"
    f = ("+" if signed else "") + fmt
    return f"{mean:{f}} [{lo:{f}}, {hi:{f}}]"


def leaderboard_table(board: pd.DataFrame) -> pd.DataFrame:
    """The leaderboard as the page shows it: each figure with its interval as text."""
    fmt = {"reward": ".3f", "score": ".1%", "tokens": ",.0f", "prompt": ",.0f",
           "completion": ",.0f"}  # fmt: skip

    def cis(prefix: str, m: str, signed: bool = False) -> list[str]:
        return [
            ci_text(r[f"{prefix}{m}"], r[f"{prefix}{m}_lo"], r[f"{prefix}{m}_hi"], fmt[m], signed)
            for _, r in board.iterrows()
        ]

    out = pd.DataFrame({"policy": board["label"], "kind": board["kind"], "seeds": board["n_seeds"]})
    for m, name in METRICS.items():
        out[name] = cis("", m)
    for m in ("reward", "score", "tokens"):
        out[f"Q-Mix − it: {METRICS[m]}"] = cis("qmix_minus_", m, signed=True)
    return out


def dropout_claim(s: Standings, resamples: int = RESAMPLES) -> str | None:
    """AgentDropout's tokens against AgentPrune's (its paper: −21.6 % prompt, −18.4 %
    completion) with the contest's intervals, in words; None without both."""
    if not {"agentdropout", "agentprune"} <= set(s.arrays):
        return None
    rng = np.random.default_rng(0)
    parts = []
    for part in ("prompt", "completion"):
        d = relative_change(s.arrays["agentdropout"][part], s.arrays["agentprune"][part],
                            resamples, rng)  # fmt: skip
        parts.append(f"{part} {d['mean']:+.1%} [{d['lo']:+.1%}, {d['hi']:+.1%}]")
    return (
        "AgentDropout against AgentPrune (its paper: −21.6 % prompt, −18.4 % completion "
        "tokens): " + "; ".join(parts) + "."
    )


# --------------------------------------------------------------------------- subsets


def subsets(s: Standings, by: str) -> dict[str, np.ndarray]:
    """``{value: mask over the held-out episodes}`` for ``by`` = ``difficulty`` or ``domain``."""
    column = s.tasks[by]
    return {str(v): (column == v).to_numpy() for v in sorted(column.unique())}


def by_subset(
    s: Standings, by: str, metric: str, labels: list[str], resamples: int = RESAMPLES
) -> pd.DataFrame:
    """Each of ``labels``' ``metric`` per difficulty (or domain) with its interval:
    ``label``, ``method``, ``subset``, ``episodes``, ``mean``, ``lo``, ``hi``."""
    rng = np.random.default_rng(0)
    methods = dict(zip(s.policies["label"], s.policies["method"], strict=True))
    rows = []
    for value, mask in subsets(s, by).items():
        for label in labels:
            d = bootstrap_mean(s.arrays[label][metric][:, mask], resamples, rng)
            rows.append({"label": label, "method": methods[label], "subset": value,
                         "episodes": int(mask.sum()), **d})  # fmt: skip
    return pd.DataFrame(rows)


def margins_by_subset(
    s: Standings, by: str, metric: str, labels: list[str], resamples: int = RESAMPLES
) -> pd.DataFrame:
    """Agent Q-Mix minus each of ``labels`` in ``metric`` per difficulty (or domain), paired
    by task: the same columns as :func:`by_subset`; empty without Agent Q-Mix."""
    if MARGIN not in s.arrays:
        return pd.DataFrame()
    rng = np.random.default_rng(0)
    methods = dict(zip(s.policies["label"], s.policies["method"], strict=True))
    rows = []
    for value, mask in subsets(s, by).items():
        for label in (x for x in labels if x != MARGIN):
            d = paired_bootstrap(
                s.arrays[MARGIN][metric][:, mask], s.arrays[label][metric][:, mask], resamples, rng
            )
            rows.append({"label": label, "method": methods[label], "subset": value,
                         "episodes": int(mask.sum()), **d})  # fmt: skip
    return pd.DataFrame(rows)


def color_of(label: str, method: str) -> str:
    """A contestant and a fixed reference in their palette colour; an ablation its own."""
    if label.startswith("fixed:"):
        return policy_color(label.removeprefix("fixed:"))
    return policy_color(method if label == method else label)


def subset_figure(df: pd.DataFrame, by: str, title: str, height: int = 380) -> go.Figure | None:
    """Grouped bars: one group per difficulty (or domain), one bar per policy, with the 95 %
    interval as an error bar (``df``: :func:`by_subset` or :func:`margins_by_subset`);
    None when there is nothing to draw."""
    if df.empty:
        return None
    fig = go.Figure()
    for label, part in df.groupby("label", sort=False):
        fig.add_bar(
            x=part["subset"],
            y=part["mean"],
            name=label,
            marker_color=color_of(label, part["method"].iloc[0]),
            error_y=dict(
                type="data",
                symmetric=False,
                array=(part["hi"] - part["mean"]).tolist(),
                arrayminus=(part["mean"] - part["lo"]).tolist(),
            ),
            customdata=np.stack([part["lo"], part["hi"], part["episodes"]], axis=1),
            hovertemplate=f"{label}<br>{by} %{{x}}: %{{y:.3f}} "
            "[%{customdata[0]:.3f}, %{customdata[1]:.3f}]<br>%{customdata[2]} episodes"
            "<extra></extra>",
        )
    fig.update_layout(barmode="group", xaxis_title=by, yaxis_title=title)
    if (df["lo"] < 0).any():
        fig.add_hline(y=0, line_color="#888888", line_width=1)
    return figures._layout(fig, height)


# --------------------------------------------------------------------------- graphs


def design_counts(plans: pd.DataFrame, s: Standings, labels: list[str]) -> pd.DataFrame:
    """How many distinct round-0 plans (edges and actions) each checkpoint designed over
    the held-out tasks: ``policy``, ``training seed``, ``distinct graphs``, ``most common``
    (its share of tasks). One graph for every task = a fixed topology, learned."""
    rows = []
    for _, p in s.policies[s.policies["label"].isin(labels)].iterrows():
        for seed, run_id in zip(p["seeds"], p["run_ids"], strict=True):
            mine = plans.loc[plans["run_id"] == run_id, "plan"]
            if mine.empty:
                continue
            rows.append({"policy": p["label"], "training seed": seed,
                         "distinct graphs": int(mine.nunique()),
                         "most common": float(mine.value_counts().iloc[0] / len(mine))})  # fmt: skip
    return pd.DataFrame(rows)


def default_tasks(tasks: pd.DataFrame, n: int = 3) -> list[int]:
    """``n`` held-out episodes to draw, from the easiest difficulty to the hardest (the
    first episode of each of ``n`` difficulties spread over the range)."""
    levels = sorted(tasks["difficulty"].unique())
    picks = [levels[round(i * (len(levels) - 1) / max(n - 1, 1))] for i in range(n)]
    chosen: list[int] = []
    for level in picks:
        left = tasks[(tasks["difficulty"] == level) & ~tasks["episode"].isin(chosen)]
        if not left.empty:
            chosen.append(int(left["episode"].iloc[0]))
    return chosen


def task_label(tasks: pd.DataFrame, episode: int) -> str:
    row = tasks[tasks["episode"] == episode].iloc[0]
    return f"#{episode} · {row['domain']} · difficulty {row['difficulty']} · {row['task_id']}"


def round0_figure(record: EpisodeRecord, height: int = 260) -> go.Figure:
    """The round-0 graph of ``record`` in Replay's drawing, small, legend off (each node's
    hover names its action; :func:`round0_text` says it in words)."""
    fig = figures.communication_graph(record, 0, height=height)
    fig.update_layout(showlegend=False, margin=dict(l=0, r=0, t=10, b=0))
    return fig


def round0_text(record: EpisodeRecord) -> str:
    """The round-0 plan in words: its edges and who verifies (``reads: 0→1, 0→2 ·
    verifies: 3``)."""
    rnd = record.rounds[0]
    edges = ", ".join(f"{s}→{d}" for s, d in sorted(rnd.edges)) or "none"
    verify = [s.agent for s in rnd.steps if s.action == int(Action.EXECUTE_VERIFY)]
    text = f"reads: {edges}"
    if verify:
        text += " · verifies: " + ", ".join(map(str, verify))
    others = sorted({ACTION_NAMES[s.action] for s in rnd.steps} - {"execute_verify"})
    return text + (f" · actions: {', '.join(others)}" if others else "")


# --------------------------------------------------------------------------- tuning


def tuning_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Each contestant's tuning in this protocol: ``method``, ``configuration``, ``tuning
    reward``, ``tuning accuracy``, ``tuning tokens``, ``chosen``."""
    rows = []
    seen = set()
    for _, r in runs.iterrows():
        tuning = r["contest"].get("tuning")
        if not tuning or r["method"] in seen or r["phase"] != "final":
            continue
        seen.add(r["method"])
        for k, (values, figs) in enumerate(zip(tuning["grid"], tuning["tuning"], strict=True)):
            rows.append({
                "method": r["method"],
                "configuration": ", ".join(f"{a}={b}" for a, b in values.items()) or "defaults",
                "tuning reward": figs["reward"], "tuning accuracy": figs["score"],
                "tuning tokens": figs["tokens"], "chosen": k == tuning["chosen"],
            })  # fmt: skip
    return pd.DataFrame(rows)
