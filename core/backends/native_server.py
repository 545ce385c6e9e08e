"""The local back-end's ``native`` engine: llama.cpp's own C++ server, ``llama-server``.

llama-cpp-python's server (the ``python`` engine) decodes one request at a time with one
prompt cache: a round of four agents is four prefills and four decodes in a row, and each
agent's conversation is evicted by the others'. ``llama-server`` has ``--parallel N``
slots, each with its own KV cache (``--no-kv-unified``: one stream per slot, so a slot's
numbers never depend on where another slot's tokens sit) and continuous batching: the
agents of a round prefill and decode together.

* **Built once by the set-up** (scripts/setup_local.sh) from the llama.cpp tree vendored in
  the very sdist the python engine is built from (llama-cpp-python 0.3.36), with the same
  portable GGML flags and no network features; the binary lives in :data:`NATIVE_BINARY`,
  in the Python environment. Nothing is downloaded at run time.
* **Slots.** ``slots`` = agents + 1 (``core.backends.registry.local_model_server``): agent
  ``i`` always writes to slot ``i`` and the decision agent to the last one
  (:func:`slot_of`), so an agent's next request finds its own conversation in its slot's
  KV cache (``cache_prompt``).
* **One lifecycle with the python engine.** ``python -m core.backends.native_server`` is a
  small keeper process that :mod:`core.backends.local_server` starts exactly as it starts
  the python engine (own session, a pipe from the parent on stdin, ``PORT n`` on stdout);
  the keeper runs ``llama-server`` as its child with ``PR_SET_PDEATHSIG``. The keeper's
  main thread forks it and lives as long as the keeper, so the signal fires only when the
  keeper dies; the keeper kills it when the parent's pipe closes (the parent exited, was
  interrupted, terminated or SIGKILLed). Nothing is left either way.
* **Saved slots.** The keeper gives ``llama-server`` a private temporary directory
  (``--slot-save-path``) where the back-end saves each task's opening to restore it into
  other slots (:class:`core.backends.local_backend.Openings`), and removes it when it
  stops (a SIGKILLed keeper leaves it in the temporary directory).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from core.errors import UserError

LLAMA_CPP_PYTHON = "0.3.36"
"""The llama-cpp-python sdist whose vendored llama.cpp tree the binary is built from."""
NATIVE_BINARY = (
    Path(sys.prefix) / "share" / "agentqmix" / "llama-server" / LLAMA_CPP_PYTHON / "llama-server"
)
"""Where scripts/setup_local.sh puts the built ``llama-server`` (beside it, ``flags``: the
CMake flags it was built with; a change of flags rebuilds it): in the Python environment,
beside the llama-cpp-python it is built from, so that it is installed once per
environment as the packages are, not once per user (a fresh HOME finds it)."""
LISTENING = re.compile(r"listening on http://[\d.]+:(\d+)")
BIND_FAILED = "couldn't bind HTTP server socket"
HEALTH_TIMEOUT_S = 60.0
"""How long the keeper waits for ``/health`` after ``llama-server`` says it listens (it says
so only once the model is loaded: this is a formality)."""


def check_built() -> Path:
    """The built binary, or :class:`UserError` with the set-up command and the fallback."""
    if not os.access(NATIVE_BINARY, os.X_OK):
        raise UserError(
            f"llama.cpp's native server is not built ({NATIVE_BINARY} is missing); run "
            "`bash scripts/setup.sh` (builds it once, minutes), or pass --local-engine python."
        )
    return NATIVE_BINARY


def slot_of(agent: int, slots: int) -> int:
    """The slot agent ``agent`` writes to on a server of ``slots`` slots: agent ``i`` ->
    ``i``, the decision agent (a negative index) -> the last slot. Teams larger than the
    server share slots round-robin (correct, less prefix reuse)."""
    if agent < 0 or slots < 2:
        return slots - 1
    return agent % (slots - 1)


def server_argv(args: argparse.Namespace) -> list[str]:
    """``llama-server``'s command line for the keeper's settings.

    Each slot gets the whole ``n_ctx`` (``-c`` is the pool of all slots); the RAM prompt
    cache is off (``--cache-ram 0``): it would restore a state one slot computed into
    another and make a reply depend on earlier episodes; ``--slot-prompt-similarity 0``
    since every request names its slot. ``--slot-save-path``: the keeper's private
    directory, where the back-end saves each task's opening to restore it into the slots
    that start a conversation with it (:class:`core.backends.local_backend.Openings`)."""
    return [
        str(args.binary),
        "--model", args.model, "--alias", args.alias,
        "--host", "127.0.0.1", "--port", str(args.port),
        "--parallel", str(args.slots), "--ctx-size", str(args.n_ctx * args.slots),
        "--no-kv-unified", "--cont-batching", "--cache-ram", "0",
        "--slot-prompt-similarity", "0",
        "--threads", str(args.n_threads), "--threads-batch", str(args.n_threads),
        "--batch-size", str(args.n_batch), "--ubatch-size", str(args.n_batch),
        "--metrics", "--slots", "--no-webui", "--threads-http", "4",
        "--slot-save-path", str(args.slot_dir),
    ]  # fmt: skip


# --------------------------------------------------------------------------- the keeper process


def _die_with_keeper() -> None:
    """In the forked child, before exec: SIGKILL when the keeper's thread that forked it
    (its main thread) exits."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() == 1:  # the keeper died before the line above
        os._exit(1)


