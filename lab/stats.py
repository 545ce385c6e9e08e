"""The few statistics the lab draws: confidence intervals and exponential smoothing.

Plain functions of numbers and pandas objects (no Streamlit), so each is tested against a
hand-computed value.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

Z95 = 1.959963984540054
"""Two-sided 95 % normal quantile."""


def wilson_interval(k: float, n: float, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a proportion ``k / n`` (stays inside [0, 1], sane at 0 and n).

    ``(nan, nan)`` for ``n == 0``.
    """
    if n <= 0:
        return math.nan, math.nan
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def mean_interval(mean: float, std: float, n: float, z: float = Z95) -> tuple[float, float]:
    """Normal-approximation interval of a mean: ``mean ± z · std / √n`` (nan for n < 2)."""
    if n < 2 or std is None or math.isnan(std):
        return math.nan, math.nan
    half = z * std / math.sqrt(n)
    return mean - half, mean + half


def with_intervals(df: pd.DataFrame) -> pd.DataFrame:
    """Add 95 % intervals to an aggregate (columns ``episodes``, ``n_correct``, ``accuracy``,
    ``mean_tokens``, ``std_tokens``, ``mean_reward``, ``std_reward``):
    ``accuracy_lo/hi`` (Wilson), ``tokens_lo/hi`` and ``reward_lo/hi`` (normal SE)."""
    out = df.copy()
    acc = [wilson_interval(k, n) for k, n in zip(out["n_correct"], out["episodes"], strict=True)]
    out["accuracy_lo"] = [a for a, _ in acc]
    out["accuracy_hi"] = [b for _, b in acc]
    for col in ("tokens", "reward"):
        ci = [
            mean_interval(m, s, n)
            for m, s, n in zip(out[f"mean_{col}"], out[f"std_{col}"], out["episodes"], strict=True)
        ]
        out[f"{col}_lo"] = [a for a, _ in ci]
        out[f"{col}_hi"] = [b for _, b in ci]
    return out


def ema(
    values: pd.Series | np.ndarray,
    smoothing: float,
    at: pd.Series | np.ndarray | None = None,
) -> np.ndarray:
    """Exponential moving average with weight ``smoothing`` in [0, 1) on the past, debiased
    (TensorBoard's smoothing): ``0`` returns the values; NaNs are skipped, not propagated.

    ``at``: where each value sits (episode or step numbers, increasing). A value ``d``
    steps after the previous one weighs the past ``smoothing ** d``: a curve thinned to
    one point per k episodes (each the mean of its k) smooths as its every episode did,
    whatever k — without it, smoothing a thinned curve changed its shape as the run grew."""
    if not 0.0 <= smoothing < 1.0:
        raise ValueError(f"smoothing must be in [0, 1), got {smoothing}")
    x = np.asarray(values, dtype=float)
    where = np.arange(len(x), dtype=float) if at is None else np.asarray(at, dtype=float)
    out = np.full_like(x, np.nan)
    acc, weight, previous = 0.0, 0.0, None
    for i, v in enumerate(x):
        if math.isnan(v):
            continue
        steps = 1.0 if at is None or previous is None else max(where[i] - previous, 1.0)
        past = smoothing**steps
        acc = past * acc + (1 - past) * v
        weight = past * weight + (1 - past)
        out[i] = acc / weight
        previous = where[i]
    return out
