"""Headline figures of team episodes: accuracy, tokens, reward, actions per round."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from core.actions import ACTION_NAMES
from core.records import EpisodeRecord


def action_counts(records: Sequence[EpisodeRecord]) -> list[dict[str, int]]:
    """Per round, how often each action was taken by an agent that acted."""
    n_rounds = max((len(r.rounds) for r in records), default=0)
    counts = [dict.fromkeys(ACTION_NAMES, 0) for _ in range(n_rounds)]
    for rec in records:
        for rnd in rec.rounds:
            for step in rnd.steps:
                if step.alive and step.fault != "inactive":
                    counts[rnd.round][ACTION_NAMES[step.action]] += 1
    return counts


def summarize_records(records: Sequence[EpisodeRecord]) -> dict[str, Any]:
    """Accuracy, mean tokens, mean reward, call counts, action counts per round and how often
    the decision agent was passed through."""
    calls = [c for rec in records for c in rec.calls]
    return {
        "episodes": len(records),
        "calls": len(calls),
        "failed_calls": sum(c.error is not None for c in calls),
        "accuracy": float(np.mean([r.score for r in records])) if records else 0.0,
        "mean_tokens": float(np.mean([r.tokens for r in records])) if records else 0.0,
        "mean_reward": float(np.mean([r.reward for r in records])) if records else 0.0,
        "action_counts_per_round": action_counts(records),
        "decisions_passed_through": passed_through(records),
    }


def passed_through(records: Sequence[EpisodeRecord]) -> dict[str, int]:
    """How often the decision agent made no call, by reason (``EpisodeRecord.pass_through``:
    ``single`` answer, or ``unanimous`` under ``--pass-through unanimous``)."""
    counts = {"single": 0, "unanimous": 0}
    for rec in records:
        if rec.pass_through is not None:
            counts[rec.pass_through] += 1
    return counts
