"""Intervals and smoothing against values worked out by hand (or by a plain loop)."""

import math

import numpy as np
import pandas as pd
import pytest

from lab.stats import Z95, ema, mean_interval, wilson_interval, with_intervals


def test_wilson_interval_matches_the_textbook():
    # Wilson 95 % for 8 of 10: (0.4902, 0.9433) (Newcombe 1998, table I style check).
    lo, hi = wilson_interval(8, 10)
    assert lo == pytest.approx(0.4902, abs=1e-4) and hi == pytest.approx(0.9433, abs=1e-4)
    # Sane at the edges, where the normal interval collapses to a point.
    lo, hi = wilson_interval(0, 20)
    assert lo == 0.0 and hi == pytest.approx(0.1611, abs=1e-4)
    lo, hi = wilson_interval(20, 20)
    assert hi == 1.0 and lo == pytest.approx(0.8389, abs=1e-4)
    assert all(math.isnan(v) for v in wilson_interval(0, 0))


def test_mean_interval_is_mean_plus_minus_z_se():
    lo, hi = mean_interval(10.0, 2.0, 16)
    assert (lo, hi) == pytest.approx((10 - Z95 * 0.5, 10 + Z95 * 0.5))
    assert all(math.isnan(v) for v in mean_interval(1.0, 0.5, 1))


def test_with_intervals_adds_every_column():
    df = pd.DataFrame({"episodes": [10], "n_correct": [8], "accuracy": [0.8],
                       "mean_tokens": [100.0], "std_tokens": [20.0],
                       "mean_reward": [0.5], "std_reward": [0.1]})  # fmt: skip
    out = with_intervals(df)
    assert out.loc[0, "accuracy_lo"] == pytest.approx(wilson_interval(8, 10)[0])
    assert out.loc[0, "tokens_hi"] == pytest.approx(100 + Z95 * 20 / math.sqrt(10))
    assert out.loc[0, "reward_lo"] == pytest.approx(0.5 - Z95 * 0.1 / math.sqrt(10))


def _ema_by_hand(xs, s):
    out, num, den = [], 0.0, 0.0
    for x in xs:
        num = s * num + (1 - s) * x
        den = s * den + (1 - s)
        out.append(num / den)
    return out


def test_ema_is_the_debiased_exponential_average():
    xs = [4.0, 0.0, 2.0, 10.0, 1.0]
    assert list(ema(xs, 0.0)) == xs
    assert list(ema(xs, 0.7)) == pytest.approx(_ema_by_hand(xs, 0.7))
    # The first value is kept as is (debiased), and a spike is damped.
    smooth = ema(xs, 0.9)
    assert smooth[0] == 4.0 and smooth[3] < 10.0
    with_gap = ema([1.0, np.nan, 3.0], 0.5)
    assert math.isnan(with_gap[1]) and with_gap[2] == pytest.approx(
        _ema_by_hand([1.0, 3.0], 0.5)[1]
    )
    with pytest.raises(ValueError, match="smoothing"):
        ema(xs, 1.0)
