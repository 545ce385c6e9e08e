"""The foundation's CLI end to end: train/eval on the relay game, ``--env`` files, errors, bench.

The learning run and a checkpoint that does not fit its ``--env`` run the real entry point in
a subprocess (exit code, stderr, no traceback as a user sees them); the other cases, the
learned policy's evaluation among them, call :func:`core.cli.main` in-process: the same
code path, without paying ~3 s of imports per case.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from core.cli import main
from core.qmix.checkpoint import read_payload
from tests.core.torch_threads import one_torch_thread  # noqa: F401
from tests.core.user_envs import CORRIDOR, MAKE

REPO = Path(__file__).resolve().parents[2]

TINY_ENV = CORRIDOR + MAKE


def agentqmix(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run the real CLI in a fresh interpreter."""
    env = {
        **os.environ,
        # Tiny networks: one intra-op thread is as fast, and far faster when the
        # shared 2-core machine is busy (OpenMP threads then spin against each other).
        "OMP_NUM_THREADS": "1",
        "COLUMNS": "200",
    }
    cmd = [sys.executable, "-c", "from core.cli import main; main()", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO, env=env)


def assert_user_error(result: subprocess.CompletedProcess, needle: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error:") and needle in lines[0]
    assert "Traceback" not in result.stderr and result.stdout == ""


@pytest.fixture(scope="module")
def relay_checkpoint(tmp_path_factory) -> Path:
    """A QMIX team trained on the relay game through the CLI, with the child collector
    (tests/core/qmix/test_collect.py relies on this run for learning under the child's lag).

    Measured (in-process, same code): 1500 episodes at width 64 with 8 envs in lockstep
    reached the optimal return on seeds 0-7; 1200 episodes, width 32 with 2000 episodes,
    or 16 envs in lockstep failed on some of seeds 0-2.
    """
    out = tmp_path_factory.mktemp("relay") / "relay.pt"
    flags = "--episodes 1500 --seed 0 --hidden 64 --n-envs 8 --device cpu"
    result = agentqmix(
        "train", "--env", "core.qmix.games:relay_game", *flags.split(), "--out", str(out)
    )
    assert result.returncode == 0, result.stderr
    assert "trained 1500 episodes" in result.stderr
    # Played by the child collector (the default), one iteration behind the learner: the
    # optimal return the team reaches below shows that lag does not stop learning.
    assert read_payload(out)["resume"]["train_config"]["collect_ahead"] is True
    return out


def test_qmix_learns_the_relay_game_to_its_optimal_greedy_return(relay_checkpoint, capsys):
    flags = "--episodes 32 --seed 3 --device cpu --json"
    code = main(
        ["eval", "--env", "core.qmix.games:relay_game", "--checkpoint", str(relay_checkpoint),
         *flags.split()]
    )  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err
    summary = json.loads(captured.out)
    assert summary["episodes"] == 32
    # Optimal = max_steps = 3: every agent copies the signal agent 0 relays, every round.
    assert summary["mean_return"] == 3.0


def test_checkpoint_for_another_environment_exits_2(relay_checkpoint, tmp_path):
    (tmp_path / "corridor.py").write_text(TINY_ENV)
    result = agentqmix(
        "eval", "--env", f"{tmp_path / 'corridor.py'}:make", "--checkpoint", str(relay_checkpoint),
        "--device", "cpu", "--json",
    )  # fmt: skip
    assert_user_error(result, "does not fit this environment")


def test_env_from_a_python_file(tmp_path, capsys):
    env_file = tmp_path / "corridor.py"
    env_file.write_text(TINY_ENV)
    out = tmp_path / "corridor.pt"
    flags = "--episodes 16 --hidden 8 --seed 1 --device cpu --n-envs 4"
    assert main(["train", "--env", f"{env_file}:make", *flags.split(), "--out", str(out)]) == 0
    assert out.is_file()
    capsys.readouterr()
    flags = "--episodes 5 --device cpu --json"
    args = ["eval", "--env", f"{env_file}:make", "--checkpoint", str(out), *flags.split()]
    assert main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["episodes"] == 5 and 0.0 <= summary["mean_return"] <= 2.0


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("core.qmix.games", "must look like package.module:factory"),
        ("no_such_package.env:make", "cannot be imported"),
        ("core.qmix.games:nope", "is not a callable"),
        ("missing/env.py:make", "does not exist"),
        ("core.errors:UserError", "does not follow the environment protocol"),
    ],
)
def test_bad_env_specs_exit_2(tmp_path, capsys, spec, needle):
    assert main(["train", "--env", spec, "--out", str(tmp_path / "x.pt")]) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "x.pt").exists()


def test_unreadable_checkpoints_exit_2(tmp_path, capsys):
    import torch

    corrupt = tmp_path / "bad.pt"
    corrupt.write_bytes(b"\x00garbage" * 100)
    other = tmp_path / "other.pt"
    torch.save({"weights": torch.zeros(2)}, other)
    cases = (
        (corrupt, "is not a readable agentqmix checkpoint"),
        (other, "is not an agentqmix checkpoint"),
        (tmp_path / "no.pt", "does not exist"),
    )
    for path, needle in cases:
        args = ["eval", "--env", "core.qmix.games:relay_game", "--checkpoint", str(path), "--json"]
        code = main(args)
        captured = capsys.readouterr()
        assert code == 2 and captured.out == ""
        lines = captured.err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0]


def test_bad_mixer_exits_2(tmp_path, capsys):
    out = str(tmp_path / "x.pt")
    assert (
        main(["train", "--env", "core.qmix.games:relay_game", "--mixer", "sum", "--out", out]) == 2
    )
    assert "--mixer must be one of qmix, vdn" in capsys.readouterr().err


def test_bench_learner_prints_json():
    # One thread: with torch's default two, OpenMP threads spin against each other (and the
    # other test worker) through the thousands of tiny timed matmuls: 39 CPU-seconds, not 3.
    flags = "--agents 3 --batch 4 --rounds 2 --seconds 0.3 --device cpu --threads 1 --json"
    done = subprocess.run(
        [sys.executable, "-m", "core.cli", "bench", "learner", *flags.split()],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["n_agents"] == 3 and report["batch"] == 4 and report["rounds"] == 2
    assert report["updates"] >= 1 and report["train_steps_per_s"] > 0


def test_bench_lists_the_benchmarks_and_rejects_an_unknown_one(capsys):
    assert main(["bench"]) == 0
    listed = capsys.readouterr().err
    assert "learner" in listed and "store" in listed and "lab" in listed
    assert main(["bench", "nope"]) == 2
    assert "no benchmark 'nope'" in capsys.readouterr().err
