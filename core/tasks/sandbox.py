"""Run generated Python for real, without letting it harm the host (docs/openai.md, Sandbox).

Each run gets a separate interpreter (``sys.executable -I``), a clean environment (no
API keys or other secrets, minimal ``PATH``), stdin closed, its own session, and a
wall-clock timeout after which every process it started is killed. Two back-ends;
``SandboxConfig.backend`` chooses (``"auto"``: bwrap where it runs, else process, with a
one-time warning) and ``sandbox_kind()`` / ``SandboxResult.backend`` say which ran:

* **bwrap** (bubblewrap): the run sees a filesystem of its own: read-only binds of the
  interpreter's prefix and the system libraries (``/usr/lib``, ``/lib*``) and nothing
  else (no ``/etc``, no ``/root`` beyond the path to the interpreter, no home), a fresh
  ``/proc`` and ``/dev``, and as its only writable place a tmpfs work dir of
  ``work_dir_mb`` (the run's disk quota; it vanishes with the run). New network, PID,
  IPC, UTS and cgroup namespaces: no network at all (UDP, TCP, abstract and path Unix
  sockets of the host are out of reach) and no signal to any host process. As root,
  bwrap sets this up *without* a user namespace (inside one, root would still read
  root's files with root's rights) and the bootstrap then switches to a fresh uid with
  no capabilities left; as a normal user, bwrap runs in a user namespace of its own.
* **process** (the fallback): the run works in a fresh host temporary directory; when
  the parent is root it switches to a fresh uid and keeps only ``CAP_DAC_READ_SEARCH``
  (so an interpreter under a private prefix such as ``/root/.pyenv`` stays readable,
  which also means it can read what root can read), and Landlock confines writes.

In both, a small bootstrap (run in the child *before* the untrusted code, in a fresh
single-threaded interpreter, which is why it is not a ``preexec_fn``: that is unsafe in
a threaded parent such as the asyncio runtime) applies:

* rlimits: address space (``RLIMIT_AS``), CPU seconds, file size (``RLIMIT_FSIZE``),
  open files, no core dumps, and a process cap (``RLIMIT_NPROC``). With a uid (or, as a
  normal user under bwrap, a user namespace) of its own the cap holds per run, so the
  run's total memory is bounded: at most ``max_processes`` processes of ``memory_mb``
  each, plus the work dir (``SandboxConfig.memory_bound_mb()``). Root ignores
  ``RLIMIT_NPROC``, hence the uid switch; after the run every process of that uid is
  killed, even ones that left the session with ``setsid``;
* no new privileges, and a seccomp filter that refuses new user namespaces (inside one
  the code could mount a tmpfs outside every quota);
* Landlock, when the kernel has it (Linux >= 5.13): writes only under the work dir and
  to ``/dev/null``; with ABI >= 4 no TCP connect/bind; with ABI >= 6 no signals to
  processes outside the sandbox.

What the fallback does *not* contain: reading files (as root, everything root can
read), UDP and Unix sockets, network access without Landlock ABI >= 4, the total size of
the files written (each file is capped, their number is not), and writes to
world-writable directories such as ``/tmp`` when Landlock is missing and the parent is
not root. ``containment()`` reports which layers are active on this machine.
"""

from __future__ import annotations

import ast
import doctest
import json
import logging
import os
import platform
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.tasks.base import Task

log = logging.getLogger(__name__)

_SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH")
_OUTPUT_LIMIT = 64_000
"""Characters of stdout/stderr kept in a result."""
_FAILED_TO_CONFINE = 120
"""Exit code of the bootstrap when it could not apply a containment layer it was asked for."""
BACKENDS = ("auto", "bwrap", "process")
"""Values of ``SandboxConfig.backend``."""
_WORK_DIR = "/tmp"
"""The work dir inside a bwrap sandbox (the tmpfs); also its ``HOME`` and ``TMPDIR``."""


