"""The real ``agentqmix`` entry point on the agent team, with tiny settings.

Every command runs against a real DuckDB file in tmp_path; the OpenAI-compatible path talks
to a real HTTP server on 127.0.0.1. Commands whose process is part of the claim run as a
subprocess (a training run, a run killed with SIGKILL, a checkpoint refused with exit code 2,
the sandbox a run finds on its PATH); the others call :func:`core.cli.main` in this process
(:func:`run_json`): the same code the console script runs, without ~3 CPU-seconds of
imports (PyTorch, pandas) per command.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from core.cli import main
from core.store import get_run
from core.store.commands import sql as store_sql
from core.tasks.registry import load_benchmark
from tests.core.backends.fake_openai import FakeOpenAIServer, default_responder

TINY = ["--hidden", "32", "--n-envs", "8", "--eval-episodes", "8"]


def cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "core.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
    )


def ok_json(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def run_main(*args: str) -> tuple[int, str, str]:
    """``agentqmix ARGS`` in this process: its exit code, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def run_json(*args: str) -> dict | list:
    """``agentqmix ARGS`` in this process (exit code 0 asserted): the JSON it printed."""
    code, out, err = run_main(*args)
    assert code == 0, err[-2000:]
    return json.loads(out)


def query(db: Path, sql: str) -> list[dict]:
    """Rows of ``sql`` on the store, read as ``agentqmix sql`` reads it (its reader, in this
    process: the spool tail staged, the store read-only). A subprocess per read cost ~2
    CPU-seconds of imports; the command itself is tested in tests/core/store/."""
    return json.loads(store_sql(sql, db).to_json())


def count(db: Path, sql: str) -> int:
    return int(next(iter(query(db, sql)[0].values())))


