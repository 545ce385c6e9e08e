"""Policies side by side: what each one is (family, method, the token weight it learned at,
its knob) and the statistics of a point in a comparison (95 % intervals, the front).

Every run that plays learned policies stores their :class:`PolicyInfo` as
``config["policies"] = {label: info}`` (compare and robustness runs; eval runs one), so the
lab can colour a chart by family and method and label a point with its knob.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from core.records import EpisodeRecord
from core.team.options import TeamOptions

Z95 = 1.959963984540054
"""The standard normal's 97.5% quantile: two-sided 95% intervals."""


@dataclass
class PolicyInfo:
    """What a policy in a comparison is."""

    label: str
    """The name its episodes carry (``episodes.policy``); unique within a run."""
    family: str
    """``learned`` or ``fixed``."""
    method: str
    """``qmix``, a learned-topology method (``gptswarm``, ...) or the fixed topology's name."""
    token_weight: float | None = None
    """w_tok of the reward it was trained at (None for a fixed topology)."""
    knob: dict[str, float] = field(default_factory=dict)
    """Its method's knob and value, e.g. ``{"prune_ratio": 0.5}``."""
    checkpoint: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"policy": self.label} | {k: v for k, v in asdict(self).items() if k != "label"}


def describe(policy: Any) -> PolicyInfo:
    """A policy's :class:`PolicyInfo`: the one it carries (learned policies loaded from a
    checkpoint), else a fixed topology's."""
    info = getattr(policy, "info", None)
    if isinstance(info, PolicyInfo):
        return PolicyInfo(**{**asdict(info), "label": policy.name})
    return PolicyInfo(policy.name, "fixed", policy.name)


def baseline_policy(checkpoint: Path, opts: TeamOptions) -> Any:
    """The decoded graphs of a learned-topology checkpoint, checked against the team."""
    from core.baselines.checkpoint import load_method
    from core.baselines.policy import GraphPolicy
    from core.baselines.registry import check_protocol

    loaded = load_method(checkpoint, expect=team_shape(opts))
    method = loaded.method
    check_protocol(method.config, opts.actions)
    policy = GraphPolicy(method, explore=False, generator=_eval_generator(opts))
    knob = {method.knob: method.knob_value()} if method.knob else {}
    policy.info = PolicyInfo(
        method.name, "learned", method.name, loaded.token_weight, knob, str(checkpoint)
    )
    return policy


def _eval_generator(opts: TeamOptions) -> Any:
    """Graphs a method samples when evaluated come from a generator seeded by the stream, so
    one evaluation of a ``sample``-decoding checkpoint is reproducible."""
    import torch

    return torch.Generator().manual_seed(opts.seed * 7919 + 20)


def team_shape(opts: TeamOptions) -> Any:
    """The :class:`~core.baselines.method.TeamShape` of ``opts``' team."""
    from core.baselines.method import TeamShape
    from core.team.env import TeamEnv
    from core.team.observations import task_feature_width

    env = TeamEnv(opts, "eval")
    try:
        width = task_feature_width(env.obs_dim, env.n_agents, env.max_steps)
        return TeamShape(env.n_agents, env.max_steps, width, tuple(opts.roles))
    finally:
        env.close()


def unique_labels(policies: list[Any]) -> list[Any]:
    """Give learned policies that would share a label one that says what differs: the method
    with its token weight (and knob), then ``#k`` for exact repeats."""
    names = Counter(p.name for p in policies)
    for p in policies:
        if names[p.name] > 1:
            info = describe(p)
            p.name = " ".join(
                [info.method]
                + ([f"w={info.token_weight:g}"] if info.token_weight is not None else [])
                + [f"{k}={v:g}" for k, v in info.knob.items()]
            )
    seen: Counter[str] = Counter()
    names = Counter(p.name for p in policies)
    for p in policies:
        if names[p.name] > 1:
            seen[p.name] += 1
            p.name = f"{p.name} #{seen[p.name]}"
    return policies


# --------------------------------------------------------------------------- statistics


def wilson_interval(p: float, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a proportion ``p`` observed on ``n`` trials (mean scores
    that are fractions are treated as the share of successes)."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def mean_interval(values: Sequence[float], z: float = Z95) -> tuple[float, float] | None:
    """``mean ± z·sd/√n`` (sample sd); None with fewer than two values."""
    if len(values) < 2:
        return None
    x = np.asarray(values, dtype=float)
    half = z * float(x.std(ddof=1)) / math.sqrt(len(x))
    return float(x.mean()) - half, float(x.mean()) + half


def point_stats(records: Sequence[EpisodeRecord], rewards: Sequence[float] | None = None) -> dict:
    """n, accuracy, mean tokens and mean reward of held-out episodes, each with its interval.

    ``rewards`` replaces the episodes' own rewards (a fixed topology re-scored at a weight).
    """
    n = len(records)
    scores = [r.score for r in records]
    tokens = [float(r.tokens) for r in records]
    rewards = list(rewards) if rewards is not None else [r.reward for r in records]
    accuracy = float(np.mean(scores))
    return {
        "n": n,
        "accuracy": accuracy,
        "accuracy_ci": list(wilson_interval(accuracy, n)),
        "mean_tokens": float(np.mean(tokens)),
        "mean_tokens_ci": _listed(mean_interval(tokens)),
        "mean_reward": float(np.mean(rewards)),
        "mean_reward_ci": _listed(mean_interval(rewards)),
    }


def _listed(ci: tuple[float, float] | None) -> list[float] | None:
    return list(ci) if ci is not None else None


def pareto_front(points: Sequence[dict]) -> list[dict]:
    """The points no other point dominates (accuracy >= and mean tokens <=, one strictly),
    cheapest first."""

    def dominates(a: dict, b: dict) -> bool:
        no_worse = a["accuracy"] >= b["accuracy"] and a["mean_tokens"] <= b["mean_tokens"]
        better = a["accuracy"] > b["accuracy"] or a["mean_tokens"] < b["mean_tokens"]
        return no_worse and better

    front = [p for p in points if not any(dominates(q, p) for q in points)]
    return sorted(front, key=lambda p: (p["mean_tokens"], -p["accuracy"]))


def mark_front(rows: list[dict]) -> None:
    """Set ``row["front"]``: whether the row is on the accuracy/token front of ``rows``."""
    front = {id(p) for p in pareto_front(rows)}
    for row in rows:
        row["front"] = id(row) in front


def paired_difference(a: Sequence[float], b: Sequence[float]) -> dict[str, float]:
    """Mean of ``a − b`` over the same episodes and its standard error."""
    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    se = float(d.std(ddof=1) / math.sqrt(len(d))) if len(d) > 1 else float("nan")
    return {"mean": float(d.mean()), "se": se}


def mcnemar(a: Sequence[bool], b: Sequence[bool]) -> dict[str, float]:
    """McNemar's exact test of two policies' correctness on the same episodes: ``a_only``
    (a right, b wrong) and ``b_only`` discordant pairs and the two-sided p-value of the
    binomial test that both are equally likely (1 when no pair is discordant)."""
    x, y = np.asarray(a, dtype=bool), np.asarray(b, dtype=bool)
    a_only, b_only = int((x & ~y).sum()), int((~x & y).sum())
    n = a_only + b_only
    tail = sum(math.comb(n, k) for k in range(min(a_only, b_only) + 1)) / 2.0**n
    return {"a_only": a_only, "b_only": b_only, "p": min(1.0, 2.0 * tail)}
