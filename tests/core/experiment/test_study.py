"""``agentqmix study transfer`` end to end on the real local model (tiny caps, a team of two,
one round), and the same study SIGKILLed while it plays the held-out tasks, then resumed:
it reaches the same result as the study that was never stopped, with every held-out
episode stored once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.store.db import read_session
from core.store.spool import spool_dir_for
from tests.core.test_cli_team import query

REPO = Path(__file__).resolve().parents[3]
HANG_GUARD_S = 600.0
TASKS = 2
POLICIES = ("stock", "calibrated", "single", "star")
FLAGS = (
    "--backend", "local", "--benchmark", "math", "--agents", "solver,analyst", "--rounds", "1",
    "--max-tokens", "8", "--tasks", str(TASKS), "--topologies", "single,star",
    "--train-episodes", "16", "--n-envs", "8", "--calibrate-tasks", "1", "--draws", "2",
    "--bootstrap", "50", "--json",
)  # fmt: skip


def study(folder: Path, db: Path, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "core.cli", "study", "transfer", *FLAGS, "--out", str(folder),
         "--db", str(db)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
        env={**os.environ, **env, "PYTHONPATH": str(REPO)},
    )  # fmt: skip


def finished(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=HANG_GUARD_S)
    assert proc.returncode == 0 and "Traceback" not in err, err[-3000:]
    return json.loads(out)


def play_logged(folder: Path, db: Path) -> int:
    """Held-out episodes the live study has spooled so far (0 before its play run)."""
    state = folder / "study.json"
    run_id = json.loads(state.read_text())["runs"].get("play") if state.exists() else None
    if run_id is None:
        return 0
    return sum(
        seg.read_bytes().count(b'{"t":"ep"') for seg in spool_dir_for(db).glob(f"{run_id}.*.jsonl")
    )


def analysis(result: dict) -> dict:
    """What must not depend on the kill: everything but the run ids."""
    return {k: v for k, v in result.items() if k not in ("runs", "run_id", "folder")}


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory, local_env: dict[str, str]) -> dict:
    """The study played once, never stopped."""
    tmp = tmp_path_factory.mktemp("reference")
    return finished(study(tmp / "study", tmp / "s.duckdb", local_env))


def test_a_study_reports_every_policy_paired_on_the_same_tasks(reference: dict) -> None:
    assert [r["policy"] for r in reference["policies"]] == list(POLICIES)
    for row in reference["policies"]:
        for key in ("reward", "correct", "prompt", "completion", "predicted_stock",
                    "predicted_calibrated"):  # fmt: skip
            assert row[key]["lo"] <= row[key]["mean"] <= row[key]["hi"], (row["policy"], key)
        assert row["prompt"]["mean"] > 0 and row["completion"]["mean"] > 0  # real tokens
    pairs = {(d["a"], d["b"]) for d in reference["differences"]}
    assert pairs == {
        ("stock", "calibrated"), ("stock", "single"), ("stock", "star"),
        ("calibrated", "single"), ("calibrated", "star"),
    }  # fmt: skip
    for d in reference["differences"]:
        m = d["mcnemar"]
        assert m["a_only"] + m["b_only"] <= TASKS and 0.0 <= m["p"] <= 1.0
    rows = {r["policy"]: r for r in reference["policies"]}
    star_minus_single = rows["star"]["prompt"]["mean"] - rows["single"]["prompt"]["mean"]
    assert star_minus_single > 0  # star reads its peers: more prompt tokens than one agent
    for society in ("stock", "calibrated"):
        r = reference["ranking"][society]
        assert r["policies"] == 2 and r["tau"] in (-1.0, 1.0)


def test_a_sigkilled_study_resumes_to_the_same_result(
    tmp_path: Path, local_env: dict[str, str], reference: dict
) -> None:
    folder, db = tmp_path / "study", tmp_path / "s.duckdb"
    proc = study(folder, db, local_env)
    deadline = time.monotonic() + HANG_GUARD_S
    try:
        while play_logged(folder, db) < 1 and proc.poll() is None:
            assert time.monotonic() < deadline, "the study logged no held-out episode in time"
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
    assert proc.returncode == -signal.SIGKILL, "the study ended before it was killed"
    assert not (folder / "result.json").exists()

    resumed = finished(study(folder, db, local_env))
    assert analysis(resumed) == analysis(reference)
    play = resumed["runs"]["play"]
    with read_session(db) as cur:
        episodes = cur.execute(
            "SELECT episode FROM episodes WHERE run_id = ? ORDER BY episode", [play]
        ).fetchall()
    assert [e for (e,) in episodes] == list(range(TASKS * len(POLICIES)))  # each once
    (logged,) = query(db, f"SELECT kind, config FROM runs WHERE id = '{resumed['run_id']}'")
    assert logged["kind"] == "study"
    assert json.loads(logged["config"])["study"]["differences"] == resumed["differences"]
    # Run again, a finished study is read back, not played again.
    again = finished(study(folder, db, local_env))
    assert again["run_id"] == resumed["run_id"] and analysis(again) == analysis(resumed)


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--backend", "sim"], "plays real agents"),
        (["--backend", "local", "--topologies", "star,nope"], "'nope' is not one of"),
        (["--backend", "local", "--calibrate-tasks", "0"], "--society FILE or --calibrate-tasks"),
    ],
)
def test_study_mistakes_are_one_sentence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], says: str
) -> None:
    from core.cli import main

    code = main(["study", "transfer", "--out", str(tmp_path / "s"), "--db",
                 str(tmp_path / "s.duckdb"), *extra])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and says in err[0], err
    assert not (tmp_path / "s").exists()  # nothing started
