"""Ray's local processes die with the sweep driver, whatever kills it.

``ray.init`` starts a head node (GCS server, raylet, monitors, workers) that outlives a
driver killed with SIGKILL. :func:`reaped_ray` starts a small watcher process before Ray
and keeps a pipe to it: when the pipe closes without the word ``done`` (the driver died)
the watcher kills every process of this sweep's Ray — each inherits the environment
variable :data:`MARK` naming the Ray temporary folder the sweep made, or holds a file open
inside it (workers rename themselves ``ray::...``, a long new title overwrites the
environment block, and Ray's own reaper may orphan them, so neither the command line, nor
the environment, nor the parent is enough alone) — and all their descendants, then
removes the folder. A clean exit shuts Ray down itself and says ``done``.

    python core/experiment/ray_reaper.py TEMP_DIR   # reads the pipe on stdin

Started as a script, not ``-m core.experiment.ray_reaper``: the package's ``__init__``
imports PyTorch (about 3 CPU-seconds per sweep for a process that needs only the
standard library, which is all this module imports).
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import sys
from pathlib import Path

DONE = b"done"
WATCHER = (b"core.experiment.ray_reaper", b"experiment/ray_reaper.py")
"""What the watcher's command line holds (as a module or as a script): it names the Ray
folder too, but is not one of Ray's processes."""
MARK = "AQMIX_RAY_FOLDER"
"""Set to the sweep's Ray folder in the driver's environment while Ray starts, so every
process Ray starts carries it."""


def ray_processes(temp_dir: str) -> list[int]:
    """Pids of the processes started for ``temp_dir`` (named on their command line or
    marked in their environment) and all their descendants."""
    cmdlines: dict[int, bytes] = {}
    parents: dict[int, int] = {}
    marked: set[int] = set()
    mark = f"\0{MARK}={temp_dir}\0".encode()
    uid, since = os.getuid(), _started_ticks(os.getpid())
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            cmdlines[pid] = (entry / "cmdline").read_bytes()
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            parents[pid] = int(stat[1])
            # Only our user's processes started after this one (the watcher starts before
            # Ray, the driver calls this after it) can carry the mark or hold Ray's files:
            # the rest are not read further (every open file of every process, each second).
            if entry.stat().st_uid != uid or int(stat[19]) < since:
                continue
        except (OSError, ValueError, IndexError):
            continue
        try:
            if mark in b"\0" + (entry / "environ").read_bytes() or _holds_files_in(entry, temp_dir):
                marked.add(pid)
        except OSError:
            pass  # gone meanwhile
    needle = temp_dir.encode()
    found = {
        pid
        for pid, cmd in cmdlines.items()
        if (needle in cmd or pid in marked)
        and not any(w in cmd for w in WATCHER)
        and pid != os.getpid()
    }
    grew = True
    while grew:
        children = {pid for pid, ppid in parents.items() if ppid in found} - found
        grew = bool(children)
        found |= children
    return sorted(found)


def _holds_files_in(entry: Path, temp_dir: str) -> bool:
    """Whether the process has a file open inside ``temp_dir`` (Ray's processes keep their
    logs there). Needed besides the environment mark: a process that renames itself with
    a long title (``ray::DashboardAgent``) overwrites its environment block, and once its
    parent is gone it is no one's descendant either — a SIGKILLed driver's CI run left one."""
    prefix = temp_dir.rstrip("/") + "/"
    try:
        fds = list((entry / "fd").iterdir())
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(fd).startswith(prefix):
                return True
        except OSError:
            continue
    return False


def reap(temp_dir: str, known: dict[int, str] | None = None) -> None:
    """Kill what Ray started for ``temp_dir`` and remove the folder. ``known``: pids seen
    earlier (with their start times), killed too if still the same process: workers whose
    raylet is gone have a new parent and no longer look like this sweep's."""
    pids = set(ray_processes(temp_dir))
    pids |= {pid for pid, started in (known or {}).items() if started and _started(pid) == started}
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    shutil.rmtree(temp_dir, ignore_errors=True)


def snapshot(temp_dir: str) -> dict[int, str]:
    """This sweep's Ray processes now, with their start times (for :func:`reap`)."""
    return {pid: _started(pid) for pid in ray_processes(temp_dir)}


def _started_ticks(pid: int) -> int:
    """:func:`_started` as a number (0 if unknown: then every process is looked at)."""
    started = _started(pid)
    return int(started) if started.isdigit() else 0


def _started(pid: int) -> str:
    """The process's start time (field 22 of ``/proc/PID/stat``): a pid used again by a new
    process has another; a process that renames itself (``ray::IDLE``) keeps it."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def main() -> None:
    temp_dir = sys.argv[1]
    # Our own session: a Ctrl-C or SIGTERM meant for the driver's group must not stop us.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # Until the driver closes the pipe or dies; meanwhile note Ray's processes each second,
    # since those whose parent dies first are no longer found as descendants.
    known: dict[int, str] = {}
    said = b""
    while True:
        ready, _, _ = select.select([sys.stdin.buffer], [], [], 1.0)
        if ready:
            chunk = os.read(sys.stdin.fileno(), 4096)
            if not chunk:
                break
            said += chunk
        else:
            known.update(snapshot(temp_dir))
    if said.strip() != DONE:
        reap(temp_dir, known)


if __name__ == "__main__":
    main()
