"""Short-lived access to the DuckDB file: one in-memory engine per process, ATTACH per use.

DuckDB lets one process open a file read-write or many processes open it read-only,
never both, and it fails at once (it does not wait) on a conflicting lock. So nobody
keeps the file open: each use attaches it (read-only or read-write), does its work and
detaches, retrying a lock conflict with a bounded back-off. Creating a DuckDB instance
costs ~20 ms but ATTACH/DETACH on a live one costs < 1 ms, hence one in-memory engine
per process. All uses in a process are serialised by one lock: two engines (or two
attachments) of the same file in one process would both get the process-wide fcntl
lock and could corrupt it.

Errors that are not the caller's fault but the file's (a checksum mismatch, a truncated
file, a full disk) become one-sentence :class:`StoreDamaged` / :class:`StoreUnwritable`
errors that say how to recover (:func:`store_error`). User SQL runs on a private,
locked-down instance (:func:`lock_down`).
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import duckdb

from core.errors import StoreBusy, UserError
from core.paths import check_folder, check_not_special, name_problem

ALIAS = "store"
"""Catalog name of the attached store inside a session."""

DEFAULT_DB = "agentqmix.duckdb"
"""Default database file, relative to the working directory."""

ENV_VAR = "AGENTQMIX_DB"
"""Environment variable that overrides the default database path."""

_MAGIC = b"DUCK"


class StoreDamaged(UserError):
    """The database file is damaged (checksum mismatch, truncated); ``agentqmix repair`` helps."""


class StoreUnwritable(UserError):
    """The database file cannot be written (disk full, quota, I/O error)."""


class StoreReadOnly(StoreUnwritable):
    """This user may not write the database (file or folder read-only, read-only file
    system): readers open it read-only; writers refuse before any work."""


def _new_instance() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect(":memory:")
    # Never reach for the network to read a file someone passed us.
    con.execute("SET autoinstall_known_extensions = false")
    return con


class _Engine:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self._con: duckdb.DuckDBPyConnection | None = None

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        if self._con is None:
            self._con = _new_instance()
        return self._con


_engine = _Engine()


_forsaken: list[_Engine] = []
"""Engines a forked child inherited: never closed, never collected (see below)."""


def _reset_after_fork() -> None:
    # A forked child must not share the parent's DuckDB instance or lock state. Nor may it
    # destroy the instance: that joins DuckDB's threads, which do not exist in the child,
    # and crashed it (SIGSEGV) -- e.g. the child of a Popen with a preexec_fn, as Ray uses.
    global _engine
    _forsaken.append(_engine)
    _engine = _Engine()


os.register_at_fork(after_in_child=_reset_after_fork)


def resolve_db(db: str | os.PathLike[str] | None) -> Path:
    """``db`` if given, else ``$AGENTQMIX_DB``, else ``./agentqmix.duckdb``; absolute."""
    raw = db if db is not None else os.environ.get(ENV_VAR) or DEFAULT_DB
    path = Path(raw).expanduser().absolute()
    if problem := name_problem(path):  # before any stat(), which would raise OSError
        raise UserError(f"--db {path.name[:20]}…: {problem}.")
    return path


def sweep_status_dir(db: str | os.PathLike[str] | None) -> Path:
    """Where the sweeps logging into ``db`` say how far they are, one ``SWEEP_ID.json``
    each (``<db>.sweeps/``, beside the store like its spool): how a sweep started from the
    command line is seen live, before and while its trials reach the store."""
    return Path(f"{resolve_db(db)}.sweeps")


def is_duckdb_file(path: Path) -> bool:
    """Whether the file starts like a DuckDB database (it may still be damaged); UserError
    if this user may not read it."""
    try:
        with open(path, "rb") as f:
            head = f.read(12)
    except OSError as err:
        raise UserError(f"database {path} cannot be read ({err.strerror or err}).") from err
    return head[8:12] == _MAGIC


def check_store_paths(path: Path) -> None:
    """UserError if the database's path is a folder, or a device, pipe or socket stands where
    the file, its WAL or its spool folder go (DuckDB would open them; opening a pipe blocks
    for ever, and a rename over a device replaces the node)."""
    check_not_special(path, "--db")  # first: it says so when a name is too long
    if path.is_dir():
        raise UserError(f"{path} is a folder, not a DuckDB database file.")
    check_not_special(path.with_name(path.name + ".wal"), "--db's write-ahead log")
    check_folder(path.with_name(path.name + ".spool"), "--db's spool folder")


def check_file(path: Path) -> bool:
    """Whether the database exists; UserError if the path is not usable as one."""
    check_store_paths(path)
    if not path.exists():
        if not path.parent.is_dir():
            raise UserError(
                f"Cannot create a database at {path}: folder {path.parent} does not exist."
            )
        return False
    if not is_duckdb_file(path):
        raise UserError(f"{path} is not a DuckDB database.")
    return True


def write_problem(path: Path) -> str | None:
    """Why this user cannot write the store at ``path`` (part of a sentence), else None.

    Writing needs the file (if it exists) and its folder: DuckDB creates its write-ahead
    log ``<db>.wal`` beside the file, producers their ``<db>.spool/`` folder. Checked with
    the process's effective ids, before any work; reading needs none of this."""
    folder = path.parent
    if not folder.is_dir():
        return f"folder {folder} does not exist"
    try:
        if os.statvfs(folder).f_flag & os.ST_RDONLY:
            return "it is on a read-only file system"
    except OSError:
        pass
    spool = path.with_name(path.name + ".spool")
    for target, what in (
        (path, "the file"),
        (folder, f"its folder {folder}"),
        (spool, "its spool folder"),
    ):
        if target.exists() and not os.access(
            target, _WRITE[target.is_dir()], effective_ids=_EFFECTIVE
        ):
            return f"{what} is read-only for this user"
    return None


