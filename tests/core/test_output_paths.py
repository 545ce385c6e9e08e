"""No command writes over what is not a regular file (issue 19 item 8).

Every output path a user can name (``--out``, ``--db`` and the files beside it, the
``--parquet`` folder and its files, ``--cache-dir``, a sweep's ``--out`` and the files in
it) is pointed at a named pipe, a socket or a symlink to a pipe: the command must refuse
with one sentence and exit code 2 before any work, and the special file must still be
there, untouched. Pipes and sockets stand for device nodes (``/dev/full``): the test never
points a command at a real device, since a regression would replace it on this machine;
:func:`test_devices_are_refused_by_the_check` checks ``/dev/null`` and ``/dev/full`` with
the stat-only check instead.

Commands run in this process (:func:`core.cli.main`); a SIGALRM guard turns a regression
that blocks on opening a pipe into a failure instead of a hung test.
"""

from __future__ import annotations

import os
import signal
import socket
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from core.cli import main
from core.errors import UserError
from core.paths import check_not_special, write_file
from core.qmix.checkpoint import save_checkpoint
from core.qmix.encoders import AgentNetConfig, AgentNetwork
from core.qmix.env import EnvShapes
from core.qmix.mixers import MixerConfig, make_mixer
from core.store.synthetic import synthetic_episode
from core.store.writer import LoggerConfig, RunLogger
from tests.core.torch_threads import one_torch_thread  # noqa: F401

GUARD_S = 20


