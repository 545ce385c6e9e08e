"""The *Sim vs real* tables of ``agentqmix study transfer`` runs, as the Compare page shows
them: per policy real vs predicted reward, the ranking agreement of the fixed topologies,
and the learned policies' paired differences.

A study is logged as a run of kind ``study`` (no episodes of its own); its config holds
the result (:func:`core.experiment.study.run_study`) and the ids of the runs it played.
These helpers turn it into captions and plain DataFrames.
"""

from __future__ import annotations

from typing import Any

import pandas as pd


def _ci(d: dict[str, float], fmt: str) -> str:
    return f"{d['mean']:{fmt}} ({d['lo']:{fmt}}, {d['hi']:{fmt}})"


def policy_frame(result: dict[str, Any]) -> pd.DataFrame:
    """One row per policy: real reward, accuracy and tokens, and each simulator's prediction
    of its reward (each with its 95 % interval as text)."""
    rows = []
    for r in result.get("policies", []):
        rows.append(
            {
                "policy": r["policy"],
                "family": r["family"],
                "real reward": _ci(r["reward"], ".3f"),
                "accuracy": _ci(r["correct"], ".2f"),
                "prompt tokens": _ci(r["prompt"], ".0f"),
                "completion tokens": _ci(r["completion"], ".0f"),
                "predicted (stock)": _ci(r["predicted_stock"], ".3f"),
                "predicted (calibrated)": _ci(r["predicted_calibrated"], ".3f"),
            }
        )
    return pd.DataFrame(rows)


def ranking_frame(result: dict[str, Any]) -> pd.DataFrame:
    """Kendall τ between each simulator's ranking of the fixed topologies and the real one."""
    return pd.DataFrame(
        [
            {
                "simulator": name,
                "Kendall tau": f"{r['tau']:+.2f}",
                "95 % interval": f"({r['lo']:+.2f}, {r['hi']:+.2f})",
                "topologies": r["policies"],
            }
            for name, r in result.get("ranking", {}).items()
        ]  # fmt: skip
    )


def differences_frame(result: dict[str, Any]) -> pd.DataFrame:
    """Each learned policy minus another, paired by task, and McNemar's exact test."""
    rows = []
    for d in result.get("differences", []):
        m = d["mcnemar"]
        rows.append(
            {
                "a − b": f"{d['a']} − {d['b']}",
                "reward": _ci(d["reward"], "+.3f"),
                "accuracy": _ci(d["correct"], "+.2f"),
                "prompt tokens": _ci(d["prompt"], "+.0f"),
                "completion tokens": _ci(d["completion"], "+.0f"),
                "McNemar (a only / b only, p)": f"{m['a_only']} / {m['b_only']}, p = {m['p']:.3f}",
            }
        )
    return pd.DataFrame(rows)


def caption(result: dict[str, Any]) -> str:
    """What the study played, in one paragraph."""
    c = result.get("config", {})
    return (
        f"{result.get('tasks')} held-out real tasks of {c.get('benchmark')} (stream "
        f"{c.get('stream')}), every policy on the same tasks and seeds; learned policies "
        f"trained on {c.get('train_episodes')} simulated episodes of the stock preset "
        f"({c.get('base')}) and of the calibrated society. Intervals: "
        f"{result.get('interval', '95 % bootstrap over tasks')}."
    )


def label(row: pd.Series) -> str:
    """A study run as a picker shows it."""
    return f"{row['model']} · {row['benchmark']} · {row['id']}"
