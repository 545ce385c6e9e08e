"""Run generated Python for real, without letting it harm the host (docs/openai.md, Sandbox).

Each run gets a separate interpreter (``sys.executable -I``) in a fresh temporary
directory, a clean environment (no API keys or other secrets, minimal ``PATH``),
stdin closed, its own session, and a wall-clock timeout after which every process it
started is killed. Inside, a small bootstrap (run in the child *before* the untrusted
code, in a fresh single-threaded interpreter, which is why it is not a ``preexec_fn``:
that is unsafe in a threaded parent such as the asyncio runtime) applies:

* rlimits: address space (``RLIMIT_AS``), CPU seconds, file size (``RLIMIT_FSIZE``),
  open files, no core dumps, and a process cap (``RLIMIT_NPROC``);
* when the parent runs as root: a switch to a fresh, unused uid/gid for this run.
  Root ignores ``RLIMIT_NPROC``, so without this a fork bomb would be unbounded; with
  its own uid the cap holds, the code cannot write to anything root owns, and after the
  run every process of that uid is killed, even ones that left the session with
  ``setsid``. The run keeps only ``CAP_DAC_READ_SEARCH`` so that the interpreter under a
  private prefix (e.g. ``/root/.pyenv``) can still load its standard library;
* Landlock, when the kernel has it (Linux >= 5.13): writes are allowed only under the
  sandbox directory and to ``/dev/null``; with Landlock ABI >= 4 no TCP connect/bind;
  with ABI >= 6 no signals to processes outside the sandbox.

What is *not* contained: reading files (the code can read what the parent can read,
but the environment holds no secrets), CPU and memory use of many processes together
within the process cap (each is bounded by its rlimits), network access when Landlock
is missing or older than ABI 4, and writes to world-writable directories such as
``/tmp`` when Landlock is missing and the parent is not root. ``containment()`` reports
which layers are active on this machine.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.tasks.base import Task

_SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH")
_OUTPUT_LIMIT = 64_000
"""Characters of stdout/stderr kept in a result."""
_FAILED_TO_CONFINE = 120
"""Exit code of the bootstrap when it could not apply a containment layer it was asked for."""


@dataclass
class SandboxConfig:
    """Limits for one sandboxed run."""

    timeout_s: float = 10.0
    """Wall-clock seconds before the whole run is killed."""
    memory_mb: int = 512
    """Address-space limit per process (``RLIMIT_AS``), MiB."""
    cpu_s: int = 10
    """CPU seconds per process (``RLIMIT_CPU``)."""
    max_processes: int = 16
    """Process cap for the run (``RLIMIT_NPROC``); enforced when the run has its own uid."""
    file_size_mb: int = 16
    """Largest file the code may write (``RLIMIT_FSIZE``), MiB; also bounds captured output."""
    max_open_files: int = 64
    """Open file descriptors per process (``RLIMIT_NOFILE``)."""
    drop_privileges: bool | None = None
    """Run under a fresh uid; ``None`` = exactly when the parent is root."""
    landlock: bool = True
    """Confine writes (and, where supported, TCP and signals) with Landlock when available."""

    def validate(self) -> None:
        if not self.timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s}")
        if self.memory_mb < 64:
            raise ValueError(
                f"memory_mb must be >= 64 (the interpreter needs it), got {self.memory_mb}"
            )
        if self.cpu_s < 1:
            raise ValueError(f"cpu_s must be >= 1, got {self.cpu_s}")
        if self.max_processes < 1:
            raise ValueError(f"max_processes must be >= 1, got {self.max_processes}")
        if self.file_size_mb < 1:
            raise ValueError(f"file_size_mb must be >= 1, got {self.file_size_mb}")
        if self.max_open_files < 16:
            raise ValueError(f"max_open_files must be >= 16, got {self.max_open_files}")
        if self.drop_privileges and os.geteuid() != 0:
            raise ValueError("drop_privileges=True needs the parent to run as root")


@dataclass
class SandboxResult:
    """What one sandboxed run did."""

    passed: bool
    """Exited with status 0 within the time limit."""
    returncode: int
    """Exit status; negative = killed by that signal."""
    stdout: str
    stderr: str
    timed_out: bool
    """The wall-clock limit was hit and the run was killed."""
    killed: bool
    """Ended by a signal (timeout kill, CPU or file-size limit)."""
    duration_s: float = 0.0
    stray_processes: int = 0
    """Processes still alive after the main one ended (all killed before returning)."""


# Runs inside the child, as the first thing, in a fresh single-threaded interpreter.
_BOOTSTRAP = r"""
import ctypes, json, os, resource, runpy, sys
cfg = json.loads(sys.argv[1])
del sys.argv[1]
def fail(msg):
    os.write(2, ("sandbox: " + msg + "\n").encode())
    os._exit(__CODE__)
