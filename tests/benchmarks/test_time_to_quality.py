"""`agentqmix bench time-to-quality` end to end with tiny settings: the timed command is the
user's `agentqmix train`, its policy is copied on the way and every copy is evaluated."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_each_run_times_the_users_command_and_evaluates_its_copies():
    cmd = [sys.executable, "-m", "core.cli", "bench", "time-to-quality", "--seeds", "3",
           "--log", "both", "--every-s", "0.5", "--eval-episodes", "6", "--eval-seed", "7",
           "--thresholds=-1,2", "--json",
           "--train=--episodes 96 --max-updates 6 --hidden 8 --n-envs 8"]  # fmt: skip
    env = {"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO, env=env)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["command"].endswith("--episodes 96 --max-updates 6 --hidden 8 --n-envs 8")
    assert [(r["seed"], r["log"]) for r in report["runs"]] == [(3, True), (3, False)]
    for run in report["runs"]:
        copies = run["copies"]
        walls = [c["wall_s"] for c in copies]
        assert walls == sorted(walls) and walls[-1] == run["command_wall_s"] > 0
        assert 0 < copies[-1]["updates"] <= 6  # the checkpoint the command wrote
        assert all(-1.0 <= c["mean_reward"] <= 1.0 for c in copies)
        # Reward is always above -1 and never reaches 2: the first copy, and never.
        assert run["time_to"] == {"-1": walls[0], "2": None}
        assert run["holds_from"] == {"-1": walls[0], "2": None}
    on = report["summary"]["logging_on"]
    assert on["time_to_-1"] == [report["runs"][0]["time_to"]["-1"]]
