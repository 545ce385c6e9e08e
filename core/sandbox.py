"""Run untrusted Python in a real subprocess without letting it harm the host (docs/openai.md,
Sandbox). Infrastructure: it knows nothing of tasks; the HumanEval checker that decides whether
generated code is right lives with the tasks (:mod:`core.tasks.code_checker`).

Each run gets a separate interpreter (``sys.executable -I``), a clean environment (no API
keys or other secrets, minimal ``PATH``), stdin closed, its own session, and a wall-clock
timeout after which every process it started is killed. Two back-ends;
``SandboxConfig.backend`` chooses, and it **fails closed**:

* ``"auto"`` (the default) and ``"bwrap"``: bubblewrap, or no run at all —
  :func:`sandbox_kind` raises :class:`SandboxUnavailable` (a user error: one sentence naming
  why and what to install). There is no silent fallback.
* ``"process"``: the weaker sandbox, only when asked for by name; callers warn on every run
  (:func:`weak_sandbox_warning`).

* **bwrap** (bubblewrap): the run sees a filesystem of its own: read-only binds of the
  interpreter's prefixes *wherever they live* (a venv under ``/tmp`` included) and the system
  libraries (``/usr/lib``, ``/lib*``) and nothing else (no ``/etc``, no ``/root`` beyond the
  path to the interpreter, no home), a fresh ``/proc`` and ``/dev``, and as its only writable
  place a tmpfs work dir ``/sandbox`` of ``work_dir_mb`` (the run's disk quota; it vanishes
  with the run; also ``HOME`` and ``TMPDIR``). New network, PID, IPC, UTS and cgroup
  namespaces: no network at all (UDP, TCP, abstract and path Unix sockets of the host are out
  of reach) and no signal to any host process. As root, bwrap sets this up *without* a user
  namespace (inside one, root would still read root's files with root's rights) and the
  bootstrap then switches to a fresh uid with no capabilities left; as a normal user, bwrap
  runs in a user namespace of its own.
* **process**: the run works in a fresh host temporary directory; when the parent is root
  it switches to a fresh uid and keeps only ``CAP_DAC_READ_SEARCH`` (so an interpreter under
  a private prefix such as ``/root/.pyenv`` stays readable, which also means it can read
  what root can read), and Landlock confines writes.

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

What the process sandbox does *not* contain: reading files (as root, everything root can
read), UDP and Unix sockets, network access without Landlock ABI >= 4, the total size of
the files written (each file is capped, their number is not), and writes to
world-writable directories such as ``/tmp`` when Landlock is missing and the parent is
not root. ``containment()`` reports which layers are active on this machine.

:func:`run_python` runs one program to its end; :func:`spawn` starts one that talks to its
parent over inherited pipes (the HumanEval checker's candidate process) and
:meth:`Sandboxed.reap` ends it.
"""

from __future__ import annotations

import json
import logging
import os
import platform
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

from core.errors import UserError

log = logging.getLogger(__name__)

_SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH")
_OUTPUT_LIMIT = 64_000
"""Characters of stdout/stderr kept in a result."""
_FAILED_TO_CONFINE = 120
"""Exit code of the bootstrap when it could not apply a containment layer it was asked for."""
BACKENDS = ("auto", "bwrap", "process")
"""Values of ``SandboxConfig.backend``."""
_WORK_DIR = "/sandbox"
"""The work dir inside a bwrap sandbox (the tmpfs); also its ``HOME`` and ``TMPDIR``. Not
``/tmp``: a Python environment may live there, and its binding must stay visible."""


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
    """``"auto"`` or ``"bwrap"`` (bubblewrap, or refuse to run), or ``"process"`` (the weaker
    sandbox, only when asked for by name)."""

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
        return "bwrap is not installed"
    try:
        r = _run("print('ok')", SandboxConfig(timeout_s=60.0), "bwrap")
    except (RuntimeError, OSError) as e:
        return str(e)
    if r.stdout != "ok\n":
        return f"a trial run failed (exit {r.returncode}): {r.stderr.strip()[-300:]}"
    return None


