"""Where the program writes: one check for every output path, one way to replace a file.

Every file or folder a command writes (``--out``, ``--db``, ``--parquet``, ``--cache-dir``,
a sweep's ``--out``, the lab's ``--db``) is checked here before any work, and every file
is replaced through :func:`replace_file`. Two rules:

* **Never write over what is not a regular file.** An atomic rename (temporary file +
  ``os.replace``) over ``/dev/full`` replaces the device node; over a named pipe or a
  socket it replaces those. A path that exists and is not a regular file (a symlink is
  followed: a link to a regular file is fine, and the file it names is replaced) is
  refused with one sentence, both when it is checked and right before the rename.
* **Say what is wrong in one sentence** (:class:`UserError`, exit code 2): a file name
  longer than the file system allows, a folder that is a file, a folder we may not
  write in, a read-only file system. A full disk is :class:`core.errors.DiskFull`.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path

from core.errors import DiskFull, UserError

NAME_MAX = 255
"""Longest file name (bytes) where the file system does not say (Linux's limit)."""
PATH_MAX = 4096
"""Longest path (bytes) the kernel takes."""

_KINDS = (
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISREG, "a file"),
)


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _shown(path: Path) -> str:
    """``path`` as a message shows it: very long names are cut, so the sentence stays one line."""
    text = str(path)
    return text if len(text) <= 120 else text[:60] + "…" + text[-40:]


PATH_FLAGS = (
    "--out", "--parquet", "--db", "--cache-dir", "--init", "--checkpoint", "--society",
    "--model-file", "--env", "--from-sweep", "--replies", "--reference", "--reference-script",
)  # fmt: skip
"""Every flag of ``agentqmix`` (and of its benchmarks) whose value is a file or folder."""


def check_no_empty_path(args: list[str]) -> None:
    """UserError if a path flag of ``args`` (a command line) is given an empty value: the
    parser would read ``--parquet ""`` as ``.``, the current folder, and write into it."""
    for i, arg in enumerate(args):
        flag, sep, value = arg.partition("=")
        if flag not in PATH_FLAGS:
            continue
        if sep and not value.strip() or not sep and i + 1 < len(args) and not args[i + 1].strip():
            raise UserError(f'{flag} is empty; give a path ("." names the current folder).')


def name_problem(path: str | os.PathLike[str]) -> str | None:
    """Why ``path`` cannot be a file name here (a part or the whole too long), else None."""
    path = Path(path)
    raw = os.fsencode(str(path.absolute()))
    if len(raw) >= PATH_MAX:
        return f"the path is {len(raw)} bytes long; the limit is {PATH_MAX - 1}"
    try:
        anchor = next((p for p in path.absolute().parents if p.exists()), Path("/"))
        limit = os.pathconf(anchor, "PC_NAME_MAX")
    except (OSError, ValueError):  # a parent's own name is too long to look up
        limit = NAME_MAX
    for part in path.parts:
        size = len(os.fsencode(part))
        if size > limit:
            shown = part if len(part) <= 24 else part[:20] + "…"
            return f"the name {shown!r} is {size} bytes long; this file system allows {limit}"
    return None


def check_not_special(path: str | os.PathLike[str], flag: str) -> Path:
    """UserError if ``path`` exists and is not a regular file (symlinks followed)."""
    path = Path(path)
    if problem := name_problem(path):
        raise UserError(f"{flag} {_shown(path)}: {problem}.")
    try:
        mode = path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):  # the folder checks say what is wrong
        return path
    except OSError as err:
        raise os_error(err, path, flag) from err
    if not stat.S_ISREG(mode):
        raise UserError(
            f"{flag} {_shown(path)} is {_kind(mode)}, not a regular file; "
            "refusing to write over it."
        )
    return path


