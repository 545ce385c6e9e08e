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

from core.backends.local_server import LocalServer
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
    "--train-episodes", "8", "--n-envs", "8", "--calibrate-tasks", "1", "--draws", "2",
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


def stored(db: Path, run_id: str) -> list[tuple]:
    with read_session(db) as cur:
        return cur.execute(
            "SELECT episode, task_id, seed, policy, team_answer, prompt_tokens, "
            "completion_tokens FROM episodes WHERE run_id = ? ORDER BY episode",
            [run_id],
        ).fetchall()


@pytest.fixture(scope="module")
def killed_and_resumed(tmp_path_factory: pytest.TempPathFactory, local_server: LocalServer):
    """A study SIGKILLed once it has logged a held-out episode, then resumed with the same
    command: (its folder, its store, the held-out episodes logged before the kill, the
    resumed study's JSON)."""
    tmp = tmp_path_factory.mktemp("study")
    folder, db, env = tmp / "study", tmp / "s.duckdb", local_server.attach_env()
    proc = study(folder, db, env)
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
    play = json.loads((folder / "study.json").read_text())["runs"]["play"]
    before = stored(db, play)
    assert 1 <= len(before) < TASKS * len(POLICIES)
    return folder, db, before, finished(study(folder, db, env))


def test_a_study_reports_every_policy_paired_on_the_same_tasks(killed_and_resumed) -> None:
    *_, result = killed_and_resumed
    assert [r["policy"] for r in result["policies"]] == list(POLICIES)
    for row in result["policies"]:
        for key in ("reward", "correct", "prompt", "completion", "predicted_stock",
                    "predicted_calibrated"):  # fmt: skip
            assert row[key]["lo"] <= row[key]["mean"] <= row[key]["hi"], (row["policy"], key)
        assert row["prompt"]["mean"] > 0 and row["completion"]["mean"] > 0  # real tokens
    pairs = {(d["a"], d["b"]) for d in result["differences"]}
    assert pairs == {
        ("stock", "calibrated"), ("stock", "single"), ("stock", "star"),
        ("calibrated", "single"), ("calibrated", "star"),
    }  # fmt: skip
    for d in result["differences"]:
        m = d["mcnemar"]
        assert m["a_only"] + m["b_only"] <= TASKS and 0.0 <= m["p"] <= 1.0
    rows = {r["policy"]: r for r in result["policies"]}
    star_minus_single = rows["star"]["prompt"]["mean"] - rows["single"]["prompt"]["mean"]
    assert star_minus_single > 0  # star reads its peers: more prompt tokens than one agent
    for society in ("stock", "calibrated"):
        assert result["ranking"][society]["policies"] == 2


def test_a_sigkilled_study_resumes_to_the_same_result(killed_and_resumed) -> None:
    """The episodes logged before the kill are kept, not played again; every held-out
    episode is stored once, each policy on the same tasks with the same seeds; and the
    result is the analysis of exactly those episodes, as a study never stopped computes
    it (the real replies themselves may differ by a last bit between two runs of the
    server: docs/openai.md, "Replies that stay comparable")."""
    from core.experiment.study import (
        analyse,
        load_study,
        predict,
        sim_options,
        stored_records,
        study_policies,
    )

    folder, db, before, result = killed_and_resumed
    play = result["runs"]["play"]
    after = stored(db, play)
    assert after[: len(before)] == before  # kept as logged
    assert [row[0] for row in after] == list(range(TASKS * len(POLICIES)))  # each once
    blocks = [after[k * TASKS : (k + 1) * TASKS] for k in range(len(POLICIES))]
    assert len({tuple((r[1], r[2]) for r in block) for block in blocks}) == 1  # same tasks, seeds
    config, opts = load_study(folder)
    records = stored_records(str(db), play)
    checkpoints = {n: folder / f"{n}.pt" for n in config.learned}
    predicted = {}
    for society, path in (("stock", None), ("calibrated", str(folder / "calibrated.json"))):
        sim = sim_options(opts, path, config.base)
        predicted[society] = {
            p.name: predict(p, records[k * TASKS : (k + 1) * TASKS], sim, config.draws, config.seed)
            for k, p in enumerate(study_policies(config, opts, checkpoints))
        }
    fresh = json.loads(json.dumps(analyse(config, records, predicted)))
    for key in ("policies", "ranking", "differences"):
        assert result[key] == fresh[key], key
    (logged,) = query(db, f"SELECT kind, config FROM runs WHERE id = '{result['run_id']}'")
    assert logged["kind"] == "study"
    assert json.loads(logged["config"])["study"]["differences"] == result["differences"]
    # Run again, a finished study is read back, not played again.
    again = finished(study(folder, db, {}))
    assert again["run_id"] == result["run_id"] and analysis(again) == analysis(result)
    assert stored(db, play) == after


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


