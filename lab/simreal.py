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

from core.experiment.study_tables import difference_rows, policy_rows, ranking_rows


def policy_frame(result: dict[str, Any]) -> pd.DataFrame:
    """One row per policy: real reward, accuracy and tokens, and each simulator's prediction
    of its reward (each with its 95 % interval as text)."""
    return pd.DataFrame(policy_rows(result))


def ranking_frame(result: dict[str, Any]) -> pd.DataFrame:
    """Kendall τ between each simulator's ranking of the fixed topologies and the real one."""
    return pd.DataFrame(ranking_rows(result))


def differences_frame(result: dict[str, Any]) -> pd.DataFrame:
    """Each learned policy minus another, paired by task, and McNemar's exact test."""
    return pd.DataFrame(difference_rows(result))


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
