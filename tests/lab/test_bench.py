"""The lab's performance pieces: thinned curves, paged episode lists, the no-join action
mix, the episode picker's labels, and the lab benchmark itself on a small real store."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from benchmarks.lab import PAGES, LabBenchConfig, run_lab_bench
from core.store import queries as q
from lab import data
from lab.stats import ema


def test_curves_thin_to_a_budget_but_average_over_every_episode(seeded_db):
    db, ids = seeded_db
    full = q.episode_curves(db, ids["train"], window=5)
    thin = q.episode_curves(db, ids["train"], window=5, max_points=4)
    # 12 episodes, budget 4 -> buckets of 3, each at its last episode: 2, 5, 8, 11.
    assert thin["episode"].tolist() == [2, 5, 8, 11]
    buckets = full["episode"] // 3
    means = full.groupby(buckets)[["reward", "correct", "tokens"]].mean().reset_index(drop=True)
    assert np.allclose(thin[["reward", "correct", "tokens"]], means)  # every episode counts
    kept = full.set_index("episode").loc[thin["episode"]].reset_index()
    assert np.allclose(  # the moving averages are the bucket's last, over every episode
        kept[["reward_ma", "accuracy_ma", "tokens_ma"]],
        thin[["reward_ma", "accuracy_ma", "tokens_ma"]],
    )
    metrics = q.training_curves(db, ids["train"], max_points=4)
    assert metrics["step"].tolist() == [2, 5, 8, 11]
    assert np.allclose(
        metrics["loss"],
        [np.mean([1 / (k + 1) for k in b]) for b in ([0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11])],
    )
    assert len(q.training_curves(db, ids["train"])) == 12


def test_a_smoothed_curve_keeps_its_shape_whatever_the_thinning():
    """A run of 8,000 episodes drawn at 8,000, 2,000 or 500 points: the smoothed line is the
    same curve (the EMA weighs the past by the episodes between points); smoothing picks of
    every k-th episode, as before, moved it by 0.12-0.17 as k grew (the "jumps")."""
    rng = np.random.default_rng(0)
    n = 8000
    episode = np.arange(n)
    right = (rng.random(n) < 0.5 + 0.4 * episode / n).astype(float)
    every = ema(right, 0.99)
    for k in (4, 16):
        means = right.reshape(-1, k).mean(axis=1)
        at = episode[k - 1 :: k]
        drawn = ema(means, 0.99, at=at)
        assert np.abs(drawn - every[at])[at > 500].max() < 0.01


def test_episode_list_pages_from_an_index(seeded_db):
    db, ids = seeded_db
    flt = q.EpisodeFilter(run_ids=[ids["full"]], from_episode=7)
    assert q.list_episodes(db, flt, limit=3)["episode"].tolist() == [7, 8, 9]
    assert q.count_episodes(db, flt) == 5


def test_action_mix_by_round_of_a_run_counts_every_live_step(seeded_db):
    db, ids = seeded_db
    df = q.action_distribution(db, "round", q.EpisodeFilter(run_ids=[ids["chain"]]))
    want = Counter(
        (s.round, s.action)
        for k in range(12)
        for rnd in q.load_episode(db, ids["chain"], k).record.rounds
        for s in rnd.steps
        if s.alive
    )
    assert {
        (r, a): c for r, a, c in zip(df["round"], df["action"], df["count"], strict=True)
    } == want
    # The same question through the join (a filter on an episode column) agrees.
    joined = q.action_distribution(
        db, "round", q.EpisodeFilter(run_ids=[ids["chain"]], policy="chain")
    )
    assert joined[["round", "action", "count"]].equals(df[["round", "action", "count"]])


def test_episode_labels_name_each_episode(seeded_db):
    db, ids = seeded_db
    episodes = q.list_episodes(db, q.EpisodeFilter(run_ids=[ids["qmix"]]), limit=5)
    labels = data.episode_labels(episodes)
    assert list(labels) == [0, 1, 2, 3, 4]
    row = episodes.iloc[2]
    assert labels[2].startswith(
        f"#2 · {row['task_id']} · {'right' if row['correct'] else 'wrong'} ·"
    )
    assert (" failed" in labels[2]) == bool(row["n_failed"])


def test_lab_bench_times_every_page_and_the_slider(tmp_path):
    out = run_lab_bench(
        100, db=tmp_path / "bench.duckdb", train_share=0.3, page_repeats=1, slider_moves=3
    )
    assert out["store"]["episodes"] == 100
    assert out["store"]["runs"] == 6 and out["store"]["train_metric_rows"] == 30
    assert set(out["pages"]) == set(PAGES)
    for page in out["pages"].values():
        assert 0 < page["warm_s"]["median"] <= page["warm_s"]["max"]
        assert 0 < page["first_s"]["median"] <= page["first_s"]["max"]
    assert out["replay_slider"]["moves"] == 3 and out["replay_slider"]["ms"]["max"] > 0
    assert isinstance(out["meets_goals"], bool)


def test_bench_config_names_bad_values():
    for bad in (dict(episodes=10), dict(n_rounds=1), dict(train_share=0.9), dict(slider_moves=0)):
        with pytest.raises(ValueError, match=str(next(iter(bad.values())))):
            LabBenchConfig(**bad).validate()


def test_lab_bench_times_the_failure_lab_with_the_pages_functions(tmp_path):
    from benchmarks.lab import time_failure_lab

    out = time_failure_lab(tmp_path, repeats=1, robust_episodes=10)
    assert set(out["side_by_side_s"]) == {"learned", "full"}
    assert all(v["median"] > 0 for v in out["side_by_side_s"].values())
    # 4 policies x 0..2 failed agents x 10 episodes.
    assert out["robustness"]["episodes"] == 4 * 3 * 10
    assert isinstance(out["meets_goals"], bool)