def test_the_same_command_runs_against_an_openai_compatible_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--backend openai --base-url ... --concurrency N``: the command unchanged (a real HTTP
    server on 127.0.0.1 speaking the OpenAI protocol), every policy's held-out episodes
    played, nothing served from the response cache."""
    from core.cli import main
    from tests.core.backends.fake_openai import FakeOpenAIServer

    db = tmp_path / "s.duckdb"
    with FakeOpenAIServer(latency_s=0.0) as server:
        code = main(["study", "transfer", "--backend", "openai", "--base-url", server.url,
                     "--model", "m", "--concurrency", "4", "--benchmark", "math", "--tasks", "3",
                     "--topologies", "single,star", "--train-episodes", "8", "--n-envs", "8",
                     "--calibrate-tasks", "1", "--draws", "2", "--bootstrap", "20", "--out",
                     str(tmp_path / "s"), "--db", str(db), "--json"])  # fmt: skip
    out = capsys.readouterr()
    assert code == 0, out.err[-2000:]
    result = json.loads(out.out)
    assert [r["policy"] for r in result["policies"]] == list(POLICIES)
    (hits,) = query(
        db,
        f"SELECT count(*) AS n FROM llm_calls WHERE cache_hit AND run_id = '{result['runs']['play']}'",
    )
    assert hits["n"] == 0
    assert len(query(db, f"SELECT 1 FROM episodes WHERE run_id = '{result['runs']['play']}'")) == 12
    # The counts before it starts, and progress with an ETA while it plays.
    assert "study: 14 real episodes (2 to calibrate" in out.err
    assert "ETA" in out.err and "star: 14/14 real episodes" in out.err
    # The same folder with other settings is refused, and the finished study is kept.
    code = main(["study", "transfer", "--backend", "openai", "--base-url", "http://127.0.0.1:9/v1",
                 "--model", "m", "--tasks", "4", "--out", str(tmp_path / "s"), "--db", str(db)])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "holds a study with other settings" in err[0], err
    assert (tmp_path / "s" / "result.json").exists()


def test_the_study_fine_tunes_with_the_real_model_recipe(tmp_path: Path) -> None:
    """``--finetune-episodes``: the calibrated policy continues on real episodes with the
    ``finetune`` recipe (an update an episode from the first; the society recipe would wait
    for 32 buffered episodes and make none), and the fine-tuned policy is played with the
    others."""
    from core.cli import main
    from core.store.queries import get_run
    from tests.core.backends.fake_openai import FakeOpenAIServer

    db = tmp_path / "s.duckdb"
    with FakeOpenAIServer(latency_s=0.0) as server:
        code = main(["study", "transfer", "--backend", "openai", "--base-url", server.url,
                     "--model", "m", "--concurrency", "4", "--benchmark", "math", "--tasks", "2",
                     "--topologies", "single", "--train-episodes", "8", "--n-envs", "8",
                     "--calibrate-tasks", "1", "--finetune-episodes", "2", "--draws", "2",
                     "--bootstrap", "20", "--out", str(tmp_path / "s"), "--db", str(db)])  # fmt: skip
    assert code == 0
    state = json.loads((tmp_path / "s" / "result.json").read_text())
    run = get_run(str(db), state["runs"]["finetune"])
    assert run is not None and run.config["recipe"] == "finetune"
    (steps,) = query(db, f"SELECT count(*) AS n FROM train_metrics WHERE run_id = '{run.id}'")
    assert steps["n"] >= 1
    assert "finetuned" in [r["policy"] for r in state["policies"]]


def test_the_simulated_team_leaves_the_real_back_ends_prompt_settings_behind() -> None:
    """`study transfer --prompt-style compact` trained on the simulator, which refused the
    flag (it has no prompts) after the real calibration episodes had been paid for."""
    from core.experiment.study import sim_options
    from core.team.options import TeamOptions

    real = TeamOptions(backend="local", prompt_style="compact", prompt_layout="fresh")
    real.validate()
    sim = sim_options(real, None, "flash-lite")
    sim.validate()  # one sentence and exit 2 before the fix
    assert (sim.backend, sim.prompt_style, sim.prompt_layout) == ("sim", None, None)
