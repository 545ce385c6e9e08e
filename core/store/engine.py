"""Short-lived access to the DuckDB file: one in-memory engine per process, ATTACH per use.

DuckDB lets one process open a file read-write or many processes open it read-only,
never both, and it fails at once (it does not wait) on a conflicting lock. So nobody
keeps the file open: each use attaches it (read-only or read-write), does its work and
detaches, retrying a lock conflict with a bounded back-off. Creating a DuckDB instance
costs ~20 ms but ATTACH/DETACH on a live one costs < 1 ms, hence one in-memory engine
per process. All uses in a process are serialised by one lock: two engines (or two
attachments) of the same file in one process would both get the process-wide fcntl
lock and could corrupt it.
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

ALIAS = "store"
"""Catalog name of the attached store inside a session."""

DEFAULT_DB = "agentqmix.duckdb"
"""Default database file, relative to the working directory."""

ENV_VAR = "AGENTQMIX_DB"
"""Environment variable that overrides the default database path."""

_MAGIC = b"DUCK"


class _Engine:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self._con: duckdb.DuckDBPyConnection | None = None

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        if self._con is None:
            self._con = duckdb.connect(":memory:")
            # Never reach for the network to read a file someone passed us.
            self._con.execute("SET autoinstall_known_extensions = false")
        return self._con


_engine = _Engine()


_inherited: list[_Engine] = []


def _reset_after_fork() -> None:
    # A forked child must not share the parent's DuckDB instance or lock state, nor free
    # it: its threads stayed in the parent, and finalising it in the child segfaults (a
    # training run forks its episode collector while the store is open).
    global _engine
    _inherited.append(_engine)
    _engine = _Engine()


os.register_at_fork(after_in_child=_reset_after_fork)


def resolve_db(db: str | os.PathLike[str] | None) -> Path:
    """``db`` if given, else ``$AGENTQMIX_DB``, else ``./agentqmix.duckdb``; absolute."""
    raw = db if db is not None else os.environ.get(ENV_VAR) or DEFAULT_DB
    return Path(raw).expanduser().absolute()


def check_file(path: Path) -> bool:
    """Whether the database exists; UserError if the path is not usable as one."""
    if path.is_dir():
        raise UserError(f"{path} is a folder, not a DuckDB database file.")
    if not path.exists():
        if not path.parent.is_dir():
            raise UserError(
                f"Cannot create a database at {path}: folder {path.parent} does not exist."
            )
        return False
    with open(path, "rb") as f:
        head = f.read(12)
    if head[8:12] != _MAGIC:
        raise UserError(f"{path} is not a DuckDB database.")
    return True


def _is_lock_conflict(err: duckdb.Error) -> bool:
    text = str(err)
    return "lock" in text.lower() or "Unique file handle conflict" in text


@contextmanager
def attached(path: Path, *, write: bool, timeout: float) -> Iterator[duckdb.DuckDBPyConnection]:
    """A cursor with the store attached as ``store`` (and ``USE``-d); detached on exit.

    Lock conflicts are retried with jittered exponential back-off for up to ``timeout``
    seconds (``0`` = one attempt), then :class:`StoreBusy`.
    """
    with _engine.lock:
        cur = _engine.con.cursor()
        try:
            _attach_with_retry(cur, path, write=write, timeout=timeout)
            try:
                cur.execute(f"USE {ALIAS}")
                yield cur
            except BaseException:
                with suppress(duckdb.Error):
                    cur.execute("ROLLBACK")
                raise
            finally:
                cur.execute("USE memory")
                cur.execute(f"DETACH {ALIAS}")
        finally:
            cur.close()


def _attach_with_retry(
    cur: duckdb.DuckDBPyConnection, path: Path, *, write: bool, timeout: float
) -> None:
    mode = "" if write else ", READ_ONLY"
    sql = f"ATTACH '{_quote(str(path))}' AS {ALIAS} (TYPE duckdb{mode})"
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
