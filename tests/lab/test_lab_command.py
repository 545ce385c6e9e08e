"""``agentqmix lab``: a bad ``--db`` ends in one sentence and exit 2, before any server starts."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from core.cli import main
from tests.lab.conftest import ROOT


@pytest.mark.parametrize(
    ("case", "says"),
    [
        ("missing folder", "does not exist"),
        ("directory", "is a folder"),
        ("corrupt file", "is not a DuckDB database"),
        ("truncated", "is damaged"),  # not "locked by another process"
    ],
)
def test_bad_database_exits_2_with_one_line(tmp_path, capsys, case, says):
    if case == "missing folder":
        db = tmp_path / "nowhere" / "lab.duckdb"
    elif case == "directory":
        db = tmp_path / "a-folder.duckdb"
        db.mkdir()
    elif case == "corrupt file":
        db = tmp_path / "notes.duckdb"
        db.write_text("these are my notes, not a database\n" * 20)
    else:  # a DuckDB header followed by garbage
        db = tmp_path / "cut.duckdb"
        db.write_bytes(b"\0" * 8 + b"DUCK" + b"\x07" * 5000)
    # A free port: the command must fail on the database, not on the port.
    assert main(["lab", "--db", str(db), "--port", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0, err
    assert str(db) in err and says in err and "Traceback" not in err


def test_a_busy_port_exits_2_with_one_line(tmp_path, capsys):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main(["lab", "--db", str(tmp_path / "x.duckdb"), "--port", str(port)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"port {port}" in err


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as r:
            return r.read() == b"ok"
    except OSError:
        return False


def _serving(port: int) -> list[int]:
    """Pids of processes whose command line serves Streamlit on ``port``."""
    out = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"streamlit" in b" ".join(argv) and str(port).encode() in argv:
            out.append(int(proc.name))
    return out


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc to find the server")
def test_lab_serves_without_a_terminal_and_sigterm_stops_the_server(tmp_path):
    port = _free_port()
    home = tmp_path / "home"  # no ~/.streamlit: the first start Streamlit ever sees
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "AGENTQMIX_LAB_DEMO": "0", "PYTHONPATH": str(ROOT)}
    log = tmp_path / "lab.log"
    with open(log, "wb") as out:
        lab = subprocess.Popen(
            [sys.executable, "-m", "core.cli", "lab", "--db", str(tmp_path / "lab.duckdb"),
             "--port", str(port)],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while not _healthy(port):
            assert lab.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.3)
        while f"http://127.0.0.1:{port}" not in log.read_text():
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        assert "Email" not in log.read_text()
        assert _serving(port), "the Streamlit child should be serving"
        lab.send_signal(signal.SIGTERM)
        assert lab.wait(60) == 0
        assert not _healthy(port)
        assert _serving(port) == [], "SIGTERM to agentqmix lab left Streamlit running"
    finally:
        if lab.poll() is None:
            lab.kill()
        for pid in _serving(port):
            os.kill(pid, signal.SIGKILL)