_EFFECTIVE = os.access in os.supports_effective_ids
_WRITE = {False: os.W_OK, True: os.W_OK | os.X_OK}


def check_writable(path: Path) -> None:
    """:class:`StoreReadOnly` if this user cannot write the store at ``path``."""
    if (problem := write_problem(path)) is None:
        return
    if not path.exists():
        raise StoreReadOnly(
            f"cannot create database {path}: {problem}; pass --db a path in a folder you can write."
        )
    raise StoreReadOnly(
        f"cannot write database {path}: {problem}; commands that only read it (runs, sql, "
        "export, the lab's replay and compare) still work, or pass --db a store you can write."
    )


def _is_lock_conflict(err: duckdb.Error) -> bool:
    """DuckDB's own lock errors: another process holds the file (fcntl), or this process has
    it open elsewhere. Matched on their exact wording: a damaged file's "... in block at
    location ..." must not look like a lock."""
    text = str(err)
    if isinstance(err, duckdb.IOException) and "Could not set lock on file" in text:
        return True
    return "Unique file handle conflict" in text


def damage(err: duckdb.Error) -> str | None:
    """What is wrong with the file if ``err`` is DuckDB finding it damaged, else None."""
    text = str(err)
    if "Corrupt database file" in text:
        return "checksum error"
    if isinstance(err, duckdb.IOException) and "Could not read enough bytes" in text:
        return "the file is truncated"
    return None


def store_error(path: Path, err: duckdb.Error) -> UserError | None:
    """The one-sentence error for a DuckDB error caused by the file itself, else None."""
    text = str(err)
    if (reason := damage(err)) is not None:
        return StoreDamaged(
            f"database {path} is damaged ({reason}); move it aside, or run "
            f"`agentqmix repair --db {path}` to rebuild it from what is readable and the spools."
        )
    for cause in ("No space left on device", "Disk quota exceeded", "Read-only file system"):
        if cause in text:
            return StoreUnwritable(
                f"cannot write database {path} ({cause}); free some space or fix the "
                "file system, then try again."
            )
    return None