mb = 1 << 20
for name, soft, hard in (
    ("RLIMIT_AS", cfg["memory_mb"] * mb, cfg["memory_mb"] * mb),
    ("RLIMIT_CPU", cfg["cpu_s"], cfg["cpu_s"] + 1),
    ("RLIMIT_FSIZE", cfg["file_size_mb"] * mb, cfg["file_size_mb"] * mb),
    ("RLIMIT_NOFILE", cfg["max_open_files"], cfg["max_open_files"]),
    ("RLIMIT_CORE", 0, 0),
    ("RLIMIT_NPROC", cfg["nproc"], cfg["nproc"]),
):
    resource.setrlimit(getattr(resource, name), (soft, hard))
libc = ctypes.CDLL(None, use_errno=True)
if cfg["uid"] is not None:
    # Keep capabilities across setuid, then keep only CAP_DAC_READ_SEARCH (bit 2).
    if libc.prctl(8, 1, 0, 0, 0) != 0:
        fail("PR_SET_KEEPCAPS failed")
    try:
        os.setgroups([])
        os.setgid(cfg["gid"])
        os.setuid(cfg["uid"])
    except OSError as e:
        fail("could not switch to uid %d: %s" % (cfg["uid"], e))
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)
    data = (ctypes.c_uint32 * 6)(1 << 2, 1 << 2, 0, 0, 0, 0)
    if libc.capset(header, data) != 0:
        fail("capset failed: errno %d" % ctypes.get_errno())
if libc.prctl(38, 1, 0, 0, 0) != 0:
    fail("PR_SET_NO_NEW_PRIVS failed")
abi = 0
if cfg["landlock"]:
    abi = libc.syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
