"""The "simulated vs real" tables of ``agentqmix calibrate`` runs, as the Compare page shows them.

A calibration is logged as a run of kind ``calibrate`` (no episodes); its config holds the
report (:meth:`core.experiment.calibrate.CalibrationResult.report`). These helpers turn it
into captions and plain DataFrames; :mod:`lab.data` caches the reads.
"""

from __future__ import annotations

from typing import Any

import pandas as pd


def _ci(t: list[float], fmt: str) -> str:
    return f"{t[0]:{fmt}} ({t[1]:{fmt}}, {t[2]:{fmt}})"


def check_frame(report: dict[str, Any], which: str) -> pd.DataFrame:
    """``which`` = ``by_topology`` or ``by_action``: one row per group, each figure with its
    95 % interval as text, the error (simulated - real) and the base preset's error."""
    rows = []
    for r in report.get("check", {}).get(which, []):
        rows.append(
            {
                "policy" if which == "by_topology" else "action": r["group"],
                "n": r["n"],
                "tasks": r["tasks"],
                "real accuracy": _ci(r["real_acc"], ".2f"),
                "simulated accuracy": _ci(r["sim_acc"], ".2f"),
                "error": _ci(r["err_acc"], "+.2f"),
                "base preset's error": f"{r['stock_err_acc'][0]:+.2f}",
                "real tokens": _ci(r["real_tok"], ".0f"),
                "simulated tokens": _ci(r["sim_tok"], ".0f"),
                "token error": _ci(r["err_tok"], "+.0f"),
                "base preset's token error": f"{r['stock_err_tok'][0]:+.0f}",
            }
        )
    return pd.DataFrame(rows)


def caption(report: dict[str, Any]) -> str:
    """How the check was made, in one paragraph."""
    s = report.get("split", {})
    kept = len(report.get("fit", {}).get("stock", {}))
    return (
        f"Fitted on {s.get('fit_episodes')} real episodes of {s.get('fit_tasks')} tasks; checked "
        f"on {s.get('check_episodes')} episodes of {s.get('check_tasks')} **other** tasks (split "
        f"by task hash, {s.get('check_fraction', 0):.0%} held out), each replayed "
        f"{s.get('draws')}x in the fitted society (base: {report.get('base')}). Intervals: 95 % "
        f"bootstrap over tasks; error = simulated − real. {kept} parameters or families kept the "
        "base preset's value (no data informs them): see the society file."
    )


def label(row: pd.Series) -> str:
    """A calibration run as a picker shows it."""
    return f"{row['model']} · {row['id']}"