def check_output_file(path: str | os.PathLike[str], flag: str = "--out") -> Path:
    """Check, before any work, that a file can be written at ``path``: not a folder or a
    special file, a name the file system takes, in a folder we can create files in
    (created if missing). UserError naming ``flag`` otherwise."""
    path = Path(path)
    if problem := name_problem(path):
        raise UserError(f"{flag} {_shown(path)}: {problem}.")
    if path.name in ("", ".", "..") or path.is_dir():
        raise UserError(f"{flag} {path} is a folder; give a file name such as {path / 'model.pt'}.")
    check_not_special(path, flag)
    _check_parents(path.parent, path, flag)
    probe = path.with_name(path.name[:200] + ".probe.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(probe, "wb"):
            pass
        probe.unlink()
    except OSError as err:
        raise os_error(err, path, flag) from err
    return path


def check_output_dir(path: str | os.PathLike[str], flag: str) -> Path:
    """Check, before any work, that files can be written in folder ``path`` (created if
    missing). UserError naming ``flag`` otherwise."""
    path = Path(path)
    if problem := name_problem(path):
        raise UserError(f"{flag} {_shown(path)}: {problem}.")
    check_folder(path, flag)
    _check_parents(path, path, flag)
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".agentqmix-probe.tmp"
        with open(probe, "wb"):
            pass
        probe.unlink()
    except OSError as err:
        raise os_error(err, path, flag) from err
    return path


def _check_parents(folder: Path, path: Path, flag: str) -> None:
    for parent in (folder, *folder.parents):
        if parent.exists():
            if not parent.is_dir():
                raise UserError(f"{flag} {_shown(path)}: {parent} is a file, not a folder.")
            return


def replace_file(tmp: str | os.PathLike[str], path: str | os.PathLike[str], flag: str) -> Path:
    """``os.replace(tmp, path)``, unless ``path`` is (now) not a regular file: then ``tmp``
    is removed and UserError. A symlink to a regular file keeps the link; its file is replaced."""
    path = Path(path)
    try:
        check_not_special(path, flag)
    except UserError:
        Path(tmp).unlink(missing_ok=True)
        raise
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    os.replace(tmp, target)
    return path


def temp_beside(path: str | os.PathLike[str]) -> Path:
    """A new, empty temporary file in ``path``'s folder, for :func:`replace_file`.

    Created exclusively under a fresh name: a fixed name (``model.pt.tmp``) could already
    be a named pipe, whose opening blocks, or a link that sends the write elsewhere."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name[:100]}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    return Path(tmp)


def check_folder(path: str | os.PathLike[str], flag: str) -> Path:
    """UserError if ``path`` exists and is not a folder (symlinks followed), or if its name
    is too long for the file system."""
    path = Path(path)
    if problem := name_problem(path):
        raise UserError(f"{flag} {_shown(path)}: {problem}.")
    if path.exists() and not path.is_dir():
        try:
            kind = _kind(path.stat().st_mode)
        except OSError as err:
            raise os_error(err, path, flag) from err
        raise UserError(f"{flag} {_shown(path)} is {kind}, not a folder.")
    return path


def write_file(path: str | os.PathLike[str], data: bytes, flag: str) -> Path:
    """Write ``data`` to ``path`` atomically (a temporary file next to it, then
    :func:`replace_file`); a failed write removes the temporary and keeps the old file."""
    path = Path(path)
    check_not_special(path, flag)
    try:
        tmp = temp_beside(path)
    except OSError as err:
        raise os_error(err, path, flag) from err
    try:
        with open(tmp, "wb") as f:
            f.write(data)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise os_error(err, path, flag) from err
    return replace_file(tmp, path, flag)


_FULL = (errno.ENOSPC, errno.EDQUOT)
_REFUSED = (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENAMETOOLONG, errno.ENOTDIR, errno.EISDIR)


def os_error(err: OSError, path: str | os.PathLike[str], flag: str) -> UserError:
    """The one-sentence error for an OSError met writing ``path`` (``flag`` names it)."""
    reason = err.strerror or str(err)
    if err.errno in _FULL:
        return DiskFull(
            f"{flag} {_shown(Path(path))}: the disk is full ({reason}); free some space "
            "and run the command again."
        )
    return UserError(f"{flag} {_shown(Path(path))} cannot be written ({reason}).")


def is_environment_error(err: OSError) -> bool:
    """Whether ``err`` is the machine refusing (permissions, read-only, full, name too
    long), not a bug: the CLI turns those into one sentence."""
    return err.errno in _FULL + _REFUSED
