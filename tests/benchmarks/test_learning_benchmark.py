"""`agentqmix bench learning` (issue 11) end to end with tiny settings: every policy is
played on the same held-out episodes, and the paired figures are what they claim."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_learning_benchmark_pairs_every_policy_on_the_same_episodes():
    cmd = [sys.executable, "-m", "core.cli", "bench", "learning", "--seeds", "3",
           "--episodes", "48", "--max-updates", "4", "--eval-episodes", "24",
           "--eval-seed", "5", "--idle", "call", "--json"]  # fmt: skip
    env = {"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO, env=env)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["episodes"], report["max_updates"], report["idle"]) == (48, 4, "call")
    groups = report["all"], report["easy"], report["hard"]
    assert groups[0]["n"] == 24 and groups[1]["n"] + groups[2]["n"] <= 24
    for group in groups:
        if group["n"] < 2:
            continue
        fixed = group["fixed"]
        best = group["best_fixed_by_reward"]
        assert fixed[best]["mean_reward"] == max(row["mean_reward"] for row in fixed.values())
        cheapest = group["cheapest_multi_agent"]
        assert cheapest != "single"
        learned = group["learned"]["3"]
        # The mean of paired differences is the difference of the means (up to rounding).
        gap = learned["mean_reward"] - fixed[best]["mean_reward"]
        assert abs(learned["vs_best_fixed"]["mean"] - gap) < 2e-4
        assert learned["vs_best_fixed"]["se"] >= 0
        ratio = learned["mean_tokens"] / fixed[cheapest]["mean_tokens"]
        assert abs(learned["tokens_over_cheapest_multi_agent"] - ratio) < 2e-3
