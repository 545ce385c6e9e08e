"""`agentqmix bench baselines` (issue 20) with tiny checkpoints: every learned policy and
fixed topology plays the same held-out episodes, and the paired figures are what they
claim (checked against the per-policy means they pair)."""

from __future__ import annotations

import json

import pytest

from benchmarks import baselines
from core.cli import main

TEAM = ["--benchmark", "math", "--eval-episodes", "0", "--no-log"]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    folder = tmp_path_factory.mktemp("bench")
    qmix, swarm = str(folder / "qmix.pt"), str(folder / "swarm.pt")
    assert main(["train", *TEAM, "--episodes", "8", "--n-envs", "8", "--out", qmix]) == 0
    assert (
        main(
            [
                "train",
                *TEAM,
                "--method",
                "gptswarm",
                "--episodes",
                "32",
                "--n-envs",
                "16",
                "--out",
                swarm,
            ]
        )  # fmt: skip
        == 0
    )
    return [qmix, swarm]


def test_every_policy_on_the_same_episodes_with_paired_differences(checkpoints, capsys):
    args = ["--benchmark", "math", "--episodes", "12", "--eval-seed", "5", "--json"]
    args += ["--untrained", "agentprune"]
    for path in checkpoints:
        args += ["--checkpoint", path]
    baselines.main(args)
    report = json.loads(capsys.readouterr().out)
    policies, paired = report["policies"], report["paired"]
    assert {"qmix", "gptswarm", "agentprune (untrained)", "full", "chain"} <= set(policies)
    assert policies["gptswarm"]["family"] == "learned" and policies["full"]["family"] == "fixed"
    best = report["best_fixed"]
    fixed = [row for row in policies.values() if row["family"] == "fixed"]
    assert policies[best]["mean_reward"] == max(row["mean_reward"] for row in fixed)
    for row in policies.values():
        assert row["n"] == 12
        assert sum(d["episodes"] for d in row["by_difficulty"].values()) == 12
        assert row["easy"]["n"] + row["hard"]["n"] <= 12
    # A paired mean difference is the difference of the means over the same episodes.
    swarm = paired["gptswarm"]
    for key, field in (("reward", "mean_reward"), ("accuracy", "accuracy")):
        gap = policies["qmix"][field] - policies["gptswarm"][field]
        assert swarm["qmix_minus_this"][key]["mean"] == pytest.approx(gap, abs=2e-4)
        to_full = policies["gptswarm"][field] - policies["full"][field]
        assert swarm["vs_full"][key]["mean"] == pytest.approx(to_full, abs=2e-4)
    assert "qmix_minus_this" not in paired["qmix"] and "vs_best_fixed" in paired["qmix"]
    assert swarm["vs_full"]["tokens"]["se"] >= 0


def test_an_unknown_method_is_one_sentence(capsys):
    with pytest.raises(SystemExit) as exit_info:
        baselines.main(["--untrained", "swarm", "--episodes", "1"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "--untrained takes" in err
    assert len(err.strip().splitlines()) == 1