_LOCK_DOWN = (
    # No COPY, read_*/glob, ATTACH, INSTALL/LOAD, IMPORT/EXPORT DATABASE, replacement scans.
    "SET enable_external_access = false",
    # The line above still allows the attached store's own paths (COPY ... TO the database
    # file would overwrite it); with the local file system off, the open file is still read.
    "SET disabled_filesystems = 'LocalFileSystem'",
    # Nothing above can be undone by the user's statement (SET, RESET, PRAGMA).
    "SET lock_configuration = true",
)


def lock_down(cur: duckdb.DuckDBPyConnection) -> None:
    """Let a private instance (``attached(..., private=True)``) touch no file, extension or
    setting from now on: what it needs (the store, staged spool rows) must be in place."""
    for statement in _LOCK_DOWN:
        cur.execute(statement)


@contextmanager
def attached(
    path: Path, *, write: bool, timeout: float, private: bool = False
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A cursor with the store attached as ``store`` (and ``USE``-d); detached on exit.

    Lock conflicts are retried with jittered exponential back-off for up to ``timeout``
    seconds (``0`` = one attempt), then :class:`StoreBusy`. A damaged or unwritable file
    raises :class:`StoreDamaged` / :class:`StoreUnwritable`, also from the ``with`` body.
    ``private=True`` uses a new DuckDB instance, closed on exit, so that :func:`lock_down`
    leaves the process's engine alone.
    """
    with _engine.lock:
        con = _new_instance() if private else _engine.con
        cur = con.cursor()
        try:
            attach_with_retry(cur, path, write=write, timeout=timeout)
            try:
                cur.execute(f"USE {ALIAS}")
                yield cur
            except BaseException:
                with suppress(duckdb.Error):
                    cur.execute("ROLLBACK")
                raise
            finally:
                if not private:
                    _detach(cur)
        except duckdb.Error as err:
            if (converted := store_error(path, err)) is not None:
                raise converted from err
            if "Permission denied" in str(err):  # the pre-flight checks raced a chmod
                kind, verb = (StoreReadOnly, "written") if write else (UserError, "read")
                raise kind(
                    f"database {path} cannot be {verb} by this user (Permission denied)."
                ) from err
            raise
        finally:
            cur.close()
            if private:
                con.close()


def _detach(cur: duckdb.DuckDBPyConnection) -> None:
    cur.execute("USE memory")
    try:
        cur.execute(f"DETACH {ALIAS}")
    except duckdb.Error:
        # DETACH checkpoints; if that fails (disk full) the catalog entry must still go,
        # or the engine could never attach a store again.
        with suppress(duckdb.Error):
            cur.execute(f"DETACH DATABASE IF EXISTS {ALIAS}")
        raise


def attach_with_retry(
    cur: duckdb.DuckDBPyConnection,
    path: Path,
    *,
    write: bool,
    timeout: float,
    alias: str = ALIAS,
) -> None:
    """ATTACH ``path`` as ``alias``, retrying lock conflicts (see :func:`attached`)."""
    mode = "" if write else ", READ_ONLY"
    sql = f"ATTACH '{_quote(str(path))}' AS {alias} (TYPE duckdb{mode})"
    deadline = time.monotonic() + timeout
    delay = 0.002
    while True:
        try:
            cur.execute(sql)
            return
        except duckdb.Error as err:
            if not _is_lock_conflict(err):
                if "not a valid DuckDB database" in str(err):
                    raise UserError(f"{path} is not a DuckDB database.") from err
                raise
            if time.monotonic() + delay > deadline:
                raise StoreBusy(
                    f"{path} stayed locked by another process for {timeout:.1f} s"
                ) from err
        time.sleep(delay * (0.5 + random.random()))
        delay = min(delay * 2, 0.1)


def _quote(s: str) -> str:
    return s.replace("'", "''")
