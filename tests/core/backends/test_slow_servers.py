"""Servers that never finish an answer cost one failed agent-round, not the evaluation
(issue 19 item 7).

Each mode is a real TCP server on 127.0.0.1 speaking just enough HTTP to be hostile:
it drips the body one byte at a time, streams a body for ever, sends headers for ever,
announces a terabyte body, stalls after the status line, or answers 200 with JSON
nested 200,000 deep. ``agentqmix eval`` (in this process) runs one episode of one agent
and one round against it with ``--timeout 2 --deadline 3 --max-attempts 5`` (without the deadline: 15 s and more): it must
finish (the run logged; exit 1, as every call failed), every call failed with its reason, and no call may
have taken longer than its deadline plus a margin for a loaded machine. Every server
loop is bounded: it stops when the test closes the server, and after ``MAX_S``.
"""

from __future__ import annotations

import json
import socket
import socketserver
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.cli import main
from core.store.db import read_session
from tests.core.torch_threads import one_torch_thread  # noqa: F401

DEADLINE_S = 3.0
MARGIN_S = 5.0
"""Slack over the deadline for a loaded, shared machine (the event loop may start late)."""
MAX_S = 120.0
"""No server loop runs longer than this, whatever happens to the test."""


def _drip(w: socket.socket, stop: threading.Event) -> None:
    w.sendall(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
    )
    while not stop.wait(0.2):
        w.sendall(b" ")


def _endless_body(w: socket.socket, stop: threading.Event) -> None:
    w.sendall(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    chunk = b" " * 65536
    while not stop.is_set():
        w.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))


def _endless_headers(w: socket.socket, stop: threading.Event) -> None:
    w.sendall(b"HTTP/1.1 200 OK\r\n")
    while not stop.wait(0.05):
        w.sendall(b"X-More: yes\r\n")


def _terabyte(w: socket.socket, stop: threading.Event) -> None:
    w.sendall(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000000000000\r\n\r\n"
    )
    while not stop.is_set():
        w.sendall(b" " * 65536)


def _stall(w: socket.socket, stop: threading.Event) -> None:
    w.sendall(b"HTTP/1.1 200 OK\r\n")
    stop.wait(MAX_S)


def _deep_json(w: socket.socket, stop: threading.Event) -> None:
    body = b'{"id": "x", "choices": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    w.sendall(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
        % (len(body), body)
    )


def _read_request(sock: socket.socket) -> None:
    """The whole request (closing with unread bytes would reset the connection)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536) or b"\r\n\r\n"
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        (
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        ),
        0,
    )
    while len(body) < length:
        body += sock.recv(65536) or b" " * length


MODES = {
    "drip-feed": _drip,
    "body for ever": _endless_body,
    "headers for ever": _endless_headers,
    "terabyte content-length": _terabyte,
    "stall after the status line": _stall,
    "JSON nested 200,000 deep": _deep_json,
}


REASONS = {
    "drip-feed": "deadline passed",
    "body for ever": "larger than",
    "headers for ever": "deadline passed",
    "terabyte content-length": "the limit is",
    "stall after the status line": "deadline passed",
    "JSON nested 200,000 deep": "malformed response",
}
"""What each mode's failed call must say."""


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


def serve(mode: str) -> tuple[_Server, threading.Event]:
    stop = threading.Event()
    behave = MODES[mode]

    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            sock = self.request
            sock.settimeout(5)
            try:
                _read_request(sock)  # whatever it asks, the answer is the same
                timer = threading.Timer(MAX_S, stop.set)
                timer.start()
                try:
                    behave(sock, stop)
                finally:
                    timer.cancel()
            except OSError:
                pass  # the client gave up: that is the point

    server = _Server(("127.0.0.1", 0), Handler)
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    ).start()
    return server, stop


@pytest.fixture
def hostile(request: pytest.FixtureRequest) -> Iterator[str]:
    server, stop = serve(request.param)
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        stop.set()
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("hostile", list(MODES), indirect=True)
def test_a_server_that_never_answers_costs_one_failed_round(
    hostile: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    mode = request.node.callspec.params["hostile"]
    monkeypatch.setenv("AGENTQMIX_CACHE", str(tmp_path / "cache"))
    db = tmp_path / "s.duckdb"
    argv = ["eval", "--benchmark", "math", "--policy", "full", "--episodes", "1"]
    argv += ["--agents", "solver", "--rounds", "1", "--backend", "openai", "--model", "m"]
    argv += ["--base-url", hostile, "--timeout", "2", "--deadline", str(DEADLINE_S)]
    argv += ["--max-attempts", "5", "--no-cache", "--db", str(db), "--json"]
    started = time.monotonic()
    assert main(argv) == 1  # every call failed: the run is kept, and says so (exit 1)
    took = time.monotonic() - started
    summary = json.loads(capsys.readouterr().out)
    assert summary["episodes"] == 1 and summary["failed_calls"] == summary["calls"] >= 1
    with read_session(db) as cur:
        calls = cur.execute("SELECT error, latency_s FROM llm_calls").fetchall()
        (status,) = cur.execute("SELECT status FROM runs").fetchone()
    assert status == "finished" and calls
    for error, latency in calls:
        assert error, "a call that got no answer must say why"
        assert REASONS[mode] in error, error
        assert latency <= DEADLINE_S + MARGIN_S, (error, latency)
    assert took <= len(calls) * (DEADLINE_S + MARGIN_S) + 60, took