def _stop(proc: subprocess.Popen, grace_s: float = 5.0) -> None:
    with contextlib.suppress(OSError):
        proc.terminate()
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


_PARENT_GONE = threading.Event()
"""Set when the parent's pipe closed: the server was stopped on purpose (exit 0)."""


def _watch_parent(proc: subprocess.Popen, slot_dir: str) -> None:
    """Stop the server, remove its slot files and exit the moment the parent's end of stdin
    closes."""

    def watch() -> None:
        with contextlib.suppress(OSError):
            while os.read(0, 4096):
                pass
        _PARENT_GONE.set()
        _stop(proc)
        shutil.rmtree(slot_dir, ignore_errors=True)
        os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _healthy(port: int) -> bool:
    deadline = time.monotonic() + HEALTH_TIMEOUT_S
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as resp:
                if resp.status == 200:
                    return True
        time.sleep(0.1)
    return False


def _keep(args: argparse.Namespace) -> int:
    """Run ``llama-server``, copy its log to stderr, report its port once it is healthy
    (``PORT n`` or ``PORT-IN-USE`` on stdout, as the python engine does), exit with it."""
    args.slot_dir = tempfile.mkdtemp(prefix="agentqmix-slots-")
    try:
        return _run(args)
    finally:
        shutil.rmtree(args.slot_dir, ignore_errors=True)


def _run(args: argparse.Namespace) -> int:
    proc = subprocess.Popen(
        server_argv(args),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        preexec_fn=_die_with_keeper,
    )
    _watch_parent(proc, args.slot_dir)
    assert proc.stdout is not None
    reported = False
    for raw in proc.stdout:
        os.write(2, raw)
        if reported:
            continue
        line = raw.decode(errors="replace")
        if BIND_FAILED in line:
            os.write(1, b"PORT-IN-USE\n")
            reported = True
        elif (found := LISTENING.search(line)) is not None:
            port = int(found.group(1))
            if _healthy(port):
                os.write(1, f"PORT {port}\n".encode())
                os.dup2(2, 1)  # the parent reads one line only
            reported = True
    code = proc.wait()
    if _PARENT_GONE.is_set():
        return 0
    return code if code >= 0 else 128 - code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m core.backends.native_server",
        description="Keeps llama.cpp's llama-server for --backend local (not for direct use).",
    )
    parser.add_argument("--binary", default=str(NATIVE_BINARY))
    parser.add_argument("--model")
    parser.add_argument("--alias")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--n-ctx", type=int, default=4096)
    parser.add_argument("--n-threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--n-batch", type=int, default=512)
    parser.add_argument("--slots", type=int, default=1)
    parser.add_argument("--where", action="store_true", help="print where the binary belongs")
    args = parser.parse_args(argv)
    if args.where:
        print(NATIVE_BINARY)
        return 0
    return _keep(args)


if __name__ == "__main__":
    sys.exit(main())