@dataclass
class SandboxConfig:
    """Limits for one sandboxed run."""

    timeout_s: float = 10.0
    """Wall-clock seconds before the whole run is killed."""
    memory_mb: int = 512
    """Address-space limit per process (``RLIMIT_AS``), MiB."""
    cpu_s: int = 10
    """CPU seconds per process (``RLIMIT_CPU``)."""
    max_processes: int = 4
    """Process (and thread) cap for the run (``RLIMIT_NPROC``); enforced when the run has
    its own uid or user namespace. Small on purpose: it multiplies ``memory_mb``."""
    file_size_mb: int = 16
    """Largest file the code may write (``RLIMIT_FSIZE``), MiB; also bounds captured output."""
    work_dir_mb: int = 64
    """Size of the tmpfs work dir under bwrap, MiB: all the files of a run together."""
    max_open_files: int = 64
    """Open file descriptors per process (``RLIMIT_NOFILE``)."""
    drop_privileges: bool | None = None
    """Process back-end: run under a fresh uid; ``None`` = exactly when the parent is root.
    (Under bwrap a root parent always switches to a fresh uid.)"""
    landlock: bool = True
    """Confine writes (and, where supported, TCP and signals) with Landlock when available."""
    backend: str = "auto"
    """``"bwrap"``, ``"process"``, or ``"auto"`` (bwrap where it can run, else process)."""

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
        if self.work_dir_mb < 1:
            raise ValueError(f"work_dir_mb must be >= 1, got {self.work_dir_mb}")
        if self.max_open_files < 16:
            raise ValueError(f"max_open_files must be >= 16, got {self.max_open_files}")
        if self.drop_privileges and os.geteuid() != 0:
            raise ValueError("drop_privileges=True needs the parent to run as root")
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {self.backend!r}")

    def memory_bound_mb(self) -> int:
        """Most memory one run can hold, MiB, where the process cap holds: every process
        at its address-space limit, plus a full work dir (tmpfs lives in memory)."""
        return self.max_processes * self.memory_mb + self.work_dir_mb


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
    backend: str = ""
    """The back-end that ran it: ``"bwrap"`` or ``"process"``."""


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
    # Keep capabilities across setuid only if some are to be kept (bits in keep_caps).
    keep = cfg["keep_caps"]
    if keep and libc.prctl(8, 1, 0, 0, 0) != 0:
        fail("PR_SET_KEEPCAPS failed")
    try:
        os.setgroups([])
        os.setgid(cfg["gid"])
        os.setuid(cfg["uid"])
    except OSError as e:
        fail("could not switch to uid %d: %s" % (cfg["uid"], e))
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)
    data = (ctypes.c_uint32 * 6)(keep, keep, 0, 0, 0, 0)
    if libc.capset(header, data) != 0:
        fail("capset failed: errno %d" % ctypes.get_errno())
if libc.prctl(38, 1, 0, 0, 0) != 0:
    fail("PR_SET_NO_NEW_PRIVS failed")
