"""Evaluations keep every episode as they play it and resume where they stopped.

* ``agentqmix eval --backend openai`` against a real server on 127.0.0.1, SIGKILLed once
  it has logged a few episodes: the run is listed as interrupted and incomplete with what
  it logged; ``eval --resume`` plays the rest under the same id; every held-out episode
  is then stored exactly once (the same tasks, in the same order, as an evaluation that
  was never stopped), and no call of an episode it had logged is sent again.
* ``compare`` and ``robustness`` (several policies, and failure levels, in one run)
  stopped part-way through a policy by Ctrl-C, then resumed: the same rows as runs that
  were never stopped.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.cli import main
from core.experiment import evaluate as evaluate_mod
from core.experiment import run_policy
from core.store.db import read_session
from core.store.spool import spool_dir_for
from core.team.options import TeamOptions
from core.team.topologies import make_policy
from tests.core.backends.fake_openai import FakeOpenAIServer

REPO = Path(__file__).resolve().parents[3]
HANG_GUARD_S = 300.0
EPISODES = 24


def cli(db: Path, tmp: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), "AGENTQMIX_CACHE": str(tmp / "cache")}
    return subprocess.Popen(
        [sys.executable, "-m", "core.cli", *args, "--db", str(db), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env,
    )


def logged_in_spool(db: Path) -> int:
    """Episode lines the live run has written to its spool so far."""
    lines = 0
    for seg in spool_dir_for(db).glob("*.jsonl"):
        lines += seg.read_bytes().count(b'{"t":"ep"')
    return lines


def stored(db: Path, run_id: str) -> list[tuple]:
    with read_session(db) as cur:
        return cur.execute(
            "SELECT episode, task_id, seed FROM episodes WHERE run_id = ? ORDER BY episode",
            [run_id],
        ).fetchall()


def test_sigkilled_eval_resumes_with_every_episode_once(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    flags = ["--benchmark", "math", "--policy", "full", "--episodes", str(EPISODES)]
    flags += ["--backend", "openai", "--model", "m", "--concurrency", "4"]
    with FakeOpenAIServer(latency_s=0.05) as server:
        flags += ["--base-url", server.url]
        proc = cli(db, tmp_path, "eval", *flags)
        deadline = time.monotonic() + HANG_GUARD_S
        try:
            while logged_in_spool(db) < 8 and proc.poll() is None:
                assert time.monotonic() < deadline, "no episode was logged before the deadline"
                time.sleep(0.05)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.communicate()
        assert proc.returncode == -signal.SIGKILL, "the evaluation ended before it was killed"

        runs = json.loads(cli(db, tmp_path, "runs").communicate(timeout=HANG_GUARD_S)[0])
        (run,) = runs
        kept = run["episodes"]
        assert run["status"] == "interrupted" and run["incomplete"], run
        assert 8 <= kept < EPISODES and run["planned"] == EPISODES, run
        before = server.request_count

        resumed = cli(db, tmp_path, "eval", "--resume", run["id"])
        out, err = resumed.communicate(timeout=HANG_GUARD_S)
        assert resumed.returncode == 0 and "Traceback" not in err, err
        summary = json.loads(out)
        # Each episode makes 13 calls (4 agents x 3 rounds + the decision); the ones the
        # killed process logged are not played again (the batch in flight is replayed
        # from the response cache).
        assert server.request_count - before <= 13 * (EPISODES - kept)

    assert summary["run_id"] == run["id"] and summary["episodes"] == EPISODES
    rows = stored(db, run["id"])
    assert [r[0] for r in rows] == list(range(EPISODES))  # each index once, none missing
    # The same held-out tasks in the same order as an evaluation that was never stopped.
    opts = TeamOptions(benchmark="math", concurrency=4)
    fresh = run_policy(opts, make_policy("full"), EPISODES, 0)
    assert [(r[1], r[2]) for r in rows] == [(r.task_id, r.seed) for r in fresh]
    (after,) = json.loads(cli(db, tmp_path, "runs").communicate(timeout=HANG_GUARD_S)[0])
    assert after["status"] == "finished" and not after["incomplete"]


def _stop_after(monkeypatch: pytest.MonkeyPatch, batches: int) -> None:
    """Ctrl-C while the evaluation plays its ``batches``-th batch of episodes."""
    from core.team.env import TeamEnv

    original = TeamEnv.run
    calls = {"n": 0}

    def run(self, *args, **kwargs):  # noqa: ANN001, ANN202
        calls["n"] += 1
        if calls["n"] == batches:
            raise KeyboardInterrupt
        return original(self, *args, **kwargs)

    monkeypatch.setattr(TeamEnv, "run", run)


@pytest.mark.parametrize(
    ("command", "extra", "batches"),
    [
        ("compare", ["--episodes", "6"], 4),  # 6 = 4 + 2: stops inside the second policy
        ("robustness", ["--episodes", "5", "--max-failed", "1"], 6),  # inside k = 1
    ],
)
def test_stopped_compare_and_robustness_resume_to_the_same_rows(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: str,
    extra: list[str],
    batches: int,
) -> None:
    db = tmp_path / "s.duckdb"
    base = [command, "--benchmark", "math", "--concurrency", "4", *extra, "--json"]
    topologies = ("full", "star")
    monkeypatch.setattr(
        evaluate_mod, "_policies", lambda opts, ckpt, dev, _: [make_policy(n) for n in topologies]
    )
    assert main([*base, "--no-log"]) == 0
    expected = json.loads(capsys.readouterr().out)

    with monkeypatch.context() as m:
        _stop_after(m, batches)
        assert main([*base, "--db", str(db)]) == 130
    capsys.readouterr()
    assert main(["runs", "--db", str(db), "--json"]) == 0
    (run,) = json.loads(capsys.readouterr().out)
    assert run["status"] == "interrupted" and run["incomplete"]
    assert 0 < run["episodes"] < run["planned"]

    assert main([command, "--resume", run["id"], "--db", str(db), "--json"]) == 0
    resumed = json.loads(capsys.readouterr().out)
    key = "policies" if command == "compare" else "points"
    drop = ("run_id",)
    got = [{k: v for k, v in row.items() if k not in drop} for row in resumed[key]]
    want = [{k: v for k, v in row.items() if k not in drop} for row in expected[key]]
    _assert_same_rows(got, want)
    assert [r[0] for r in stored(db, run["id"])] == list(range(run["planned"]))


def _assert_same_rows(got: list[dict], want: list[dict]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.keys() == w.keys()
        for k in g:
            if isinstance(w[k], float):
                assert g[k] == pytest.approx(w[k]), (k, g, w)
            else:
                assert g[k] == w[k], (k, g, w)