class SandboxUnavailable(UserError):
    """Generated code was to run, and the sandbox asked for cannot run here."""


def sandbox_kind(config: SandboxConfig | None = None) -> str:
    """The back-end a run with ``config`` gets here: ``"bwrap"`` or ``"process"``.

    Fails closed: ``"auto"`` and ``"bwrap"`` give bwrap or raise
    :class:`SandboxUnavailable`; the process sandbox only when ``backend="process"``.
    """
    config = config or SandboxConfig()
    if config.backend == "process":
        return "process"
    problem = bwrap_problem()
    if problem is None:
        return "bwrap"
    raise SandboxUnavailable(
        f"Generated code runs only in the bubblewrap sandbox, which cannot run here "
        f"({problem}): install it (`apt-get install bubblewrap`, or run scripts/setup.sh as "
        "root), or pass --sandbox process to accept the weaker process sandbox."
    )


def weak_sandbox_warning() -> str:
    """What a run that chose the process sandbox says on every start."""
    return (
        "warning: generated code runs in the weaker process sandbox (--sandbox process): it "
        "can read what this user can read and use UDP and Unix sockets."
    )


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


def _bwrap_args(
    config: SandboxConfig, as_root: bool, files: dict[str, int], hide: tuple[str, ...] = ()
) -> list[str]:
    """The ``bwrap`` command line up to the interpreter: namespaces, binds, work dir,
    ``files`` (name in the work dir -> open descriptor of its content), and the directories
    in ``hide`` covered by an empty read-only tmpfs."""
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
    for path in hide:
        if os.path.isdir(path) and any(Path(path).is_relative_to(b) for b in binds):
            args += ["--size", "4096", "--tmpfs", path, "--remount-ro", path]
    # /dev read-only: its tmpfs (and /dev/shm on it) has no size limit.
    args += ["--dev", "/dev", "--remount-ro", "/dev", "--proc", "/proc"]
    args += ["--perms", "1777", "--size", str(config.work_dir_mb << 20), "--tmpfs", _WORK_DIR]
    for name, fd in files.items():
        args += ["--file", str(fd), f"{_WORK_DIR}/{name}"]
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
    prefixes |= {os.path.realpath(p) for p in prefixes}
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


class Sandboxed:
    """One sandboxed process, started by :func:`spawn`; :meth:`reap` ends it."""

    def __init__(
        self,
        proc: subprocess.Popen,
        kind: str,
        uid: int | None,
        outer: Path,
        ready_r: int,
        timeout_s: float,
    ) -> None:
        self.proc, self.kind, self.uid, self.outer = proc, kind, uid, outer
        self._ready_r, self.timeout_s = ready_r, timeout_s
        self.started = time.monotonic()

    def reap(self, wait: bool = True) -> SandboxResult:
        """Wait for the program to end (``wait``: up to the time limit; else not at all),
        kill everything it left behind, clean up, and report. Raises ``RuntimeError`` when
        the bootstrap could not put every containment layer in place."""
        proc, timed_out = self.proc, False
        try:
            try:
                left = self.timeout_s - (time.monotonic() - self.started)
                proc.wait(timeout=max(left, 0.0) if wait else 0.0)
            except subprocess.TimeoutExpired:
                timed_out = wait
            stray = self._kill_all()
            confined = _read_ready(self._ready_r)
            stdout = _read_capped(self.outer / "stdout")
            stderr = _read_capped(self.outer / "stderr")
        finally:
            os.close(self._ready_r)
            _remove_tree(self.outer)
        rc = proc.returncode
        if self.kind == "bwrap" and 128 < rc <= 128 + 64 and not timed_out:
            # bwrap reports a command killed by signal N as exit status 128 + N.
            rc = -(rc - 128)
        if not confined and not timed_out and wait:
            raise RuntimeError(
                f"the {self.kind} sandbox could not confine the run: {stderr.strip()[-500:]}"
            )
        return SandboxResult(
            passed=rc == 0 and not timed_out,
            returncode=rc,
            stdout=stdout,
            stderr=stderr,
            timed_out=timed_out,
            killed=rc < 0,
            duration_s=time.monotonic() - self.started,
            stray_processes=stray,
            backend=self.kind,
        )

    def _kill_all(self) -> int:
        """Kill the program and whatever it left (children, daemons, setsid escapees);
        returns how many processes besides the main one were alive."""
        stray = 0
        if self.uid is not None:
            # Counted before any kill: bwrap's PID namespace takes them all down at once.
            main_alive = int(self.proc.poll() is None)
            stray = max(len(_pids_of_uid(self.uid)) - main_alive, 0)
        # Under bwrap, killing the group kills its PID namespace's init, and with it the rest.
        _kill_group(self.proc.pid)
        if self.uid is not None:
            _kill_uid(self.uid)
        self.proc.wait()
        return stray