@pytest.fixture
def guard() -> Iterator[None]:
    def expired(signum: int, frame: object) -> None:
        raise TimeoutError("the command blocked on a special file")

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(GUARD_S)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def fifo(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    return path


def sock(path: Path) -> Path:
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.close()
    return path


def link_to_fifo(path: Path) -> Path:
    target = fifo(path.with_name(path.name + ".pipe"))
    path.symlink_to(target)
    return target


def train(*extra: str) -> list[str]:
    flags = ["--episodes", "1", "--n-envs", "1", "--hidden", "8", "--eval-episodes", "0"]
    return ["train", "--benchmark", "math", *flags, *extra]


def team_eval(*extra: str) -> list[str]:
    return ["eval", "--benchmark", "math", "--policy", "full", "--episodes", "1", *extra]


def openai_eval(*extra: str) -> list[str]:
    flags = ["--backend", "openai", "--model", "m", "--base-url", "http://127.0.0.1:9/v1"]
    return team_eval("--no-log", *flags, *extra)


def sweep(out: Path, *extra: str) -> list[str]:
    flags = ["--token-weights", "0", "--seeds", "0", "--episodes", "1", "--eval-episodes", "1"]
    return ["sweep", "--benchmark", "math", *flags, "--out", str(out), "--no-log", *extra]


# name -> (make the special file(s) under d, return (argv, special paths that must survive))
Case = Callable[[Path, Path], tuple[list[str], list[Path]]]
CASES: dict[str, Case] = {
    "train --out pipe": lambda d, db: (train("--no-log", "--out", str(fifo(d / "m.pt"))), [d / "m.pt"]),
    "train --out socket": lambda d, db: (train("--no-log", "--out", str(sock(d / "m.pt"))), [d / "m.pt"]),
    "train --out link to pipe": lambda d, db: (
        train("--no-log", "--out", str(d / "m.pt")),
        [link_to_fifo(d / "m.pt")],
    ),
    "train --method agentprune --out pipe": lambda d, db: (
        ["train", "--benchmark", "math", "--method", "agentprune", "--episodes", "1", "--no-log",
         "--eval-episodes", "0", "--out", str(fifo(d / "m.pt"))],
        [d / "m.pt"],
    ),
    "train --db pipe": lambda d, db: (
        train("--out", str(d / "m.pt"), "--db", str(fifo(d / "s.duckdb"))),
        [d / "s.duckdb"],
    ),
    "eval --db pipe": lambda d, db: (team_eval("--db", str(fifo(d / "s.duckdb"))), [d / "s.duckdb"]),
    "eval --db, its WAL a pipe": lambda d, db: (
        team_eval("--db", str(d / "s.duckdb")),
        [fifo(d / "s.duckdb.wal")],
    ),
    "eval --db, its spool a pipe": lambda d, db: (
        team_eval("--db", str(d / "s.duckdb")),
        [fifo(d / "s.duckdb.spool")],
    ),
    "runs --db pipe": lambda d, db: (["runs", "--db", str(fifo(d / "s.duckdb"))], [d / "s.duckdb"]),
    "sql --db socket": lambda d, db: (
        ["sql", "SELECT 1", "--db", str(sock(d / "s.duckdb"))],
        [d / "s.duckdb"],
    ),
    "repair --db pipe": lambda d, db: (["repair", "--db", str(fifo(d / "s.duckdb"))], [d / "s.duckdb"]),
    "lab --db pipe": lambda d, db: (["lab", "--db", str(fifo(d / "s.duckdb"))], [d / "s.duckdb"]),
    "export --parquet pipe": lambda d, db: (
        ["export", "--run", RUN_ID[0], "--db", str(db), "--parquet", str(fifo(d / "x"))],
        [d / "x"],
    ),
    "export --parquet, a table's file a pipe": lambda d, db: (
        ["export", "--run", RUN_ID[0], "--db", str(db), "--parquet", str(d / "x")],
        [fifo(d / "x" / "episodes.parquet")],
    ),
    "--cache-dir pipe": lambda d, db: (openai_eval("--cache-dir", str(fifo(d / "c"))), [d / "c"]),
    "sweep --out pipe": lambda d, db: (sweep(fifo(d / "sw")), [d / "sw"]),
    "sweep --out, sweep.json a pipe": lambda d, db: (sweep(d / "sw"), [fifo(d / "sw" / "sweep.json")]),
    "sweep --out, a trial's checkpoint a pipe": lambda d, db: (
        sweep(d / "sw"),
        [fifo(d / "sw" / "tw0-seed0.pt")],
    ),
}  # fmt: skip
RUN_ID: list[str] = []


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("store") / "store.duckdb"
    with RunLogger(db, "eval", {}, settings=LoggerConfig(background=False)) as logger:
        logger.log_episodes([synthetic_episode(0)])
        RUN_ID.append(logger.run_id)
    return db


@pytest.mark.parametrize("name", list(CASES))
def test_a_special_file_is_refused_and_left_alone(
    name: str,
    store: Path,
    tmp_path: Path,
    guard: None,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AGENTQMIX_CACHE", str(tmp_path / "cache"))
    # `lab` becomes the Streamlit launcher by exec: never in this test process.
    monkeypatch.setattr(os, "execv", lambda *a: pytest.fail("lab started despite a bad --db"))
    d = tmp_path / "out"
    d.mkdir()
    argv, specials = CASES[name](d, store)
    modes = {p: os.lstat(p).st_mode for p in specials}
    assert main(argv) == 2
    err = capfd.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "not a regular file" in lines[0] or "not a folder" in lines[0], err
    for path, mode in modes.items():
        assert os.lstat(path).st_mode == mode, f"{path} was replaced"
        assert not stat.S_ISREG(os.lstat(path).st_mode)


def test_a_pipe_named_like_a_temporary_file_is_not_opened(tmp_path: Path, guard: None) -> None:
    """Checkpoints and every other replaced file are written to a fresh temporary name,
    never to a fixed one (``m.pt.tmp``) that may already be a pipe or a link."""
    from core.baselines.checkpoint import save_method
    from core.baselines.method import TeamShape
    from core.baselines.registry import build_method, method_config

    traps = [fifo(tmp_path / n) for n in ("m.pt.tmp", "sweep.json.tmp", "b.pt.tmp")]
    shapes = EnvShapes(n_agents=2, n_actions=2, obs_dim=1, state_dim=1, max_steps=2)
    agent_cfg, mixer_cfg = (
        AgentNetConfig(gnn_hidden=8, gru_hidden=8, q_hidden=8),
        MixerConfig(embed=8, hypernet_hidden=8),
    )
    agent = AgentNetwork(shapes.obs_dim, shapes.n_agents, shapes.n_actions, agent_cfg)
    mixer = make_mixer(shapes.n_agents, shapes.state_dim, mixer_cfg)
    save_checkpoint(tmp_path / "m.pt", agent, mixer, shapes, agent_cfg, mixer_cfg, env={})
    write_file(tmp_path / "sweep.json", b"{}", "--out")
    shape = TeamShape(n_agents=2, n_rounds=2, feature_width=4)
    method = build_method("agentprune", method_config("agentprune"), shape)
    save_method(tmp_path / "b.pt", method, team={"token_weight": 0.1})
    assert (tmp_path / "m.pt").is_file() and (tmp_path / "sweep.json").read_bytes() == b"{}"
    assert (tmp_path / "b.pt").is_file()
    assert all(stat.S_ISFIFO(os.lstat(t).st_mode) for t in traps)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["m.pt", "m.pt.tmp", "sweep.json", "sweep.json.tmp", "b.pt", "b.pt.tmp"]
    ), "a temporary file was left behind"


@pytest.mark.parametrize("device", ["/dev/null", "/dev/full"])
def test_devices_are_refused_by_the_check(device: str) -> None:
    with pytest.raises(UserError, match="is a character device, not a regular file"):
        check_not_special(device, "--out")
