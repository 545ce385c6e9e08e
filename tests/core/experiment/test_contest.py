"""The methods contest (core/experiment/contest.py) with tiny settings: tuning reads only the
tuning seed and stream, the plan resumes from its trial files, the intervals include the
seeds' spread, and a bad plan is one sentence."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from core.errors import UserError
from core.experiment.contest import Contest, ContestConfig, paired_bootstrap

TINY = ContestConfig(
    benchmark="math",
    episodes=32,
    tune_episodes=8,
    seeds=(1, 2),
    eval_episodes=12,
    protocols=("graph",),
    methods=("qmix", "gptswarm"),
    grid_size=2,
    n_envs=8,
    bootstrap=100,
)


def test_tuning_never_reads_the_evaluation_stream(tmp_path: Path) -> None:
    """Poison the evaluation side (another stream, another size): tuning chooses the same,
    from the same figures; every tuning trial ran on the tuning seed and stream."""
    first = Contest(TINY, tmp_path / "a").tune()
    poisoned = replace(TINY, eval_stream=987_654, eval_episodes=3)
    second = Contest(poisoned, tmp_path / "b").tune()
    assert first == second
    for path in (tmp_path / "a" / "trials").glob("*.json"):
        trial = json.loads(path.read_text())["trial"]
        assert (trial["phase"], trial["seed"], trial["stream"]) == ("tune", 100, 300)
    assert len(first["graph"]["qmix"]["tuning"]) == len(first["graph"]["gptswarm"]["tuning"]) == 2


def test_the_contest_resumes_and_reports_intervals(tmp_path: Path) -> None:
    ran: list[str] = []
    result = Contest(TINY, tmp_path, progress=ran.append).result()
    assert len(ran) == 2 * 2 + 2 * 2  # two configurations and two seeds, per method
    part = result["protocols"]["graph"]
    assert part["policies"]["qmix"]["seeds"] == 2 and part["episodes"] == 12
    assert part["policies"]["qmix"]["graph"]["verifying_agents"] == 0.0  # graph-only
    margin = part["qmix_minus"]["gptswarm"]["all"]["reward"]
    assert margin["lo"] <= margin["mean"] <= margin["hi"]
    assert any(k.startswith("domain=") for k in part["qmix_minus"]["gptswarm"])
    assert any(k.startswith("difficulty=") for k in part["qmix_minus"]["gptswarm"])
    assert "fixed:full" in part["policies"]
    again: list[str] = []
    assert Contest(TINY, tmp_path, progress=again.append).result()["tuning"] == result["tuning"]
    assert again == []  # every trial was read back, none run again
    with pytest.raises(UserError, match="other settings"):
        Contest(replace(TINY, episodes=64), tmp_path)


def test_the_interval_includes_the_seeds_spread() -> None:
    rng = np.random.default_rng(0)
    episodes = rng.normal(0, 1, 200)
    same_seeds = np.stack([episodes, episodes, episodes])
    spread = same_seeds + np.array([[-0.5], [0.0], [0.5]])  # seeds disagree by a lot
    zero = np.zeros((3, 200))
    narrow = paired_bootstrap(same_seeds, zero, 500, np.random.default_rng(1))
    wide = paired_bootstrap(spread, zero, 500, np.random.default_rng(1))
    assert wide["hi"] - wide["lo"] > 1.5 * (narrow["hi"] - narrow["lo"])
    none = paired_bootstrap(zero, zero, 100, np.random.default_rng(1))
    assert none == {"mean": 0.0, "lo": 0.0, "hi": 0.0}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"eval_stream": 300}, "must differ"),
        ({"seeds": (100, 1)}, "is the tuning seed"),
        ({"methods": ("qmix", "maddpg")}, "is not one of"),
    ],
)
def test_a_bad_plan_is_one_sentence(tmp_path: Path, changes: dict, message: str) -> None:
    with pytest.raises(UserError, match=message):
        Contest(replace(TINY, **changes), tmp_path)


def test_ablations_can_be_added_to_a_finished_contest(tmp_path: Path) -> None:
    plan = replace(TINY, methods=("agentprune",), seeds=(1,), grid_size=1)
    Contest(plan, tmp_path).result()
    ran: list[str] = []
    result = Contest(replace(plan, ablations=True), tmp_path, progress=ran.append).result()
    assert all(key.startswith("ablation-graph-agentprune") for key in ran) and len(ran) == 2
    policies = result["protocols"]["graph"]["policies"]
    assert {"agentprune[rank_weight=0.02]", "agentprune[prune_steps=1,prune_ratio=0.5]"} <= set(
        policies
    )