if abi > 0:
    fs = 0b1111111110010  # WRITE_FILE, REMOVE_DIR/FILE, MAKE_* (bits 1, 4..12)
    fs |= (1 << 13) if abi >= 2 else 0  # REFER
    fs |= (1 << 14) if abi >= 3 else 0  # TRUNCATE
    fs |= (1 << 15) if abi >= 5 else 0  # IOCTL_DEV
    net = 0b11 if abi >= 4 else 0  # BIND_TCP, CONNECT_TCP: none allowed
    scoped = 0b11 if abi >= 6 else 0  # abstract unix sockets, signals
    attr = (ctypes.c_uint64 * 3)(fs, net, scoped)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    rfd = libc.syscall(444, attr, ctypes.c_size_t(size), ctypes.c_uint32(0))
    if rfd < 0:
        fail("landlock_create_ruleset failed: errno %d" % ctypes.get_errno())
    class Beneath(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed", ctypes.c_uint64), ("fd", ctypes.c_int32)]
    file_rights = (1 << 1) | ((1 << 14) if abi >= 3 else 0)
    for path, rights in ((cfg["dir"], fs), ("/dev/null", file_rights)):
        pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        rule = Beneath(rights, pfd)
        if libc.syscall(445, rfd, 1, ctypes.byref(rule), ctypes.c_uint32(0)) != 0:
            fail("landlock_add_rule failed on %s: errno %d" % (path, ctypes.get_errno()))
        os.close(pfd)
    if libc.syscall(446, rfd, ctypes.c_uint32(0)) != 0:
        fail("landlock_restrict_self failed: errno %d" % ctypes.get_errno())
    os.close(rfd)
del ctypes, json, libc, cfg, fail
sys.path.insert(0, os.getcwd())
runpy.run_path(sys.argv[1], run_name="__main__")
""".replace("__CODE__", str(_FAILED_TO_CONFINE))


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 when Landlock is unavailable."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        abi = libc.syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    except (OSError, AttributeError):
        return 0
    return max(int(abi), 0)


def containment(config: SandboxConfig | None = None) -> dict[str, Any]:
    """Which containment layers a run with ``config`` gets on this machine."""
    config = config or SandboxConfig()
    abi = landlock_abi() if config.landlock else 0
    own_uid = _drops_privileges(config)
    return {
        "own_uid": own_uid,
        "process_cap_enforced": own_uid or os.geteuid() != 0,
        "landlock_abi": abi,
        "writes_confined_to_dir": abi > 0,
        "network_blocked": abi >= 4,
        "signals_scoped": abi >= 6,
    }


def clean_env(home: str) -> dict[str, str]:
    """The child's environment: built from scratch, so no secret can leak into it."""
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": home,
        "TMPDIR": home,
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0",
    }
    # Defence in depth should anyone extend the dict above with inherited values.
    return {k: v for k, v in env.items() if not any(m in k.upper() for m in _SECRET_MARKERS)}


def _drops_privileges(config: SandboxConfig) -> bool:
    if config.drop_privileges is None:
        return os.geteuid() == 0
    return config.drop_privileges


def _fresh_uid() -> int:
    # Far above any real account; random so that concurrent runs do not share a uid.
    return 1_500_000_000 + secrets.randbelow(100_000_000)


def _pids_of_uid(uid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if fields.get("Uid", "").split()[:1] == [str(uid)] and not fields.get(
            "State", ""
        ).strip().startswith("Z"):
            pids.append(int(entry))
    return pids


def _kill_uid(uid: int) -> int:
    """SIGKILL every live process of ``uid`` until none is left; returns how many were seen."""
    seen: set[int] = set()
    for _ in range(200):
        pids = _pids_of_uid(uid)
        if not pids:
            break
        seen.update(pids)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.005)
    return len(seen)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _user_process_count() -> int:
    uid = os.getuid()
    return sum(
        1 for entry in os.listdir("/proc") if entry.isdigit() and _owner(f"/proc/{entry}") == uid
    )


def _owner(path: str) -> int | None:
    try:
        return os.stat(path).st_uid
    except OSError:
        return None


def _read_capped(path: Path) -> str:
    with open(path, "rb") as f:
        data = f.read(_OUTPUT_LIMIT)
    return data.decode("utf-8", errors="replace")


