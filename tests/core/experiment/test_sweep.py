"""``agentqmix sweep`` on a real Ray: a local one, a two-node cluster on this machine,
Ctrl-C, a failing trial, and the store written by the driver alone.

Tiny settings (64 training episodes, width 16, 8 held-out tasks); every sweep here starts
and stops its own Ray, but for three that share one (:class:`TestOnOneLocalRay`).
"""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import duckdb
import pytest
import ray

from benchmarks.learning import from_sweep
from core.baselines.training import BaselineTrainConfig
from core.cli import main
from core.cli.sweep import _print_sweep
from core.errors import UserError
from core.experiment.evaluate import learned_policy, log_run, run_policy
from core.experiment.policies import pareto_front, wilson_interval
from core.experiment.sweep import SweepStatus, ray_session, run_sweep
from core.experiment.sweep_plan import SweepConfig, fixed_key, plan_fixed, plan_trials
from core.experiment.sweep_resume import read_stored_sweep
from core.experiment.sweep_trials import train_trial
from core.qmix.encoders import AgentNetConfig
from core.qmix.training import TrainConfig
from core.store.commands import delete_run
from core.store.engine import sweep_status_dir
from core.store.queries import sweep_points
from core.team.options import TeamOptions, options_from_dict
from core.team.summary import summarize_records
from core.team.topologies import FIXED_TOPOLOGIES, make_policy

EPISODES, EVAL = 64, 8
TINY = ["--episodes", str(EPISODES), "--eval-episodes", str(EVAL), "--hidden", "16"]
TINY += ["--n-envs", "8", "--benchmark", "math"]
REPO = Path(__file__).resolve().parents[3]


def rows(db: Path, sql: str, *params: object) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql, list(params)).fetchall()
    finally:
        con.close()


