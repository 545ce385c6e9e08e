"""A real ``agentqmix train`` killed with SIGKILL early in a long run, then ``--resume``.

Checkpoints come every 10 % of the episodes *and* every ``--checkpoint-every-s`` seconds;
the kill lands after the first time-based checkpoint, long before the first 10 % one. The
resumed run must keep every episode logged before the kill, number the rest after them
(0..n-1, no gap, no duplicate) and finish.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from core.qmix.checkpoint import load_checkpoint
from core.store.queries import get_run, list_runs
from tests.core.logged import logged_episodes

REPO = Path(__file__).resolve().parents[2]
EPISODES = 320
"""Its first 10 % checkpoint would come after 32 episodes; with a checkpoint every 0.05 s the
first one comes after the first lockstep batch of 8 (which takes longer than that)."""


def cli(*args: str) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-m", "core.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env=env,
        cwd=REPO,
    )


def test_sigkill_after_a_time_checkpoint_then_resume_keeps_and_continues(tmp_path: Path) -> None:
    db, ckpt = tmp_path / "s.duckdb", tmp_path / "m.pt"
    small = ["--hidden", "16", "--n-envs", "8", "--eval-episodes", "0"]
    every = ["--checkpoint-every-s", "0.05"]
    proc = cli(
        "train", "--benchmark", "math", "--episodes", str(EPISODES), "--out", str(ckpt),
        "--db", str(db), *small, *every,
    )  # fmt: skip
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline and proc.poll() is None and not ckpt.exists():
            time.sleep(0.01)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
    assert ckpt.exists(), "no checkpoint was written before the deadline"
    # The checkpoint holds the learner after fewer episodes than the first 10 % checkpoint
    # would: it was a time-based one (and so was every one before the kill).
    assert load_checkpoint(ckpt).meta["episodes"] < EPISODES // 10

    (run_id,) = list_runs(db).id
    info = get_run(db, run_id)
    assert info.status == "interrupted"
    before = logged_episodes(db, run_id)
    assert [row[0] for row in before] == list(range(len(before))) and before

    resumed = cli("train", "--resume", run_id, "--db", str(db), "--json", *every)
    out, err = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, err.decode()[-2000:]
    summary = json.loads(out)
    assert summary["run_id"] == run_id and summary["episodes"] == EPISODES

    after = logged_episodes(db, run_id)
    assert [row[0] for row in after] == list(range(EPISODES))  # no gap, no duplicate
    assert after[: len(before)] == before  # nothing logged before the kill changed or went
    assert get_run(db, run_id).status == "finished"