def run_python(
    code: str,
    timeout_s: float | None = None,
    memory_mb: int | None = None,
    cpu_s: int | None = None,
    config: SandboxConfig | None = None,
) -> SandboxResult:
    """Run ``code`` as a Python program in the sandbox and report what happened.

    The keyword limits override the matching fields of ``config``.
    """
    config = config or SandboxConfig()
    overrides = {"timeout_s": timeout_s, "memory_mb": memory_mb, "cpu_s": cpu_s}
    config = SandboxConfig(
        **{**config.__dict__, **{k: v for k, v in overrides.items() if v is not None}}
    )
    config.validate()
    own_uid = _drops_privileges(config)
    uid = _fresh_uid() if own_uid else None
    # The output files live outside the sandbox directory so that the code cannot
    # replace them; the child writes to them only through the inherited descriptors.
    outer = Path(tempfile.mkdtemp(prefix="agentqmix-sbx-"))
    workdir = outer / "work"
    workdir.mkdir()
    if uid is not None:
        os.chown(workdir, uid, uid)
    workdir.chmod(0o700)
    program = workdir / "main.py"
    program.write_text(code)
    if uid is not None:
        os.chown(program, uid, uid)
    nproc = config.max_processes if own_uid else _user_process_count() + config.max_processes
    boot = {
        "memory_mb": config.memory_mb,
        "cpu_s": config.cpu_s,
        "file_size_mb": config.file_size_mb,
        "max_open_files": config.max_open_files,
        "nproc": nproc,
        "uid": uid,
        "gid": uid,
        "landlock": config.landlock,
        "dir": str(workdir),
    }
    started = time.monotonic()
    timed_out = False
    stray = 0
    try:
        with open(outer / "stdout", "wb") as out, open(outer / "stderr", "wb") as err:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-c", _BOOTSTRAP, json.dumps(boot), str(program)],
                cwd=workdir,
                env=clean_env(str(workdir)),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
                close_fds=True,
            )
            try:
                proc.wait(timeout=config.timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                _kill_group(proc.pid)
                proc.wait()
            finally:
                # Whatever it left behind (children, daemons, setsid escapees) dies now.
                if uid is not None:
                    stray = len(_pids_of_uid(uid))
                _kill_group(proc.pid)
                if uid is not None:
                    _kill_uid(uid)
        duration = time.monotonic() - started
        stdout, stderr = _read_capped(outer / "stdout"), _read_capped(outer / "stderr")
    finally:
        shutil.rmtree(outer, ignore_errors=True)
    rc = proc.returncode
    if rc == _FAILED_TO_CONFINE and stderr.startswith("sandbox:"):
        raise RuntimeError(f"the sandbox could not confine the run: {stderr.strip()}")
    return SandboxResult(
        passed=rc == 0 and not timed_out,
        returncode=rc,
        stdout=stdout,
        stderr=stderr,
        timed_out=timed_out,
        killed=rc < 0,
        duration_s=duration,
        stray_processes=stray,
    )


_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)


def extract_code(completion: str, entry_point: str | None = None) -> str:
    """The code in a model reply: the fenced block defining ``entry_point`` (else the
    first Python block, else the first block), or the reply itself when nothing is fenced."""
    blocks = [(lang.lower(), body) for lang, body in _FENCE.findall(completion)]
    if not blocks:
        return completion.strip("\n")
    if entry_point:
        defining = [b for _, b in blocks if re.search(rf"\bdef\s+{re.escape(entry_point)}\s*\(", b)]
        if defining:
            return defining[-1].strip("\n")
    python = [b for lang, b in blocks if lang in ("python", "py", "python3")]
    return (python or [blocks[0][1]])[0].strip("\n")


def humaneval_program(task: Task, completion: str) -> str:
    """The HumanEval test program for a reply: prompt/solution, the tests, ``check(entry)``."""
    prompt = task.meta.get("prompt", "")
    test = task.meta.get("test", "")
    entry = task.meta.get("entry_point", "")
    if not (test and entry):
        raise ValueError(f"task {task.task_id} has no HumanEval test/entry_point in meta")
    code = extract_code(completion, entry)
    if re.search(rf"^\s*def\s+{re.escape(entry)}\s*\(", code, re.MULTILINE):
        # A whole function: the prompt goes first for its imports and helpers; the
        # reply's definition comes later and wins.
        solution = prompt + "\n\n" + code
    else:
        # Only the body: indent it when the model did not, then append it to the prompt.
        lines = code.splitlines()
        first = next((line for line in lines if line.strip()), "")
        if first and not first.startswith((" ", "\t")):
            lines = ["    " + line if line.strip() else line for line in lines]
        solution = prompt + "\n".join(lines)
    return f"{solution}\n\n{test}\n\ncheck({entry})\n"


def check_code(task: Task, completion: str | None, config: SandboxConfig | None = None) -> float:
    """1.0 when the code in ``completion`` passes the task's HumanEval tests, else 0.0."""
    if not completion or not completion.strip():
        return 0.0
    result = run_python(humaneval_program(task, completion), config=config)
    return 1.0 if result.passed else 0.0
