"""Command lines the lab hands to the CLI, and the job manager on real child processes."""

import json
import subprocess
import sys
import time

import pytest
import typer.main

from core.cli import app
from lab.demo import demo_steps
from lab.jobs import (
    TRAIN_METHODS,
    CommandQueue,
    FailureChoice,
    JobManager,
    Step,
    TeamSpec,
    TrainParams,
    eval_command,
    fail_spec,
    resume_command,
    robustness_command,
    side_by_side_commands,
    team_roles,
    train_command,
)
from tests.lab.conftest import ROOT


def _parses(argv):
    """The CLI (typer/click) accepts the command line: every flag exists."""
    assert argv[:3] == [sys.executable, "-m", "core.cli"]
    click_app = typer.main.get_command(app)
    ctx = click_app.make_context("agentqmix", list(argv[3:]), resilient_parsing=True)
    sub = click_app.get_command(ctx, argv[3])
    sub.make_context(argv[3], list(argv[4:]))  # raises on an unknown flag or a bad value


def test_command_lines_use_existing_flags(tmp_path):
    team = TeamSpec(roles=team_roles(3), rounds=2)
    for method in TRAIN_METHODS:
        params = TrainParams(team, episodes=5, method=method)
        argv = train_command(tmp_path / "db", params, tmp_path / "c.pt")
        _parses(argv)
        assert argv[argv.index("--method") + 1] == method
        assert ("--hidden" in argv) == (method == "qmix")  # refused for the methods
    with pytest.raises(ValueError, match="method must be one of"):
        TrainParams(team, method="swarm").validate()
    _parses(
        eval_command(tmp_path / "db", team, policy="full", failures=[FailureChoice(1, "crash", 1)])
    )
    _parses(robustness_command(tmp_path / "db", team, checkpoint=str(tmp_path / "c.pt")))
    failed, healthy = side_by_side_commands(
        tmp_path / "db", team, 4, 7, [FailureChoice(0, "garbled", 1)], policy="star"
    )
    assert failed[failed.index("--fail") + 1] == "0:garbled@1"
    assert "--fail" not in healthy
    for cmd in (failed, healthy):  # only the forked episode, the same one on both sides
        assert cmd[cmd.index("--episodes") + 1] == "1" and cmd[cmd.index("--first") + 1] == "4"
        assert cmd[cmd.index("--seed") + 1] == "7"


def test_demo_and_resume_command_lines_use_existing_flags(tmp_path):
    for step in demo_steps(tmp_path / "db", tmp_path):
        _parses(step.argv)
    _parses(resume_command(tmp_path / "db", "train-20260101-000000-abcd"))


def test_specs_validate():
    assert (
        fail_spec([FailureChoice(0, "crash"), FailureChoice(2, "byzantine", 1)])
        == "0:crash@0,2:byzantine@1"
    )
    with pytest.raises(ValueError, match="mode"):
        fail_spec([FailureChoice(0, "melt")])
    with pytest.raises(ValueError, match="give exactly one"):
        eval_command("db", TeamSpec())
    assert TeamSpec.from_run_config({"team": {"roles": ["a", "b"], "rounds": 5}}).roles == (
        "a",
        "b",
    )


def test_jobs_run_stop_and_queue(tmp_path):
    manager = JobManager(tmp_path)
    ok = manager.start(
        "ok", [sys.executable, "-c", "import json; print(json.dumps({'run_id': 'r1'}))"]
    )
    assert ok.wait(30) == 0 and ok.status == "finished" and ok.result() == {"run_id": "r1"}
    slow = manager.start("slow", [sys.executable, "-c", "import time; time.sleep(60)"])
    assert slow.status == "running"
    slow.stop(grace_s=5)
    assert slow.status == "stopped"
    queue = CommandQueue(
        manager,
        [Step("a", [sys.executable, "-c", "pass"]),
         Step("b", [sys.executable, "-c", "import sys; sys.stderr.write('boom'); sys.exit(3)"]),
         Step("c", [sys.executable, "-c", "pass"])],
    ).start()  # fmt: skip
    queue.join(60)
    assert queue.finished and queue.done == 1 and "boom" in queue.error
    assert [j.label for j in manager.jobs()][:2] == ["b", "a"]


def _until(predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_any_process_sees_and_stops_a_job_through_the_registry(tmp_path):
    owner = JobManager(tmp_path)
    job = owner.start("slow", [sys.executable, "-c", "import time; time.sleep(60)"], kind="train")
    # Another lab server (another process) on the same database sees the job...
    listing = subprocess.run(
        [sys.executable, "-c",
         "import sys; from lab.jobs import JobManager; "
         "print([(j.id, j.status, j.kind) for j in JobManager(sys.argv[1]).running()])",
         str(tmp_path)],
        capture_output=True, text=True, check=True, cwd=ROOT,
    )  # fmt: skip
    assert listing.stdout.strip() == str([(job.id, "running", "train")])
    # ...and stops it, though it did not start it.
    subprocess.run(
        [sys.executable, "-c",
         "import sys; from lab.jobs import JobManager; "
         "JobManager(sys.argv[1]).get(sys.argv[2]).stop(grace_s=10)",
         str(tmp_path), job.id],
        check=True, cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert job.wait(10) is not None
    assert job.status == "stopped"
    assert JobManager(tmp_path).get(job.id).status == "stopped"


def test_exit_codes_reach_other_readers_and_dead_pids_do_not_pass_for_running(tmp_path):
    owner = JobManager(tmp_path)
    ok = owner.start("ok", [sys.executable, "-c", "pass"])
    bad = owner.start("bad", [sys.executable, "-c", "raise SystemExit(3)"])
    ok.wait(30), bad.wait(30)
    reader = JobManager(tmp_path)
    _until(lambda: reader.get(ok.id).returncode == 0 and reader.get(bad.id).returncode == 3)
    assert reader.get(ok.id).status == "finished" and reader.get(bad.id).status == "failed"
    # A registry entry whose process is gone (its server died before recording the exit).
    entry = json.loads(ok.entry_path.read_text())
    entry |= {"id": "lost", "pid": ok.pid, "proc_start": "0"}
    entry.pop("returncode")
    (tmp_path / "lost.job.json").write_text(json.dumps(entry))
    assert reader.get("lost").status == "ended" and not reader.get("lost").alive


def test_local_commands_use_the_lab_sessions_server(local_server, tmp_path):
    from core.backends.local_server import ATTACH_ENV
    from lab.jobs import local_server_env

    argv = eval_command(tmp_path / "db.duckdb", TeamSpec(backend="local"), policy="star")
    assert argv[argv.index("--backend") + 1] == "local"
    shared = json.loads(local_server_env(argv)[ATTACH_ENV])
    assert shared["url"] == local_server.url  # the one server of this process, not a new one
    sim = eval_command(tmp_path / "db.duckdb", TeamSpec(), policy="star")
    assert local_server_env(sim) == {}
    with pytest.raises(ValueError, match="backend"):
        TeamSpec(backend="openai").validate()
