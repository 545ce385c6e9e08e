"""`agentqmix bench time-to-quality` end to end with tiny settings: the timed command is the
user's `agentqmix train`, its policy is copied at fixed update counts on the way and every
copy is evaluated; the same seed gives the same copies however fast the machine runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TRAIN = "--episodes 96 --max-updates 6 --hidden 8 --n-envs 8"


def bench(*flags: str) -> dict:
    cmd = [sys.executable, "-m", "core.cli", "bench", "time-to-quality", "--seeds", "3",
           "--every-updates", "2", "--eval-episodes", "6", "--eval-seed", "7",
           "--thresholds=-1,2", "--json", f"--train={TRAIN}", *flags]  # fmt: skip
    env = {"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO, env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def curve(run: dict) -> list[tuple]:
    """What the seed must fix: each copy's place in the run and its held-out result."""
    keys = ("updates", "episodes", "mean_reward", "accuracy", "mean_tokens")
    return [tuple(c[k] for k in keys) for c in run["copies"]]


@pytest.fixture(scope="module")
def report() -> dict:
    return bench("--log", "both")


def test_each_run_times_the_users_command_and_evaluates_its_copies(report):
    assert report["command"].endswith(TRAIN)
    assert [(r["seed"], r["log"]) for r in report["runs"]] == [(3, True), (3, False)]
    for run in report["runs"]:
        copies = run["copies"]
        walls = [c["wall_s"] for c in copies]
        assert walls == sorted(walls) and walls[-1] == run["command_wall_s"] > 0
        # Copies after updates 2 and 4 (the learner starts once 32 episodes are in: 4
        # updates); the checkpoint holds update 4's weights, so the later moment is kept.
        assert [c["updates"] for c in copies] == [2, 4]
        assert copies[-1]["episodes"] == 96
        assert all(-1.0 <= c["mean_reward"] <= 1.0 for c in copies)
        # Reward is always above -1 and never reaches 2: the first copy, and never.
        first = {k: copies[0][k] for k in ("updates", "episodes", "wall_s")}
        assert {k: run["time_to"]["-1"][k] for k in first} == first
        assert run["holds_from"]["2"] is None and run["time_to"]["2"] is None
        assert run["per_step"]["wall_s_per_update"] > 0
    on = report["summary"]["logging_on"]
    assert on["holds_from_-1_updates"] == [2] and on["holds_from_2_updates"] == [None]
    # Logging changes the seconds, never the run: the same copies with and without it.
    assert curve(report["runs"][0]) == curve(report["runs"][1])


def test_the_same_seed_gives_the_same_copies_on_a_slower_machine(report):
    """A learner slowed by 150 ms an update (the collector then waits for it every
    iteration) learns exactly what the unslowed run learned: the cost to quality is a count
    of updates and episodes, and only the seconds change. Stopped after 2 updates
    (``--stop-after-updates``, for short tuning runs), it is the same run up to there."""
    fast = report["runs"][1]
    slow = bench("--log", "off", "--stall-ms", "150", "--stop-after-updates", "2")["runs"][0]
    assert curve(slow) == curve(fast)[:1]