if cfg["seccomp"]:
    class Insn(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8),
                    ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]
    class Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(Insn))]
    insns = (Insn * len(cfg["seccomp"]))(*(Insn(*i) for i in cfg["seccomp"]))
    prog = Prog(len(cfg["seccomp"]), insns)
    if libc.prctl(22, 2, ctypes.byref(prog), 0, 0) != 0:  # PR_SET_SECCOMP, MODE_FILTER
        fail("seccomp failed: errno %d" % ctypes.get_errno())
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
# Every layer is in place: tell the parent (a missing byte means the run was not confined).
os.write(cfg["ready_fd"], b"1")
os.close(cfg["ready_fd"])
del ctypes, json, libc, cfg, fail
sys.path.insert(0, os.getcwd())
runpy.run_path(sys.argv[1], run_name="__main__")
""".replace("__CODE__", str(_FAILED_TO_CONFINE))

_CAP_DAC_READ_SEARCH = 1 << 2

# machine: (AUDIT_ARCH_*, clone, clone3, unshare) syscall numbers for the seccomp filter.
_SECCOMP_ARCHES = {
    "x86_64": (0xC000003E, 56, 435, 272),
    "aarch64": (0xC00000B7, 220, 435, 97),
}


def seccomp_filter() -> list[tuple[int, int, int, int]]:
    """The BPF program (``(code, jt, jf, k)`` rows) that refuses new user namespaces.

    ``unshare``/``clone`` with ``CLONE_NEWUSER`` get EPERM; ``clone3`` gets ENOSYS (its
    flags sit behind a pointer a filter cannot read; libc then falls back to ``clone``);
    foreign-ABI calls (x86 ``int 0x80``, x32) get EPERM, as they would bypass the numbers
    checked. Empty on an architecture without a table here.
    """
    arch = _SECCOMP_ARCHES.get(platform.machine())
    if arch is None:
        return []
    audit_arch, clone, clone3, unshare = arch
    ld, jeq, jset, ret = 0x20, 0x15, 0x45, 0x06
    allow, eperm, enosys = 0x7FFF0000, 0x00050000 | 1, 0x00050000 | 38
    return [
        (ld, 0, 0, 4),  # seccomp_data.arch
        (jeq, 1, 0, audit_arch),
        (ret, 0, 0, eperm),
        (ld, 0, 0, 0),  # seccomp_data.nr
        (jset, 0, 1, 0x40000000),  # x32
        (ret, 0, 0, eperm),
        (jeq, 0, 1, clone3),
        (ret, 0, 0, enosys),
        (jeq, 2, 0, unshare),
        (jeq, 1, 0, clone),
        (ret, 0, 0, allow),
        (ld, 0, 0, 16),  # low half of args[0]: the flags of unshare and clone
        (jset, 0, 1, 0x10000000),  # CLONE_NEWUSER
        (ret, 0, 0, eperm),
        (ret, 0, 0, allow),
    ]


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 when Landlock is unavailable."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        abi = libc.syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    except (OSError, AttributeError):
        return 0
    return max(int(abi), 0)


# --- choosing the back-end ----------------------------------------------------------

_detect_lock = threading.Lock()
_detected: dict[str, str | None] = {}


def bwrap_problem() -> str | None:
    """Why the bwrap back-end cannot run here, or ``None`` when it can.

    Decided once per process by a trial run of the real launcher, so that a bwrap that is
    installed but cannot work (no user namespaces, a container without mount rights)
    counts as missing.
    """
    with _detect_lock:
        if "problem" not in _detected:
            _detected["problem"] = _try_bwrap()
        return _detected["problem"]


def _try_bwrap() -> str | None:
    if shutil.which("bwrap") is None:
        return "bwrap is not installed (scripts/setup.sh installs it)"
    try:
        r = _run("print('ok')", SandboxConfig(timeout_s=60.0), "bwrap")
    except RuntimeError as e:
        return str(e)
    if r.stdout != "ok\n":
        return f"a trial run failed (exit {r.returncode}): {r.stderr.strip()[-300:]}"
    return None


def sandbox_kind(config: SandboxConfig | None = None) -> str:
    """The back-end a run with ``config`` gets here: ``"bwrap"`` or ``"process"``.

    ``backend="auto"`` falls back to ``"process"`` with a one-time warning when bwrap
    cannot run; ``backend="bwrap"`` then raises ``RuntimeError``.
    """
    config = config or SandboxConfig()
    if config.backend == "process":
        return "process"
    problem = bwrap_problem()
    if problem is None:
        return "bwrap"
    if config.backend == "bwrap":
        raise RuntimeError(f"the bwrap sandbox cannot run here: {problem}")
    with _detect_lock:
        if not _detected.get("warned"):
            _detected["warned"] = "yes"
            log.warning(
                "sandbox: falling back to the weaker process sandbox (%s); generated code "
                "can read what this user can read and use UDP and Unix sockets",
                problem,
            )
    return "process"


def containment(config: SandboxConfig | None = None) -> dict[str, Any]:
    """Which containment layers a run with ``config`` gets on this machine."""
    config = config or SandboxConfig()
    kind = sandbox_kind(config)
    abi = landlock_abi() if config.landlock else 0
    bwrap = kind == "bwrap"
    own_uid = os.geteuid() == 0 if bwrap else _drops_privileges(config)
    per_run_cap = own_uid or bwrap
    return {
        "backend": kind,
        "own_uid": own_uid,
        "process_cap_enforced": per_run_cap or os.geteuid() != 0,
        "memory_bound_mb": config.memory_bound_mb() if per_run_cap else None,
        "landlock_abi": abi,
        "reads_confined": bwrap,
        "writes_confined_to_dir": bwrap or abi > 0,
        "disk_quota_mb": config.work_dir_mb if bwrap else None,
        "network_blocked": bwrap or abi >= 4,
        "udp_and_unix_sockets_blocked": bwrap,
        "signals_scoped": bwrap or abi >= 6,
        "user_namespaces_blocked": bool(seccomp_filter()),
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


def _remove_tree(root: Path) -> bool:
    """Delete ``root`` and everything under it; never raises; True when it is gone.

    Depth-proof (the code may leave thousands of nested directories, deeper than both
    the recursion limit and ``PATH_MAX``): instead of recursing, each subdirectory's own
    subdirectories are moved up into ``root``, its files deleted and it removed, until
    ``root`` is empty. Symlinks are removed, never followed.
    """
    try:
        top = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return True
    except OSError as e:
        log.warning("sandbox: could not remove %s: %s", root, e)
        return False
    # Unguessable names, so that the code cannot make a move collide with its own folders.
    token, moved = secrets.token_hex(8), 0
    try:
        while entries := list(os.scandir(top)):
            for entry in entries:
                if not entry.is_dir(follow_symlinks=False):
                    os.unlink(entry.name, dir_fd=top)
                    continue
                os.chmod(entry.name, 0o700, dir_fd=top, follow_symlinks=False)
                sub = os.open(entry.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=top)
                try:
                    for inner in list(os.scandir(sub)):
                        if inner.is_dir(follow_symlinks=False):
                            moved += 1
                            os.rename(
                                inner.name, f".rm-{token}-{moved}", src_dir_fd=sub, dst_dir_fd=top
                            )
                        else:
                            os.unlink(inner.name, dir_fd=sub)
                finally:
                    os.close(sub)
                os.rmdir(entry.name, dir_fd=top)
        os.rmdir(root)
        return True
    except OSError as e:
        log.warning("sandbox: could not remove %s: %s", root, e)
        return False
    finally:
        os.close(top)


# --- launching ----------------------------------------------------------------------


def _bwrap_args(config: SandboxConfig, as_root: bool, program_fd: int) -> list[str]:
    """The ``bwrap`` command line up to the interpreter: namespaces, binds, work dir."""
    if as_root:
        # No user namespace: in one, root keeps root's rights on root's files. The
        # bootstrap switches to a fresh uid instead, which needs exactly these two caps.
        args = ["bwrap", "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts"]
        args += ["--unshare-cgroup-try", "--cap-drop", "ALL"]
        args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        args = ["bwrap", "--unshare-all", "--unshare-user", "--disable-userns"]
        args += ["--cap-drop", "ALL"]
    args += ["--die-with-parent", "--new-session"]
    binds, links = _visible_paths()
    made: set[str] = set()
    for path in sorted(binds) + sorted(links):
        # bwrap would create missing parents with the host's modes (0700 for /root),
        # which the fresh uid could not traverse.
        for parent in reversed(Path(path).parents[:-1]):
            if str(parent) not in made and str(parent) not in links:
                made.add(str(parent))
                args += ["--perms", "0755", "--dir", str(parent)]
        if path in links:
            args += ["--symlink", links[path], path]
        else:
            args += ["--ro-bind", path, path]
    args += ["--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    # /dev read-only: its tmpfs (and /dev/shm on it) has no size limit.
    args += ["--dev", "/dev", "--remount-ro", "/dev", "--proc", "/proc"]
    args += ["--perms", "1777", "--size", str(config.work_dir_mb << 20), "--tmpfs", _WORK_DIR]
    args += ["--file", str(program_fd), f"{_WORK_DIR}/main.py"]
    # The root tmpfs holds only mount points; read-only so that nothing unbounded is left.
    args += ["--remount-ro", "/", "--chdir", _WORK_DIR]
    return args


def _visible_paths() -> tuple[set[str], dict[str, str]]:
    """What a bwrap run sees of the host: directories bound read-only, and symlinks
    recreated (``/lib -> usr/lib`` on merged-/usr systems)."""
    binds: set[str] = set()
    links: dict[str, str] = {}
    for name in ("/lib", "/lib32", "/lib64", "/libx32", "/usr/lib", "/usr/lib32", "/usr/lib64"):
        if os.path.islink(name):
            links[name] = os.readlink(name)
        elif os.path.isdir(name):
            binds.add(name)
    # The interpreter: its prefixes (a venv's and its base's) and, if it lives elsewhere
    # (a venv's python links to /usr/bin/python3.x), the binary itself.
    prefixes = {sys.base_prefix, sys.prefix, sys.base_exec_prefix, sys.exec_prefix}
    binds |= {p for p in prefixes if os.path.isdir(p)}
    binds.add(os.path.realpath(sys.executable))
    # A path inside another bound path is covered by it.
    covered = {
        p
        for p in binds
        if any(p != q and Path(p).is_relative_to(q) for q in binds)
        or any(Path(p).is_relative_to(link) for link in links)
    }
    return binds - covered, links


def _run(code: str, config: SandboxConfig, kind: str) -> SandboxResult:
    """One run of ``code`` on back-end ``kind`` (``config`` already validated)."""
    as_root = os.geteuid() == 0
    own_uid = as_root if kind == "bwrap" else _drops_privileges(config)
    uid = _fresh_uid() if own_uid else None
    # The output files live outside the code's reach (outside the work dir, or outside the
    # sandbox's filesystem); the child writes to them only through inherited descriptors.
    outer = Path(tempfile.mkdtemp(prefix="agentqmix-sbx-"))
    ready_r, ready_w = os.pipe()
    program_fd = -1
    try:
        if kind == "bwrap":
            (outer / "main.py").write_text(code)
            program_fd = os.open(outer / "main.py", os.O_RDONLY)
            launcher = _bwrap_args(config, as_root, program_fd)
            workdir, cwd = _WORK_DIR, outer
            # Counted per uid (root's) or per user namespace (a user's): either way only
            # this run's processes, plus, in a user's namespace, bwrap's init process.
            nproc = config.max_processes + (0 if as_root else 1)
        else:
            work = outer / "work"
            work.mkdir()
            (work / "main.py").write_text(code)
            if uid is not None:
                os.chown(work, uid, uid)
                os.chown(work / "main.py", uid, uid)
            work.chmod(0o700)
            launcher, workdir, cwd = [], str(work), work
            nproc = config.max_processes + (0 if own_uid else _user_process_count())
        boot = {
            "memory_mb": config.memory_mb,
            "cpu_s": config.cpu_s,
            "file_size_mb": config.file_size_mb,
            "max_open_files": config.max_open_files,
            "nproc": nproc,
            "uid": uid,
            "gid": uid,
            "keep_caps": _CAP_DAC_READ_SEARCH if kind == "process" else 0,
            "seccomp": seccomp_filter(),
            "landlock": config.landlock,
            "dir": workdir,
            "ready_fd": ready_w,
        }
        argv = [sys.executable, "-I", "-c", _BOOTSTRAP, json.dumps(boot), f"{workdir}/main.py"]
        fds = (ready_w, program_fd) if program_fd >= 0 else (ready_w,)
        with open(outer / "stdout", "wb") as out, open(outer / "stderr", "wb") as err:
            rc, timed_out, duration, stray = _supervise(
                launcher + argv, cwd, workdir, fds, (out, err), config.timeout_s, uid
            )
        confined = _read_ready(ready_r)
        stdout, stderr = _read_capped(outer / "stdout"), _read_capped(outer / "stderr")
    finally:
        for fd in (ready_r, ready_w, program_fd):
            if fd >= 0:
                os.close(fd)
        _remove_tree(outer)
    if kind == "bwrap" and 128 < rc <= 128 + 64 and not timed_out:
        # bwrap reports a command killed by signal N as exit status 128 + N.
        rc = -(rc - 128)
    if not confined and not timed_out:
        raise RuntimeError(f"the {kind} sandbox could not confine the run: {stderr.strip()[-500:]}")
    return SandboxResult(
        passed=rc == 0 and not timed_out,
        returncode=rc,
        stdout=stdout,
        stderr=stderr,
        timed_out=timed_out,
        killed=rc < 0,
        duration_s=duration,
        stray_processes=stray,
        backend=kind,
    )


def _supervise(
    argv: list[str],
    cwd: Path,
    home: str,
    pass_fds: tuple[int, ...],
    outputs: tuple[Any, Any],
    timeout_s: float,
    uid: int | None,
) -> tuple[int, bool, float, int]:
    """Start the child, wait up to the timeout, then kill everything it left.

    Returns (exit status, timed out, seconds, processes left behind).
    """
    started = time.monotonic()
    timed_out = False
    stray = 0
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=clean_env(home),
        stdin=subprocess.DEVNULL,
        stdout=outputs[0],
        stderr=outputs[1],
        start_new_session=True,
        close_fds=True,
        pass_fds=pass_fds,
    )
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        # Whatever it left behind (children, daemons, setsid escapees) dies now. Under
        # bwrap, killing the group kills its PID namespace's init, and with it the rest.
        if uid is not None:
            # Counted before any kill: bwrap's PID namespace takes them all down at once.
            stray = max(len(_pids_of_uid(uid)) - int(timed_out), 0)
        _kill_group(proc.pid)
        if uid is not None:
            _kill_uid(uid)
        proc.wait()
    return proc.returncode, timed_out, time.monotonic() - started, stray


def _read_ready(fd: int) -> bool:
    """Whether the bootstrap reported every layer in place (the byte waits in the pipe)."""
    os.set_blocking(fd, False)
    try:
        return os.read(fd, 1) == b"1"
    except BlockingIOError:
        return False


def run_python(
    code: str,
    timeout_s: float | None = None,
    memory_mb: int | None = None,
    cpu_s: int | None = None,
    config: SandboxConfig | None = None,
) -> SandboxResult:
    """Run ``code`` as a Python program in the sandbox and report what happened.

    The keyword limits override the matching fields of ``config``. Raises
    ``RuntimeError`` only when the sandbox itself could not be set up.
    """
    config = config or SandboxConfig()
    overrides = {"timeout_s": timeout_s, "memory_mb": memory_mb, "cpu_s": cpu_s}
    config = SandboxConfig(
        **{**config.__dict__, **{k: v for k, v in overrides.items() if v is not None}}
    )
    config.validate()
    return _run(code, config, sandbox_kind(config))


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


def _solution(task: Task, completion: str) -> str:
    """The reply's code made into a module defining the task's entry point."""
    prompt = task.meta.get("prompt", "")
    test = task.meta.get("test", "")
    entry = task.meta.get("entry_point", "")
    if not (test and entry):
        raise ValueError(f"task {task.task_id} has no HumanEval test/entry_point in meta")
    code = extract_code(completion, entry)
    if re.search(rf"^\s*def\s+{re.escape(entry)}\s*\(", code, re.MULTILINE):
        # A whole function: the prompt goes first for its imports and helpers; the
        # reply's definition comes later and wins.
        return prompt + "\n\n" + code
    # Only the body: indent it when the model did not, then append it to the prompt.
    lines = code.splitlines()
    first = next((line for line in lines if line.strip()), "")
    if first and not first.startswith((" ", "\t")):
        lines = ["    " + line if line.strip() else line for line in lines]
    return prompt + "\n".join(lines)


def humaneval_program(task: Task, completion: str) -> str:
    """The HumanEval test program for a reply: prompt/solution, the tests, ``check(entry)``."""
    solution = _solution(task, completion)
    return f"{solution}\n\n{task.meta['test']}\n\ncheck({task.meta['entry_point']})\n"


def humaneval_examples_program(task: Task, completion: str) -> str:
    """A program that runs the reply's code on the examples of the entry point's docstring
    (:func:`docstring_examples`) and prints each outcome; it holds none of the hidden
    tests, so nothing it prints can reveal them."""
    solution = _solution(task, completion)
    examples = docstring_examples(task.meta.get("prompt", ""), task.meta["entry_point"])
    return f"{solution}\n\n_EXAMPLES = {examples!r}\n{_EXAMPLE_RUNNER}"


# Runs each (source, expected) pair after the solution; a match is equal values (the
# expected text read as a literal) or equal text (whitespace aside), as doctest would see.
_EXAMPLE_RUNNER = r"""
import ast as _ast, contextlib as _contextlib, io as _io
_failed = 0
_lines = []
for _src, _want in _EXAMPLES:
    _out = _io.StringIO()
    _value, _has_value = None, False
    try:
        with _contextlib.redirect_stdout(_out):
            try:
                _code = compile(_src, "<example>", "eval")
            except SyntaxError:
                exec(compile(_src, "<example>", "exec"), globals())
            else:
                _value, _has_value = eval(_code, globals()), True
    except Exception as _e:
        _failed += 1
        _lines.append("FAILED  %s\n        raised %s: %s" % (_src, type(_e).__name__, _e))
        continue
    _got = (_out.getvalue() + (repr(_value) if _has_value and _value is not None else "")).strip()
    _ok = " ".join(_got.split()) == " ".join(_want.split())
    if not _ok and _has_value:
        try:
            _ok = _value == _ast.literal_eval(_want)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            pass
    if _ok:
        _lines.append("ok      %s  ->  %s" % (_src, _want))
    else:
        _failed += 1
        _lines.append("FAILED  %s\n        expected %s\n        got      %s" % (_src, _want, _got[:300]))