def test_eval_fixed_topology_reports_and_logs(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    out = run_json(
        "eval", "--benchmark", "math", "--policy", "full", "--episodes", "6", "--db", str(db),
        "--json",
    )  # fmt: skip
    assert out["episodes"] == 6
    assert 0.0 <= out["accuracy"] <= 1.0 and out["mean_tokens"] > 0
    assert len(out["action_counts_per_round"]) == 3
    # full mesh: every live agent aggregates in every round
    assert all(r["aggregate_refine"] == 6 * 4 for r in out["action_counts_per_round"])
    assert count(db, f"SELECT count(*) FROM episodes WHERE run_id = '{out['run_id']}'") == 6
    again = run_json(
        "eval", "--benchmark", "math", "--policy", "full", "--episodes", "6", "--no-log", "--json"
    )
    assert again["accuracy"] == out["accuracy"] and again["mean_tokens"] == out["mean_tokens"]


def test_eval_with_injected_failures_records_them(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    out = run_json(
        "eval", "--benchmark", "mcq", "--policy", "debate", "--episodes", "4",
        "--fail", "0:crash@1,analyst:garbled", "--db", str(db), "--json",
    )  # fmt: skip
    faults = query(
        db,
        f"SELECT agent, round, fault FROM agent_steps WHERE run_id = '{out['run_id']}' "
        "AND fault IS NOT NULL ORDER BY agent, round",
    )
    crashed = {(f["agent"], f["round"]) for f in faults if f["fault"] == "crash"}
    assert crashed == {(0, 1), (0, 2)}  # silent from round 1 on, fine in round 0
    garbled = {(f["agent"], f["round"]) for f in faults if f["fault"] == "garbled"}
    assert garbled == {(2, r) for r in range(3)}  # "analyst" is agent 2, from round 0


@pytest.fixture(scope="module")
def small_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("store") / "s.duckdb"
    run_json(
        "eval", "--benchmark", "math", "--policy", "single", "--episodes", "1", "--db", str(db),
        "--json",
    )  # fmt: skip
    return db


@pytest.mark.parametrize(
    "args",
    [
        ["eval", "--benchmark", "math", "--policy", "nope"],
        ["eval", "--benchmark", "nope", "--policy", "full"],
        ["eval", "--benchmark", "math", "--policy", "full", "--fail", "9:crash"],
        ["eval", "--benchmark", "math", "--policy", "full", "--fail", "0:explode"],
        ["eval", "--benchmark", "math"],
        ["eval", "--benchmark", "jsonl:/does/not/exist.jsonl", "--policy", "full"],
        ["eval", "--benchmark", "math", "--backend", "openai", "--policy", "full"],
        ["train", "--benchmark", "math", "--out", "x.pt", "--mixer", "sum"],
        ["train", "--resume", "no-such-run"],
        ["sql", "DELETE FROM runs"],
    ],
)
def test_user_mistakes_exit_2_with_one_line(
    small_db: Path,
    args: list[str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # In process (the same main() the console script runs): a subprocess per case costs
    # seconds of imports; test_checkpoint_from_another_team_is_refused covers a real process.
    monkeypatch.chdir(small_db.parent)
    code = main([*args, "--db", str(small_db)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    assert err.strip().startswith("error:") and len(err.strip().splitlines()) == 1


def test_train_eval_compare_export(tmp_path: Path) -> None:
    db, ckpt = tmp_path / "s.duckdb", tmp_path / "m.pt"
    out = ok_json(
        cli(
            "train",
            "--benchmark",
            "mixed",
            "--episodes",
            "48",
            "--out",
            str(ckpt),
            "--db",
            str(db),
            "--json",
            *TINY,
        )
    )
    assert out["episodes"] == 48 and ckpt.is_file()
    run = out["run_id"]
    assert count(db, f"SELECT count(*) FROM episodes WHERE run_id = '{run}'") == 48
    # The training budget in tokens: what the logged training episodes spent.
    spent = count(db, f"SELECT sum(tokens) FROM episodes WHERE run_id = '{run}'")
    assert out["train_tokens"] == spent > 0
    assert count(db, f"SELECT count(*) FROM train_metrics WHERE run_id = '{run}'") > 0
    # the learned policy's view is logged: six Q-values per step, and the mixer's credit per round
    assert (
        count(db, f"SELECT count(*) FROM agent_steps WHERE run_id = '{run}' AND len(q_values) = 6")
        > 0
    )
    assert count(db, f"SELECT count(*) FROM rounds WHERE run_id = '{run}' AND len(credit) = 4") > 0

    learned = run_json(
        "eval", "--benchmark", "mixed", "--checkpoint", str(ckpt), "--episodes", "8",
        "--db", str(db), "--json",
    )  # fmt: skip
    assert learned["policy"] == "qmix" and learned["episodes"] == 8
    table = run_json(
        "compare", "--benchmark", "mixed", "--checkpoint", str(ckpt), "--episodes", "4",
        "--db", str(db), "--json",
    )  # fmt: skip
    names = {p["policy"] for p in table["policies"]}
    assert names == {"qmix", "single", "chain", "star", "ring", "full", "debate", "random"}
    single = next(p for p in table["policies"] if p["policy"] == "single")
    full = next(p for p in table["policies"] if p["policy"] == "full")
    assert full["mean_tokens"] > 4 * single["mean_tokens"]

    runs = run_json("runs", "--db", str(db), "--json")
    assert {r["kind"] for r in runs} == {"train", "eval", "compare"}
    assert main(["export", "--run", run, "--parquet", str(tmp_path / "pq"), "--db", str(db)]) == 0
    n = duckdb.sql(f"SELECT count(*) FROM '{tmp_path / 'pq' / 'episodes.parquet'}'").fetchall()[0][
        0
    ]
    assert n == 48


def test_checkpoint_from_another_team_is_refused(tmp_path: Path) -> None:
    ckpt = tmp_path / "m.pt"
    ok_json(
        cli(
            "train",
            "--benchmark",
            "math",
            "--episodes",
            "8",
            "--out",
            str(ckpt),
            "--no-log",
            "--json",
            *TINY,
        )
    )
    proc = cli(
        "eval",
        "--benchmark",
        "math",
        "--agents",
        "solver,coder",
        "--checkpoint",
        str(ckpt),
        "--no-log",
    )
    assert proc.returncode == 2 and "does not fit" in proc.stderr


def test_sigkill_then_resume_continues_the_same_run(tmp_path: Path) -> None:
    db, ckpt = tmp_path / "s.duckdb", tmp_path / "m.pt"
    args = [
        "train",
        "--benchmark",
        "math",
        "--episodes",
        "160",
        "--out",
        str(ckpt),
        "--db",
        str(db),
        *TINY,
    ]
    proc = subprocess.Popen(
        [sys.executable, "-m", "core.cli", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline and not ckpt.exists():
            time.sleep(0.2)
        assert ckpt.exists(), "no checkpoint was written before the deadline"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    runs = run_json("runs", "--db", str(db), "--json")
    assert len(runs) == 1 and runs[0]["status"] == "interrupted"
    run = runs[0]["id"]
    kept = count(db, f"SELECT count(*) FROM episodes WHERE run_id = '{run}'")
    assert kept >= 16
    # The resume starts from the checkpoint file (the store's checkpoint_episode may lag it
    # by one checkpoint: killed between writing the file and logging that it did).
    from core.qmix.checkpoint import load_checkpoint

    done = int(load_checkpoint(ckpt).resume["episodes_done"])
    stored = query(db, f"SELECT checkpoint_episode AS c FROM runs WHERE id = '{run}'")[0]["c"]
    assert (stored is None or stored + 1 <= done) and done <= kept
    rows = f"SELECT episode, reward, tokens FROM episodes WHERE run_id = '{run}' ORDER BY episode"
    before = query(db, rows)
    out = run_json("train", "--resume", run, "--db", str(db), "--json")
    assert out["run_id"] == run and out["episodes"] == 160
    runs = run_json("runs", "--db", str(db), "--json")
    assert runs[0]["status"] == "finished"
    # Nothing the killed process logged is deleted, and the episodes it logged after its
    # checkpoint count toward the budget (they happened): the learner restarts from the
    # checkpoint and is credited with every stored episode, and the run ends with exactly
    # its 160 episodes, numbered 0..159, none twice (core/experiment/train.py resumed_state).
    total = 160
    assert count(db, f"SELECT count(*) FROM episodes WHERE run_id = '{run}'") == total
    assert (
        count(db, f"SELECT count(DISTINCT episode) FROM episodes WHERE run_id = '{run}'") == total
    )
    assert count(db, f"SELECT max(episode) FROM episodes WHERE run_id = '{run}'") == total - 1
    assert query(db, rows)[:kept] == before  # untouched


def knows_the_answers(benchmark: str, seed: int = 0):
    """A server-side model that answers the held-out maths tasks right (others as default)."""
    source = load_benchmark(benchmark, seed, split="eval")
    answers = {source.get(i).question: source.get(i).answer for i in range(len(source))}

    def respond(messages: list[dict]) -> str:
        text = "\n".join(str(m.get("content", "")) for m in messages)
        for question, answer in answers.items():
            if question in text:
                return f"Working through each step.\nAnswer: {answer}\nConfidence: 90"
        return default_responder(messages)

    return respond


def test_openai_backend_eval_and_training_against_a_local_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "sk-test-SECRET-do-not-store-123"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    monkeypatch.setenv("AGENTQMIX_CACHE", str(tmp_path / "cache"))
    db, ckpt = tmp_path / "s.duckdb", tmp_path / "m.pt"
    with FakeOpenAIServer(responder=knows_the_answers("math")) as server:
        base = ["--backend", "openai", "--base-url", server.url, "--model", "fake-model"]
        evaluate = ["eval", "--benchmark", "math", "--policy", "full", "--episodes", "3", *base]
        out = run_json(*evaluate, "--db", str(db), "--json")
        assert out["episodes"] == 3 and out["accuracy"] == 1.0
        served = server.request_count
        assert served > 0
        usage = sum(
            r["usage"]["prompt_tokens"] + r["usage"]["completion_tokens"]
            for r in server.requests
            if r.get("usage")
        )
        run = out["run_id"]
        logged = count(
            db,
            f"SELECT sum(prompt_tokens + completion_tokens) FROM llm_calls WHERE run_id = '{run}'",
        )
        assert logged == usage
        # the cache answers a re-run without a single request
        run_json(*evaluate, "--db", str(db), "--json")
        assert server.request_count == served
        # a short training run on real calls
        trained = run_json(
            "train", "--benchmark", "mcq", "--episodes", "8", "--out", str(ckpt), *base,
            "--db", str(db), "--json", *TINY,
        )  # fmt: skip
        assert trained["episodes"] == 8
    for path in [db, ckpt, *tmp_path.rglob("*")]:
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), f"API key written to {path}"


def test_pass_through_unanimous_is_counted_stored_and_spares_tokens(tmp_path: Path):
    db = tmp_path / "pt.duckdb"
    out = {}
    for rule in ("off", "unanimous"):
        out[rule] = run_json(
            "eval", "--benchmark", "math", "--policy", "star", "--episodes", "12",
            "--pass-through", rule, "--db", str(db), "--json",
        )  # fmt: skip
    off, on = out["off"], out["unanimous"]
    assert off["decisions_passed_through"]["unanimous"] == 0
    spared = on["decisions_passed_through"]["unanimous"]
    assert spared > 0 and on["calls"] == off["calls"] - spared
    assert on["mean_tokens"] < off["mean_tokens"]
    stored = count(
        db,
        f"SELECT count(*) FROM episodes WHERE run_id = '{on['run_id']}' "
        "AND pass_through = 'unanimous'",
    )
    assert stored == spared
    assert get_run(db, on["run_id"]).config["team"]["pass_through"] == "unanimous"


def test_code_runs_in_bubblewrap_or_not_at_all_and_the_run_says_which(tmp_path: Path) -> None:
    """``auto`` never falls back: without bubblewrap a code run stops before its first call;
    the weaker sandbox only by name, with a warning; every run stores which sandbox ran."""
    db = tmp_path / "s.duckdb"
    no_bwrap = {"PATH": str(tmp_path / "empty-bin")}  # sys.executable is absolute
    env = {"OPENAI_API_KEY": "sk-test", "AGENTQMIX_CACHE": str(tmp_path / "cache")}
    common = ["--benchmark", "code", "--policy", "single", "--episodes", "2", "--db", str(db)]

    def sandbox_of(run_id: str) -> str:
        with duckdb.connect(str(db), read_only=True) as con:
            (config,) = con.execute("SELECT config FROM runs WHERE id = ?", [run_id]).fetchone()
        return json.loads(config)["sandbox"]

    with FakeOpenAIServer() as server:
        base = ["--backend", "openai", "--base-url", server.url, "--model", "fake-model"]
        strong = ok_json(cli("eval", *common, *base, "--json", env=env))
        assert sandbox_of(strong["run_id"]) == "bwrap" and strong["accuracy"] == 1.0
        served = server.request_count
        refused = cli("eval", *common, *base, env={**env, **no_bwrap})
        assert refused.returncode == 2, refused.stderr
        lines = refused.stderr.strip().splitlines()
        assert len(lines) == 1 and "bubblewrap" in lines[0] and "--sandbox process" in lines[0]
        assert server.request_count == served  # stopped before the first call
        weak = cli(
            "eval", *common, *base, "--sandbox", "process", "--json", env={**env, **no_bwrap}
        )
        assert "weaker process sandbox" in weak.stderr
        assert sandbox_of(ok_json(weak)["run_id"]) == "process"
    # The synthetic society answers code tasks with labels: nothing runs, nothing is needed.
    sim = ok_json(cli("eval", *common, "--json", env=no_bwrap))
    assert sandbox_of(sim["run_id"]) == "none"
    listed = ok_json(cli("runs", "--db", str(db), "--json"))
    assert {r["sandbox"] for r in listed} == {"bwrap", "process", "none"}


def test_compare_plays_the_topologies_named_and_records_the_training_run(tmp_path: Path) -> None:
    """What the lab's *Evaluate on held-out tasks* runs: only the fixed topologies the store
    lacks (``--topologies``), the evaluation linked to its training run (``--source-run``);
    a name that is neither is one sentence and exit 2."""
    from core.store.synthetic import synthetic_episode
    from core.store.writer import RunLogger

    db = tmp_path / "s.duckdb"
    with RunLogger(db, "train", {}, policy="qmix", benchmark="mixed") as log:
        log.log_episode(synthetic_episode(0, policy="env"))
        trained = log.run_id
    flags = ["--benchmark", "mixed", "--episodes", "2", "--seed", "1000", "--db", str(db)]
    table = run_json(
        "compare", *flags, "--topologies", "star,single", "--source-run", trained, "--json"
    )
    assert [p["policy"] for p in sorted(table["policies"], key=lambda p: p["policy"])] == [
        "single", "star"
    ]  # fmt: skip
    assert get_run(db, table["policies"][0]["run_id"]).config["source_run"] == trained
    for args in (
        ("compare", *flags, "--topologies", "star,hub"),
        ("compare", *flags, "--topologies", "none"),
        ("compare", *flags, "--source-run", "train-nope"),
        ("eval", *flags, "--policy", "star", "--source-run", table["policies"][0]["run_id"]),
    ):
        code, _, err = run_main(*args)
        assert code == 2 and len(err.strip().splitlines()) == 1, err
