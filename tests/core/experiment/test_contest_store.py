"""The methods contest in the episode store (core/experiment/contest_store.py), on a real
DuckDB file with a tiny contest: every evaluation is logged once, with its tuning record;
a contest resumed against another store adds its stored trials by replaying their
checkpoints, which gives back exactly the stored episodes."""

from __future__ import annotations

import json
from pathlib import Path

from core.experiment import contest_store as cs
from core.experiment.contest import Contest, ContestConfig

TINY = ContestConfig(
    benchmark="math",
    episodes=16,
    tune_episodes=4,
    seeds=(1,),
    eval_episodes=6,
    protocols=("graph",),
    methods=("gdesigner",),
    grid_size=1,
    n_envs=4,
    bootstrap=100,
)


def test_evaluations_go_to_the_store_once_and_resume_into_another(tmp_path: Path) -> None:
    folder, first, second = tmp_path / "contest", tmp_path / "a.duckdb", tmp_path / "b.duckdb"
    Contest(TINY, folder, db=first).result()
    contests = cs.list_contests(str(first))
    assert len(contests) == 1 and list(contests["protocols"][0]) == ["graph"]
    runs = cs.contest_runs(str(first), contests["contest"][0])
    assert sorted(runs["label"]) == ["fixed:full", "fixed:random", "fixed:single", "gdesigner"]
    learned = runs[runs["label"] == "gdesigner"].iloc[0]
    assert learned["seed"] == 1 and learned["policy"] == "gdesigner"
    tuning = learned["contest"]["tuning"]
    assert tuning["chosen"] == 0 and len(tuning["tuning"]) == 1  # the tuning record
    assert learned["contest"]["settings"]["eval_stream"] == TINY.eval_stream
    episodes = cs.contest_episodes(str(first), tuple(runs["run_id"]))
    assert (episodes.groupby("run_id").size() == TINY.eval_episodes).all()

    ran: list[str] = []
    Contest(TINY, folder, db=first, progress=ran.append).result()
    assert ran == [] and len(cs.contest_runs(str(first), contests["contest"][0])) == 4

    Contest(TINY, folder, db=second, progress=ran.append).result()
    assert ran == ["final-graph-gdesigner-c0-s1 (to the store)"]  # replayed, not retrained
    again = cs.contest_runs(str(second), contests["contest"][0])
    replayed = again.loc[again["label"] == "gdesigner", "run_id"].iloc[0]
    scores = cs.contest_episodes(str(second), (replayed,))["score"].tolist()
    stored = json.loads((folder / "trials" / "final-graph-gdesigner-c0-s1.json").read_text())
    assert scores == stored["episodes"]["score"]
    plans = cs.first_round_plans(str(second), (replayed,))
    assert len(plans) == TINY.eval_episodes and plans["plan"].str.contains(r"\|").all()