print("\n".join(_lines))
if _EXAMPLES:
    print("%d of %d docstring examples failed." % (_failed, len(_EXAMPLES)))
else:
    print("The docstring has no examples that can be run.")
"""

_ARROW = re.compile(r"\s*#?\s*(==>|=>|➞|->|==|=|should return|returns?)\s*", re.IGNORECASE)
# What may follow an expected value on its line: nothing, punctuation, a comment, or prose
# (an operator means the value was only the start of an expression, e.g. "1 + 9 = 10").
_AFTER_VALUE = re.compile(r"\s*$|\s*[.,;#(]|\s+[A-Za-z]")


def docstring_examples(prompt: str, entry: str) -> list[tuple[str, str]]:
    """The runnable examples of function ``entry``'s docstring as (source, expected) pairs:
    ``>>>`` lines (doctest's reading) and lines such as ``f([1, 2]) ➞ 3``,
    ``f("a") == "b"`` or ``f(4) should return 16.`` whose arguments and value are literals."""
    docstring = _docstring(prompt, entry)
    examples: list[tuple[str, str]] = []
    try:
        for ex in doctest.DocTestParser().get_examples(docstring):
            source, want = ex.source.strip(), ex.want.strip()
            if not want and _is_comparison(source):
                want = "True"  # ">>> f(x) == y" with no output line claims the comparison
            examples.append((source, want))
    except ValueError:  # inconsistent indentation: read it line by line below only
        pass
    for line in docstring.splitlines():
        if ">>>" in line:
            continue
        example = _call_example(line, entry)
        if example is not None:
            examples.append(example)
    return examples


def _call_example(line: str, entry: str) -> tuple[str, str] | None:
    """``(call, value)`` from a line like ``f(1, 'a') ==> [2]``, else None."""
    match = re.search(rf"(?<![\w.]){re.escape(entry)}\(", line)
    if match is None:
        return None
    rest = line[match.start() :]
    call = next(
        (rest[: j + 1] for j, c in enumerate(rest) if c == ")" and _literal_call(rest[: j + 1])),
        None,
    )
    if call is None:
        return None
    arrow = _ARROW.match(rest, len(call))
    if arrow is None:
        return None
    tail = rest[arrow.end() :]
    for end in range(len(tail), 0, -1):
        if _is_literal(tail[:end]) and _AFTER_VALUE.match(tail, end):
            return call, tail[:end].strip()
    return None


def _is_comparison(source: str) -> bool:
    try:
        return isinstance(ast.parse(source, mode="eval").body, ast.Compare)
    except SyntaxError:
        return False


def _is_literal(text: str) -> bool:
    try:
        ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False
    return True


def _literal_call(text: str) -> bool:
    """``text`` is one call whose arguments are all literals (runnable without context)."""
    try:
        node = ast.parse(text, mode="eval").body
    except SyntaxError:
        return False
    return (
        isinstance(node, ast.Call)
        and not node.keywords
        and all(_is_literal(ast.unparse(arg)) for arg in node.args)
    )


def _docstring(prompt: str, entry: str) -> str:
    """The docstring of function ``entry`` in ``prompt`` ("" when there is none)."""
    try:
        tree = ast.parse(prompt)
    except SyntaxError:
        return ""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == entry:
            return ast.get_docstring(node) or ""
    return ""


def examples_report(task: Task, completion: str, config: SandboxConfig | None = None) -> str:
    """What an agent may see after its code failed the hidden tests: the code run on the
    docstring's examples (doctest's report, last 2,000 characters), never the output of
    the hidden tests, whose assertions would give the answers away."""
    r = run_python(humaneval_examples_program(task, completion), config=config)
    if r.timed_out:
        return "Your code timed out on the docstring's examples (an infinite loop?)."
    report = (r.stdout + ("\n" + r.stderr if r.stderr else "")).strip()
    return report[-2000:] or f"exit status {r.returncode}"


def check_code(task: Task, completion: str | None, config: SandboxConfig | None = None) -> float:
    """1.0 when the code in ``completion`` passes the task's HumanEval tests, else 0.0."""
    if not completion or not completion.strip():
        return 0.0
    result = run_python(humaneval_program(task, completion), config=config)
    return 1.0 if result.passed else 0.0