def spawn(
    files: dict[str, str],
    config: SandboxConfig,
    kind: str,
    pass_fds: tuple[int, ...] = (),
    args: tuple[str, ...] = (),
    hide: tuple[str, ...] = (),
) -> Sandboxed:
    """Start ``files["main.py"]`` (with the other ``files`` beside it in the work dir) on
    back-end ``kind`` with ``config`` already validated; ``pass_fds`` stay open in it (pipes
    to talk to the parent) and ``args`` follow the program's path in ``sys.argv``. Under
    bwrap the directories in ``hide`` (inside the visible prefixes) appear empty: a
    benchmark package's answers, say. The process back-end cannot hide them."""
    as_root = os.geteuid() == 0
    own_uid = as_root if kind == "bwrap" else _drops_privileges(config)
    uid = _fresh_uid() if own_uid else None
    # The output files live outside the code's reach (outside the work dir, or outside the
    # sandbox's filesystem); the child writes to them only through inherited descriptors.
    outer = Path(tempfile.mkdtemp(prefix="agentqmix-sbx-"))
    ready_r, ready_w = os.pipe()
    file_fds: dict[str, int] = {}
    try:
        if kind == "bwrap":
            for name, text in files.items():
                (outer / name).write_text(text)
                file_fds[name] = os.open(outer / name, os.O_RDONLY)
            launcher = _bwrap_args(config, as_root, file_fds, hide)
            workdir, cwd = _WORK_DIR, outer
            # Counted per uid (root's) or per user namespace (a user's): either way only
            # this run's processes, plus, in a user's namespace, bwrap's init process.
            nproc = config.max_processes + (0 if as_root else 1)
        else:
            work = outer / "work"
            work.mkdir()
            for name, text in files.items():
                (work / name).write_text(text)
                if uid is not None:
                    os.chown(work / name, uid, uid)
            if uid is not None:
                os.chown(work, uid, uid)
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
        with open(outer / "stdout", "wb") as out, open(outer / "stderr", "wb") as err:
            proc = subprocess.Popen(
                launcher + argv + list(args),
                cwd=cwd,
                env=clean_env(workdir),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
                close_fds=True,
                pass_fds=(ready_w, *file_fds.values(), *pass_fds),
            )
    except BaseException:
        os.close(ready_r)
        _remove_tree(outer)
        raise
    finally:
        for fd in (ready_w, *file_fds.values()):
            os.close(fd)
    return Sandboxed(proc, kind, uid, outer, ready_r, config.timeout_s)


def _run(code: str, config: SandboxConfig, kind: str) -> SandboxResult:
    """One run of ``code`` on back-end ``kind`` (``config`` already validated)."""
    return spawn({"main.py": code}, config, kind).reap()


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
    :class:`SandboxUnavailable` when the sandbox asked for cannot run here, and
    ``RuntimeError`` when it could not be set up.
    """
    config = config or SandboxConfig()
    overrides = {"timeout_s": timeout_s, "memory_mb": memory_mb, "cpu_s": cpu_s}
    config = SandboxConfig(
        **{**config.__dict__, **{k: v for k, v in overrides.items() if v is not None}}
    )
    config.validate()
    return _run(code, config, sandbox_kind(config))
