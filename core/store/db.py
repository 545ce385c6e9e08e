"""Read and write sessions on the store: the only way code in this package opens the file.

* A **write session** attaches the file read-write, creates or migrates the schema,
  ingests every spool (so any writer finishes the work of producers that died) and
  yields a cursor. Producers use one for a fraction of a second every ~second.
* A **read session** attaches the file read-only and shadows every table with the
  spool tail that is not ingested yet, so a reader sees all logged episodes even while
  a producer is between ingests. If it finds the leftovers of a dead producer it first
  runs a write session to recover them (ingest, mark the run interrupted).
* A **locked** read session (``read_session(..., locked=True)``, for ``agentqmix sql``)
  is a read session on a private DuckDB instance that, once the spool tail is staged,
  may touch no file, extension or setting (:func:`core.store.engine.lock_down`).

Both retry lock conflicts with back-off (see :mod:`core.store.engine`); neither keeps
the file attached after the ``with`` block.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import duckdb

from core.errors import UserError
from core.store.engine import (
    StoreBusy,
    StoreUnwritable,
    attached,
    check_file,
    check_writable,
    lock_down,
    resolve_db,
)
from core.store.ingest import (
    Pending,
    apply,
    clean_stale_lock_tmp,
    collect,
    finalize_dead,
    install_tail_views,
    needs_recovery,
    progress,
    release,
)
from core.store.schema import SCHEMA_VERSION, ensure_schema, stored_version
from core.store.spool import spool_dir_for

DEFAULT_TIMEOUT_S = 30.0
"""How long a session waits for a lock held by another process before StoreBusy."""


def ingest_all(cur: duckdb.DuckDBPyConnection, path: Path) -> Pending:
    """Ingest every spool next to ``path`` and clean up after dead producers."""
    spool_dir = spool_dir_for(path)
    pending = collect(cur, spool_dir, progress(cur))
    apply(cur, pending)
    release(cur)
    finalize_dead(cur, pending, spool_dir)
    clean_stale_lock_tmp(spool_dir)
    return pending


@contextmanager
def write_session(
    db: str | os.PathLike[str] | None = None, *, timeout: float = DEFAULT_TIMEOUT_S
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A read-write cursor on an up-to-date store (schema ensured, spools ingested)."""
    path = resolve_db(db)
    check_file(path)
    check_writable(path)
    with attached(path, write=True, timeout=timeout) as cur:
        ensure_schema(cur, str(path))
        ingest_all(cur, path)
        yield cur


def open_store(
    db: str | os.PathLike[str] | None = None, *, timeout: float = DEFAULT_TIMEOUT_S
) -> Path:
    """Create, migrate and recover the store at ``db``; returns its absolute path."""
    path = resolve_db(db)
    with write_session(path, timeout=timeout):
        pass
    return path


@contextmanager
def read_session(
    db: str | os.PathLike[str] | None = None,
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    create: bool = True,
    locked: bool = False,
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A read-only cursor whose tables include the not-yet-ingested spool tail.

    ``create=False`` turns a missing database into a UserError instead of creating it.
    ``locked=True`` runs on a private instance locked down before the cursor is yielded:
    for statements written by a user, which must not reach any file (not even the store's).
    """
    path = resolve_db(db)
    if not check_file(path):
        if not create:
            raise UserError(f"No episode store at {path}; run train/eval first or pass --db.")
        open_store(path, timeout=timeout)
    spool_dir = spool_dir_for(path)
    if needs_recovery(spool_dir):
        _try_recover(path, timeout)
    for attempt in range(2):
        with attached(path, write=False, timeout=timeout, private=locked) as cur:
            version = stored_version(cur, str(path))
            pending = collect(cur, spool_dir, progress(cur))
            if attempt == 0 and (version < SCHEMA_VERSION or _orphans(cur, pending)):
                stale = True
            else:
                install_tail_views(cur, pending)
                if locked:
                    lock_down(cur)
                yield cur
                return
        if stale:
            _try_recover(path, timeout)


def _orphans(cur: duckdb.DuckDBPyConnection, pending: Pending) -> bool:
    """Runs marked running whose producer is gone (or whose spool went missing)."""
    running = cur.execute("SELECT id FROM runs WHERE status = 'running'").fetchall()
    live = pending.live_runs
    return any(rid not in live for (rid,) in running) or any(
        not s.alive for s in pending.spools.values()
    )


def _try_recover(path: Path, timeout: float) -> None:
    # Recovery is a courtesy of readers; if writers keep the file busy, or its disk is
    # full, read what is there (the spools are read as a live run's are).
    with suppress(StoreBusy, StoreUnwritable), write_session(path, timeout=timeout):
        pass
