"""Command lines the lab hands to the CLI, and the job manager on real child processes."""

import sys

import pytest
import typer.main

from core.cli import app
from lab.jobs import (
    CommandQueue,
    FailureChoice,
    JobManager,
    Step,
    TeamSpec,
    TrainParams,
    eval_command,
    fail_spec,
    robustness_command,
    side_by_side_commands,
    team_roles,
    train_command,
)


def _parses(argv):
    """The CLI (typer/click) accepts the command line: every flag exists."""
    assert argv[:3] == [sys.executable, "-m", "core.cli"]
    click_app = typer.main.get_command(app)
    ctx = click_app.make_context("agentqmix", list(argv[3:]), resilient_parsing=True)
    sub = click_app.get_command(ctx, argv[3])
    sub.make_context(argv[3], list(argv[4:]))  # raises on an unknown flag or a bad value


def test_command_lines_use_existing_flags(tmp_path):
    team = TeamSpec(roles=team_roles(3), rounds=2)
    _parses(train_command(tmp_path / "db", TrainParams(team, episodes=5), tmp_path / "c.pt"))
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