def sweep_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    code = main(["sweep", *TINY, *args, "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err[-3000:]
    return json.loads(captured.out)


def check_sweep(result: dict, db: Path, out: Path, weights: list[float], seeds: list[int]) -> None:
    """The result's shape, every trial logged exactly once by this process, checkpoints
    that load and replay the trial's held-out figures."""
    assert result["engine"] == "ray" and not result["failed"] and not result["interrupted"]
    trials = result["trials"]
    expected = sorted((w, s) for w in weights for s in seeds)
    assert [(t["token_weight"], t["seed"]) for t in trials] == expected
    assert sorted(f["policy"] for f in result["fixed"]) == sorted(FIXED_TOPOLOGIES)
    for point in trials + result["fixed"]:
        assert point["n"] == EVAL
        lo, hi = point["accuracy_ci"]
        assert 0 <= lo <= point["accuracy"] <= hi <= 1
        lo, hi = point["mean_tokens_ci"]
        assert lo <= point["mean_tokens"] <= hi
    # The front is the non-dominated subset of all points, and not empty.
    points = trials + result["fixed"]
    assert result["front"] and all(
        not any(
            q["accuracy"] >= p["accuracy"]
            and q["mean_tokens"] <= p["mean_tokens"]
            and (q["accuracy"], q["mean_tokens"]) != (p["accuracy"], p["mean_tokens"])
            for q in points
        )
        for p in result["front"]
    )
    assert json.loads((out / "sweep.json").read_text()) == json.loads(json.dumps(result))

    sweep_id = result["sweep_id"]
    runs = rows(db, "SELECT id, kind, policy, pid, config FROM runs")
    assert {r[3] for r in runs} == {os.getpid()}  # the driver is the only writer
    assert all(json.loads(r[4])["sweep"]["id"] == sweep_id for r in runs)
    assert len(runs) == 2 * len(trials) + len(FIXED_TOPOLOGIES)
    for t in trials:
        key = {"id": sweep_id, "token_weight": t["token_weight"], "seed": t["seed"]}
        key |= {"method": "qmix", "knob": {}, "pass_through": "off"}
        for run_id, kind, n in (
            (t["train_run_id"], "train", EPISODES),
            (t["eval_run_id"], "eval", EVAL),
        ):
            (config,) = rows(db, "SELECT config FROM runs WHERE id = ? AND kind = ?", run_id, kind)[
                0
            ]
            config = json.loads(config)
            assert config["sweep"] == key and config["team"]["token_weight"] == t["token_weight"]
            counted = rows(
                db,
                "SELECT count(*), count(DISTINCT episode), min(episode), max(episode) "
                "FROM episodes WHERE run_id = ?",
                run_id,
            )[0]
            assert counted == (n, n, 0, n - 1)
        metrics = rows(db, "SELECT count(*) FROM train_metrics WHERE run_id = ?", t["train_run_id"])
        assert metrics[0][0] == t["updates"] > 0
        # The checkpoint is the trained policy: replayed here it scores what the trial did.
        ckpt = Path(t["checkpoint"])
        assert ckpt.parent == out.absolute() and ckpt.is_file()
        (stored,) = rows(db, "SELECT config FROM runs WHERE id = ?", t["train_run_id"])[0]
        team = options_from_dict(json.loads(stored)["team"])
        assert (team.token_weight, team.seed) == (t["token_weight"], t["seed"])
        replay = summarize_records(run_policy(team, learned_policy(ckpt, team, "cpu"), EVAL, 0))
        assert replay["accuracy"] == pytest.approx(t["accuracy"])
        assert replay["mean_tokens"] == pytest.approx(t["mean_tokens"])
        assert replay["mean_reward"] == pytest.approx(t["mean_reward"])
    for f in result["fixed"]:
        stored = rows(
            db, "SELECT avg(reward), count(*) FROM episodes WHERE run_id = ?", f["eval_run_id"]
        )
        # Played at the first weight; re-scored there it gives the stored rewards back.
        assert f["rewards"][0]["token_weight"] == weights[0]
        assert (
            stored[0][0] == pytest.approx(f["rewards"][0]["mean_reward"]) and stored[0][1] == EVAL
        )
        # Tokens cost more at a larger weight.
        by_weight = [
            r["mean_reward"] for r in sorted(f["rewards"], key=lambda r: r["token_weight"])
        ]
        assert all(x > y for x, y in zip(by_weight, by_weight[1:], strict=False))


def check_resume(
    first: dict, db: Path, out: Path, args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """The sweep's driver died after logging the (1.0, seed 1) trial's train run but before
    its eval run, and before the fixed topology ``chain`` was stored. Resumed, it runs just
    those: each trial and topology ends up stored exactly once, the finished ones untouched,
    and sweep.json is every point's; resumed again, nothing runs (not even Ray)."""
    sweep_id = first["sweep_id"]
    cut = next(t for t in first["trials"] if (t["token_weight"], t["seed"]) == (1.0, 1))
    delete_run(cut["eval_run_id"], db)
    delete_run(next(f for f in first["fixed"] if f["policy"] == "chain")["eval_run_id"], db)
    where = [*args, "--out", str(out), "--db", str(db), "--resume", sweep_id]

    code = main(["sweep", *TINY, *where, "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err[-3000:]
    assert (
        "resuming: skipping 3 of 4 trials and 6 of 7 fixed topologies (stored); "
        "running 1 trial and 1 fixed topology." in captured.err
    )
    assert "qmix, token weight 1, seed 1 did not finish storing" in captured.err
    result = json.loads(captured.out)
    assert result["sweep_id"] == sweep_id and result["skipped"] == {"trials": 3, "fixed": 6}
    check_sweep(result, db, out, [0.1, 1.0], [0, 1])  # one train and one eval run per trial
    assert rows(db, "SELECT count(*) FROM runs WHERE id = ?", cut["train_run_id"]) == [(0,)]

    # What was stored is read back as the first run wrote it.
    def others(trials: list[dict]) -> list[dict]:
        return [t for t in trials if (t["token_weight"], t["seed"]) != (1.0, 1)]

    assert others(result["trials"]) == others(first["trials"])
    assert [f for f in result["fixed"] if f["policy"] != "chain"] == [
        f for f in first["fixed"] if f["policy"] != "chain"
    ]
    live = json.loads((sweep_status_dir(db) / f"{sweep_id}.json").read_text())
    assert (live["state"], live["resumed"], live["skipped"]) == ("finished", True, 3)
    assert (live["done"], live["total"]) == (4, 4) and live["started_at"] < live["resumed_at"]

    # Nothing left: a rerun stores nothing and gives the same result.
    rerun = sweep_json(capsys, *where)
    assert rerun["skipped"] == {"trials": 4, "fixed": 7}
    assert {**rerun, "skipped": None} == {**result, "skipped": None}
    assert rows(db, "SELECT count(*) FROM runs") == [(2 * 4 + len(FIXED_TOPOLOGIES),)]


def test_sweep_on_a_two_node_cluster(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    try:
        cluster.add_node(num_cpus=1)
        db, out = tmp_path / "c.duckdb", tmp_path / "out"
        result = sweep_json(
            capsys,
            *("--token-weights", "0.3,0.0", "--seeds", "2"),
            *("--ray-address", cluster.address, "--out", str(out), "--db", str(db)),
        )
        check_sweep(result, db, out, [0.3, 0.0], [2])
        assert not ray.is_initialized()  # the driver left the cluster
    finally:
        cluster.shutdown()


def _live(tmp_path: Path) -> dict:
    (path,) = sweep_status_dir(tmp_path / "f.duckdb").glob("*.json")
    return json.loads(path.read_text())


def test_ctrl_c_cancels_running_trials_and_keeps_finished_ones(tmp_path: Path) -> None:
    db, out = tmp_path / "i.duckdb", tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "core.cli", "sweep", *TINY, "--token-weights", "0.1,0.3,1.0"]
        + ["--seeds", "0", "--max-parallel", "1", "--out", str(out), "--db", str(db), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        # One trial at a time: when the first checkpoint lands, the second is under way.
        while not (out / "tw0.1-seed0.pt").exists() and proc.poll() is None:
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, stderr[-3000:]
    result = json.loads(stdout)
    assert result["interrupted"] and result["cancelled"]
    done = result["trials"]
    assert 1 <= len(done) < 3 and len(done) + len(result["cancelled"]) == 3
    assert "interrupted: kept" in stderr
    train_runs = rows(db, "SELECT id, status FROM runs WHERE kind = 'train'")
    assert sorted(r[0] for r in train_runs) == sorted(t["train_run_id"] for t in done)
    assert {r[1] for r in train_runs} == {"finished"}
    for t in done:
        n = rows(db, "SELECT count(*) FROM episodes WHERE run_id = ?", t["train_run_id"])
        assert n[0][0] == EPISODES


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_killed_driver_takes_its_ray_processes_and_folder_with_it(
    tmp_path: Path, how: signal.Signals
) -> None:
    """Killed mid-sweep (SIGKILL: no finally runs; SIGTERM), the driver leaves no Ray
    process and no Ray temporary folder behind."""
    from core.experiment.ray_reaper import ray_processes

    before = set(Path("/tmp").glob("aqmix-ray-*"))
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "core.cli", "sweep", *TINY, "--token-weights", "0.1,0.3"]
        + ["--seeds", "0", "--max-parallel", "1", "--out", str(out), "--no-log"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    deadline = time.monotonic() + 300
    try:
        made: set[Path] = set()
        # Killed once Ray's workers run a trial. The sweep's Ray folder is the new one whose
        # processes the driver started (another test or user may run a Ray of their own).
        while proc.poll() is None and time.monotonic() < deadline:
            made = {
                d
                for d in set(Path("/tmp").glob("aqmix-ray-*")) - before
                if any(_stat(p)[1:2] == [str(proc.pid)] for p in ray_processes(str(d)))
            }
            if made and any("ray::" in _cmdline(p) for d in made for p in ray_processes(str(d))):
                break
            time.sleep(0.1)
        assert proc.poll() is None and len(made) == 1, "the sweep never got its workers going"
        (temp_dir,) = made
        alive = {pid: _started(pid) for pid in ray_processes(str(temp_dir))}
        assert len(alive) >= 3
        proc.send_signal(how)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    while time.monotonic() < deadline and (ray_processes(str(temp_dir)) or temp_dir.exists()):
        time.sleep(0.2)
    assert not ray_processes(str(temp_dir)), "Ray processes outlived the driver"
    survivors = [(pid, _cmdline(pid)[:80]) for pid, t in alive.items() if _alive(pid, t)]
    assert not survivors, survivors
    assert not temp_dir.exists(), "Ray's temporary folder was left behind"


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


def _stat(pid: int) -> list[str]:
    """Fields of /proc/PID/stat after the command name (state first); [] when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return []


def _started(pid: int) -> str:
    """When the process started (clock ticks since boot): a pid's identity, as pids are reused."""
    fields = _stat(pid)
    return fields[19] if fields else ""


def _alive(pid: int, started: str) -> bool:
    """Whether the process seen at ``started`` still runs: not gone, not a zombie or dying,
    and not another process that has since been given its pid."""
    fields = _stat(pid)
    return bool(fields) and fields[0] not in ("Z", "X") and fields[19] == started


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--token-weights", "0.1,abc", "--seeds", "0"], "--token-weights takes"),
        (["--token-weights", "0.1,-1", "--seeds", "0"], "--token-weights takes"),
        (["--token-weights", "0.1,0.1", "--seeds", "0"], "--token-weights repeats 0.1"),
        (["--token-weights", "0.1", "--seeds", ""], "--seeds needs at least one seed"),
        (["--token-weights", "0.1", "--seeds", "0,x"], "--seeds takes"),
        (["--token-weights", "0.1", "--seeds", "0,,1"], "--seeds has an empty item"),
        (
            [
                "--token-weights",
                "0.1",
                "--seeds",
                "0",
                "--ray-address",
                f"127.0.0.1:{_closed_port()}",
            ],
            "cannot reach a Ray cluster at 127.0.0.1:",
        ),
        (
            ["--token-weights", "0.1", "--seeds", "0", "--ray-address", "no-port"],
            "--ray-address must be HOST:PORT",
        ),
        (["--token-weights", "0", "--seeds", "0", "--topologies", "star,tree"], "not 'tree'"),
        (["--token-weights", "0", "--seeds", "0", "--topologies", "star,star"], "repeats star"),
        (
            ["--token-weights", "0", "--seeds", "0", "--pass-through", "off,maybe"],
            "--pass-through takes off, unanimous (comma-separated), not 'maybe'",
        ),
        (["--token-weights", "0", "--seeds", "0", "--pass-through", "off,off"], "repeats off"),
        (["--token-weights", "0", "--seeds", "0", "--pass-through", ","], "needs at least one"),
        (
            ["--token-weights", "0", "--seeds", "0", "--backend", "local"]
            + ["--model-file", "/nonexistent/model.gguf"],
            "--model-file /nonexistent/model.gguf does not exist",
        ),
    ],
)
def test_bad_input_is_one_sentence_and_exit_2(
    flags: list[str], says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db, out = tmp_path / "b.duckdb", tmp_path / "out"
    code = main(["sweep", *TINY, *flags, "--out", str(out), "--db", str(db)])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.startswith("error: ") and says in err and "\n" not in err and err.endswith(".")
    assert not db.exists() and not out.exists() and not ray.is_initialized()


@pytest.fixture(scope="module")
def stored_sweeps(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store holding two sweeps' runs as the driver logs them, played without Ray:
    ``sweep-a`` evaluated the fixed topology ``single``; ``sweep-b`` holds a trial's
    eval run at token weight 0.5."""
    db = tmp_path_factory.mktemp("stored") / "s.duckdb"
    team = TeamOptions(benchmark="math", token_weight=0.1)
    played = run_policy(team, make_policy("single"), EVAL, 0)
    tag = {"sweep": fixed_key("sweep-a", "single", "off")}
    log_run(str(db), "eval", team, "single", 0, played, tag)
    key = {"id": "sweep-b", "token_weight": 0.5, "seed": 0, "method": "qmix", "knob": {}}
    log_run(str(db), "eval", replace(team, token_weight=0.5), "qmix", 0, played, {"sweep": key})
    # sweep-c: a local-model run stored under an older recipe (earlier replies cut at 3,000
    # characters, written fresh), as a run logged before the recipe changed holds.
    local = replace(team, backend="local")

    def log_older(sweep_id: str, edit) -> None:
        tag = {"sweep": fixed_key(sweep_id, "single", "off")}
        run_id = log_run(str(db), "eval", local, "single", 0, played, tag)
        con = duckdb.connect(str(db))
        try:
            (config,) = con.execute("SELECT config FROM runs WHERE id = ?", [run_id]).fetchone()
            config = json.loads(config)
            edit(config["prompting"])
            con.execute("UPDATE runs SET config = ? WHERE id = ?", [json.dumps(config), run_id])
        finally:
            con.close()

    log_older("sweep-c", lambda prompting: prompting.update(peer_chars=3000, layout="fresh"))
    # sweep-d: the same, stored before the config recorded a conversation's budget.
    log_older("sweep-d", lambda prompting: prompting.pop("conversation_tokens"))
    return db


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--resume", "sweep-a", "--no-log"], "--resume reads what the sweep stored, so it"),
        (["--resume", "sweep-nope"], "holds no run of sweep 'sweep-nope'."),
        (
            ["--resume", "sweep-a", "--benchmark", "code"],
            "sweep sweep-a was run with team.benchmark = 'math', but these flags give 'code';",
        ),
        (["--resume", "sweep-a", "--eval-episodes", "3"], "held out 8 tasks, not --eval-"),
        (
            ["--resume", "sweep-c", "--backend", "local"],
            "sweep sweep-c was run with prompting.layout = 'fresh', but these flags give 'conv",
        ),
        (
            ["--resume", "sweep-d", "--backend", "local"],
            "sweep sweep-d was stored before this version recorded prompting.conversation_tokens",
        ),
        (
            ["--resume", "sweep-a", "--pass-through", "unanimous"],
            "sweep sweep-a evaluated 'single' under pass-through off, which these flags leave",
        ),
        (
            ["--resume", "sweep-b"],
            "sweep sweep-b holds a trial (qmix, token weight 0.5, seed 0) that these flags",
        ),
        (["--resume", "sweep-a", "--db", "missing.duckdb"], "No episode store at "),
        (["--resume", "sweep-a", "--out", "other"], "holds the sweep.json of sweep-other, not"),
        ([], "already holds sweep sweep-other (sweep.json); continue it with --resume sweep-o"),
    ],
)
def test_bad_resume_is_one_sentence_and_exit_2(
    flags: list[str],
    says: str,
    stored_sweeps: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "sweep.json").write_text(json.dumps({"sweep_id": "sweep-other"}))
    before = rows(stored_sweeps, "SELECT id, status FROM runs ORDER BY id")
    where = ["--token-weights", "0.1", "--seeds", "0", "--out", "out" if flags else "other"]
    code = main(["sweep", *TINY, *where, "--db", str(stored_sweeps), *flags])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert err.startswith("error: ") and says in err and "\n" not in err and err.endswith(".")
    assert rows(stored_sweeps, "SELECT id, status FROM runs ORDER BY id") == before
    assert not (tmp_path / "out").exists() and not ray.is_initialized()


def test_wilson_interval_and_front_by_hand() -> None:
    lo, hi = wilson_interval(0.5, 10)  # textbook: 0.2366 .. 0.7634
    assert (round(lo, 4), round(hi, 4)) == (0.2366, 0.7634)
    lo, hi = wilson_interval(1.0, 8)
    assert hi == 1.0 and math.isclose(lo, 8 / (8 + 1.959963984540054**2))
    a = {"accuracy": 0.9, "mean_tokens": 100.0}
    b = {"accuracy": 0.8, "mean_tokens": 50.0}
    c = {"accuracy": 0.8, "mean_tokens": 60.0}  # dominated by b
    d = {"accuracy": 0.9, "mean_tokens": 100.0}  # ties a: both stay
    e = {"accuracy": 0.5, "mean_tokens": 200.0}  # dominated by all
    assert pareto_front([a, b, c, d, e]) == [b, a, d]


def _servers_below(pid: int) -> set[int]:
    """Pids of llama.cpp servers (:mod:`core.backends.local_server`) descended from ``pid``."""
    parents, servers = {}, set()
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
            if b"core.backends.local_server" in (entry / "cmdline").read_bytes():
                servers.add(int(entry.name))
        except (OSError, ValueError, IndexError):
            continue
    below = set()
    for server in servers:
        p = server
        while p > 1 and p != pid:
            p = parents.get(p, 1)
        if p == pid:
            below.add(server)
    return below


class TestOnOneLocalRay:
    """Three sweeps (one resumed twice) on one local Ray, the sweep's own
    (:func:`ray_session`, stopped and checked gone when the class ends), which
    :func:`run_sweep` reuses: a Ray started per test costs ~18 CPU-seconds (its daemons,
    and workers importing PyTorch again). The Ctrl-C and killed-driver tests start and stop
    a Ray of their own in the driver's process (:func:`_local_ray`); the tests that check no
    Ray is left running run outside this class."""

    @pytest.fixture(scope="class", autouse=True)
    def one_local_ray(self) -> Iterator[None]:
        with ray_session(None):
            yield
        assert not ray.is_initialized()

    def test_sweep_on_a_local_ray(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        db, out = tmp_path / "s.duckdb", tmp_path / "out"
        args = ["--token-weights", "0.1,1.0", "--seeds", "0,1", "--token-penalty", "linear"]
        result = sweep_json(capsys, *args, "--out", str(out), "--db", str(db))
        assert result["token_penalty"] == "linear"
        check_sweep(result, db, out, [0.1, 1.0], [0, 1])

        assert main(["runs", "--db", str(db), "--json"]) == 0
        listed = {r["id"]: r for r in json.loads(capsys.readouterr().out)}
        for t in result["trials"]:
            run = listed[t["train_run_id"]]
            assert (run["token_weight"], run["token_penalty"]) == (t["token_weight"], "linear")

        # `bench learning --from-sweep` reads the same points back from the store, paired.
        report = from_sweep(db, None, 1.0)
        assert (report["sweep_id"], report["seeds"], report["eval_episodes"]) == (
            result["sweep_id"],
            [0, 1],
            EVAL,
        )
        trials = {t["seed"]: t for t in result["trials"] if t["token_weight"] == 1.0}
        for seed, row in report["all"]["learned"].items():
            assert row["accuracy"] == pytest.approx(trials[int(seed)]["accuracy"], abs=1e-4)
            assert row["mean_tokens"] == pytest.approx(trials[int(seed)]["mean_tokens"], abs=0.1)
        fixed = {f["policy"]: f for f in result["fixed"]}
        for name, row in report["all"]["fixed"].items():
            rescored = next(r for r in fixed[name]["rewards"] if r["token_weight"] == 1.0)
            assert row["mean_reward"] == pytest.approx(rescored["mean_reward"], abs=1e-4)
        with pytest.raises(UserError, match="trials at"):
            from_sweep(db, None, 0.5)
        check_resume(result, db, out, args, capsys)

    def test_a_failed_trial_is_reported_and_the_others_finish(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Also a sweep over both decision rules (``--pass-through off,unanimous``): every trial
        and the fixed topology play under each, each rule's points are stored apart and have a
        front of their own, and resuming tells the two rules' points apart."""

        @ray.remote(num_cpus=1)
        def train_or_fail(spec):  # a trial that dies on seed 1, as a lost disk would
            if spec.seed == 1:
                raise RuntimeError("no space left on device\nsecond line")
            return train_trial(spec)

        reports: list[str] = []
        seen: list[SweepStatus] = []
        live: list[dict] = []
        db = tmp_path / "f.duckdb"
        train_config = TrainConfig(
            episodes=EPISODES, n_envs=8, device="cpu",
            agent=AgentNetConfig(gnn_hidden=16, gru_hidden=16, q_hidden=16),
        )  # fmt: skip
        sweep = SweepConfig(
            token_weights=(0.1,), seeds=(0, 1), out=tmp_path / "out", eval_episodes=EVAL,
            topologies=("single",), pass_through=("off", "unanimous"),
        )  # fmt: skip
        assert sweep.counts() == (4, 2)  # what the progress bar counts: each part under each rule
        result = run_sweep(
            TeamOptions(benchmark="math"),
            sweep,
            train_config,
            db=str(db),
            progress=lambda s: (seen.append(SweepStatus(**vars(s))), live.append(_live(tmp_path))),
            report=reports.append,
            trial_task=train_or_fail,
        )
        assert sorted(reports) == [
            "qmix, token weight 0.1, seed 1 failed: RuntimeError: no space left on device",
            "qmix, token weight 0.1, seed 1, pass-through unanimous failed: RuntimeError: no "
            "space left on device",
        ]
        assert result["failed"] == [
            {
                "method": "qmix",
                "knob": {},
                "token_weight": 0.1,
                "seed": 1,
                "pass_through": rule,
                "error": "RuntimeError: no space left on device",
            }
            for rule in ("off", "unanimous")
        ]
        # Each rule's trial and fixed topology, apart: their own checkpoints, runs and rule.
        assert result["pass_through"] == ["off", "unanimous"]
        trials, fixed = result["trials"], result["fixed"]
        assert [(t["seed"], t["pass_through"]) for t in trials] == [(0, "off"), (0, "unanimous")]
        assert [(f["policy"], f["pass_through"]) for f in fixed] == [
            ("single", "off"), ("single", "unanimous"),
        ]  # fmt: skip
        assert [Path(t["checkpoint"]).name for t in trials] == [
            "tw0.1-seed0.pt", "tw0.1-seed0-pass-through-unanimous.pt",
        ]  # fmt: skip
        for point in trials + fixed:
            rule = point["pass_through"]
            run_ids = [point["eval_run_id"], point.get("train_run_id")]
            for (config,) in rows(db, "SELECT config FROM runs WHERE id IN (?, ?)", *run_ids):
                config = json.loads(config)
                assert config["sweep"]["pass_through"] == config["team"]["pass_through"] == rule
            # The rule was played, not only recorded: only its runs spare a decision call.
            spared = rows(
                db, "SELECT count(*) FILTER (WHERE pass_through = 'unanimous') FROM episodes "
                "WHERE run_id IN (?, ?)", *run_ids,
            )[0][0]  # fmt: skip
            assert (spared > 0) == (rule == "unanimous" and point in trials), (point, spared)
        # One front per rule, each the non-dominated subset of its own rule's points.
        for rule in ("off", "unanimous"):
            own = [p for p in trials + fixed if p["pass_through"] == rule]
            front = [p for p in result["front"] if p["pass_through"] == rule]
            assert front and all(
                not any(
                    q["accuracy"] >= p["accuracy"] and q["mean_tokens"] <= p["mean_tokens"]
                    and (q["accuracy"], q["mean_tokens"]) != (p["accuracy"], p["mean_tokens"])
                    for q in own
                )
                for p in front
            )  # fmt: skip
        # The store's sweep points, as the lab reads them, carry the rule of each point.
        points = sweep_points(db, result["sweep_id"])
        assert sorted(zip(points["policy"], points["pass_through"], strict=True)) == [
            ("qmix", "off"), ("qmix", "unanimous"), ("single", "off"), ("single", "unanimous"),
        ]  # fmt: skip
        # The table names each point's rule.
        _print_sweep(result)
        table = capsys.readouterr().out
        assert "front of its pass-through rule" in table and "unanimous" in table

        assert (seen[-1].done, seen[-1].failed, seen[-1].running) == (2, 2, 0)
        assert (seen[-1].fixed_total, seen[-1].fixed_done) == (2, 2)
        # The lab sees the sweep live from <db>.sweeps/: its plan from the start, how far it is
        # while it runs, and how it ended.
        assert live[0]["state"] == "running" and live[0]["total"] == 4
        assert live[0]["token_weights"] == [0.1] and live[0]["seeds"] == [0, 1]
        assert live[0]["pass_through"] == ["off", "unanimous"]
        assert any(d["running"] > 0 for d in live)
        end = _live(tmp_path)
        assert (end["state"], end["done"], end["failed"], end["running"]) == ("finished", 2, 2, 0)
        assert end["sweep_id"] == result["sweep_id"] and end["pid"] == os.getpid()
        train_runs = rows(db, "SELECT id FROM runs WHERE kind = 'train'")
        assert sorted(r[0] for r in train_runs) == sorted(t["train_run_id"] for t in trials)

        # Resuming, the rule is part of a point's identity: each rule's seed-0 trial and fixed
        # topology are done, each rule's seed-1 trial is left; without the pass-through the
        # stored unanimous trial is one these flags leave out.
        sid, team = result["sweep_id"], TeamOptions(benchmark="math")
        again = replace(sweep, resume=sid)
        stored = read_stored_sweep(
            str(db), plan_trials(sid, team, again, train_config, BaselineTrainConfig()),
            plan_fixed(sid, team, again), again,
        )  # fmt: skip
        assert stored.trials == trials and stored.fixed == fixed and not stored.stale
        assert [(s.seed, s.pass_through) for s in stored.missing] == [(1, "off"), (1, "unanimous")]
        assert not stored.missing_topologies
        paper = replace(again, pass_through=("off",))
        with pytest.raises(UserError, match=r"pass-through unanimous[,)] .*these flags leave out"):
            read_stored_sweep(
                str(db), plan_trials(sid, team, paper, train_config, BaselineTrainConfig()),
                plan_fixed(sid, team, paper), paper,
            )  # fmt: skip

    def test_a_local_model_sweep_shares_one_server_and_leaves_none(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str], local_server
    ) -> None:
        """``--backend local``: every trial and topology plays on the one server the sweep's
        process runs (here the session's, which the sweep must leave running); no Ray worker
        starts a server of its own, and none is left when the sweep ends."""
        db, out = tmp_path / "local.duckdb", tmp_path / "out"
        seen: set[int] = set()
        done = threading.Event()

        def watch() -> None:  # a worker's own server would be a descendant of this process
            while not done.is_set():
                seen.update(_servers_below(os.getpid()) - {local_server.pid})
                done.wait(0.2)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            code = main(
                ["sweep", "--backend", "local", "--benchmark", "math", "--agents", "solver",
                 "--rounds", "1", "--episodes", "1", "--eval-episodes", "1", "--n-envs", "1",
                 "--hidden", "8", "--topologies", "single", "--max-tokens", "8", "--no-cache",
                 "--token-weights", "0", "--seeds", "0", "--out", str(out), "--db", str(db),
                 "--json"]
            )  # fmt: skip
        finally:
            done.set()
            watcher.join()
        captured = capsys.readouterr()
        assert code == 0, captured.err[-3000:]
        result = json.loads(captured.out)
        assert not result["failed"] and [f["policy"] for f in result["fixed"]] == ["single"]
        assert f"local model {local_server.model.name} on {local_server.url}" in captured.err
        assert "fixed topology single: accuracy" in captured.err  # a line per finished part
        assert not seen and not _servers_below(os.getpid()) - {local_server.pid}
        assert local_server.gone() is None  # not the sweep's to stop

        # Training, held-out and fixed episodes: the server's usage, call by call.
        episodes = rows(
            db,
            "SELECT r.kind, e.policy, e.backend, e.tokens, sum(c.prompt_tokens + c.completion_tokens), "
            "bool_and(c.usage_reported AND c.error IS NULL AND NOT c.cache_hit) "
            "FROM episodes e JOIN runs r ON r.id = e.run_id "
            "JOIN llm_calls c USING (run_id, episode) GROUP BY ALL ORDER BY ALL",
        )
        assert [(kind, policy) for kind, policy, *_ in episodes] == [
            ("eval", "qmix"), ("eval", "single"), ("train", "env"),  # a training episode's policy
        ]  # fmt: skip
        for _, _, backend, tokens, usage, reported in episodes:
            assert backend == "local" and reported and tokens == usage > 0
