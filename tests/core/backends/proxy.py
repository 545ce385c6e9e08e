"""A real 127.0.0.1 proxy in front of the real local model server, recording what passes:
the tests of both engines read the server's own usage and the requests' slot fields here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from core.backends import local_server as ls
from core.backends.local_server import LocalServer

ROOT = Path(__file__).resolve().parents[3]


class RecordingProxy:
    """Forwards every path to a real server (``upstream`` is its ``/v1`` URL); records each
    completion's request body (its slot fields), its ``usage``, and how many completions
    were in flight at once. The native engine's computations of a task's opening (a
    completion of ``max_tokens`` 0) are recorded apart, in ``openings`` (their bodies), and
    its slot actions (``/slots/N?action=...``) in ``slot_actions``."""

    def __init__(self, upstream: str):
        self.upstream = upstream
        self.bodies: list[dict] = []
        self.usages: list[dict[str, int]] = []
        self.openings: list[dict] = []
        self.slot_actions: list[str] = []
        self.in_flight = self.most_in_flight = 0
        lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def _forward(self, body: bytes | None) -> None:
                completion = self.path.endswith("/chat/completions")
                if self.path.startswith("/slots/"):
                    proxy.slot_actions.append(self.path)
                if completion and json.loads(body or b"{}").get("max_tokens") == 0:
                    proxy.openings.append(json.loads(body or b"{}"))
                    completion = False
                if completion:
                    with lock:
                        proxy.bodies.append(json.loads(body or b"{}"))
                        proxy.in_flight += 1
                        proxy.most_in_flight = max(proxy.most_in_flight, proxy.in_flight)
                req = urllib.request.Request(
                    proxy.upstream.removesuffix("/v1") + self.path,
                    data=body,
                    headers={"Content-Type": "application/json"},
                    method=self.command,
                )
                try:
                    with urllib.request.urlopen(req, timeout=120) as resp:
                        data = resp.read()
                finally:
                    if completion:
                        with lock:
                            proxy.in_flight -= 1
                if completion:
                    proxy.usages.append(json.loads(data)["usage"])
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._forward(None)

            def do_POST(self) -> None:
                self._forward(self.rfile.read(int(self.headers["Content-Length"])))

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def star_eval_through(
    proxy: RecordingProxy, server: LocalServer, db: Path, agents: str
) -> subprocess.CompletedProcess[str]:
    """``agentqmix eval --backend local``, one star episode of one round with tiny caps, in a
    CLI process that attaches to ``server`` (same identity, slots and threads) through
    ``proxy``."""
    handed = json.loads(server.attach_env()[ls.ATTACH_ENV])
    shared = {ls.ATTACH_ENV: json.dumps({**handed, "url": proxy.url})}
    return subprocess.run(
        [sys.executable, "-m", "core.cli", "eval", "--backend", "local", "--benchmark", "math",
         "--policy", "star", "--agents", agents, "--rounds", "1", "--episodes", "1",
         "--max-tokens", "8", "--no-cache", "--db", str(db), "--json"],
        capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
        env={**os.environ, **shared}, cwd=ROOT,
    )  # fmt: skip
