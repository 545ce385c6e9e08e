"""The tables of a transfer study's result (:func:`core.experiment.study.run_study`), as
rows of text: the CLI prints them (``agentqmix study transfer``) and the lab's *Sim vs real*
section shows them (``lab/simreal.py``), so both read the same columns."""

from __future__ import annotations

from typing import Any


def interval(d: dict[str, float], fmt: str) -> str:
    """``mean [lo, hi]`` of one ``{"mean", "lo", "hi"}`` figure."""
    return f"{d['mean']:{fmt}} [{d['lo']:{fmt}}, {d['hi']:{fmt}}]"


def policy_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per policy: real reward, accuracy and tokens, and each simulator's prediction
    of its reward (each with its 95 % interval)."""
    return [
        {
            "policy": r["policy"],
            "family": r.get("family", ""),
            "real reward": interval(r["reward"], ".3f"),
            "accuracy": interval(r["correct"], ".2f"),
            "prompt tokens": interval(r["prompt"], ".0f"),
            "completion tokens": interval(r["completion"], ".0f"),
            "predicted (stock)": interval(r["predicted_stock"], ".3f"),
            "predicted (calibrated)": interval(r["predicted_calibrated"], ".3f"),
        }
        for r in result.get("policies", [])
    ]


def ranking_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Kendall τ between each simulator's ranking of the fixed topologies and the real one."""
    return [
        {
            "simulator": name,
            "Kendall tau": f"{r['tau']:+.2f}",
            "95 % interval": f"[{r['lo']:+.2f}, {r['hi']:+.2f}]",
            "topologies": r["policies"],
        }
        for name, r in result.get("ranking", {}).items()
    ]


def difference_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Each learned policy minus another, paired by task, and McNemar's exact test."""
    return [
        {
            "a − b": f"{d['a']} − {d['b']}",
            "reward": interval(d["reward"], "+.3f"),
            "accuracy": interval(d["correct"], "+.2f"),
            "prompt tokens": interval(d["prompt"], "+.0f"),
            "completion tokens": interval(d["completion"], "+.0f"),
            "McNemar (a only / b only, p)": (
                f"{d['mcnemar']['a_only']} / {d['mcnemar']['b_only']}, p = {d['mcnemar']['p']:.3f}"
            ),
        }
        for d in result.get("differences", [])
    ]
