"""RunLogger: how train / eval / compare / the lab log a run without ever blocking on DuckDB.

Every call appends one line to the run's spool (see :mod:`core.store.spool`) and
returns; about once a second (``ingest_every_s``) a background thread tries, without
waiting, to move the spool into the database. If another process holds the file, the
lines simply wait for the next try; readers see them meanwhile. ``close`` makes a final,
patient ingest and removes the spool. A SIGKILL loses at most the line being written.

Logging never stops training for the store's sake: if the database is damaged or its disk
is full, the lines stay in the spool (one warning) and go in once the store is usable; if
the spool's own disk is full, they wait in memory, in order, until it has room.

A RunLogger is used by one thread; by default a daemon thread of its own does the ingests.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import secrets
import socket
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, is_dataclass
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any

import duckdb

from core.errors import DiskFull, EndpointGone, UserError
from core.records import EpisodeRecord
from core.sanitize import scrub, secrets_in_environment
from core.store.db import DEFAULT_TIMEOUT_S, write_session
from core.store.engine import StoreBusy, resolve_db
from core.store.queries import last_episode_from
from core.store.schema import TABLES
from core.store.spool import (
    SpoolStalled,
    SpoolWriter,
    dumps,
    episode_event,
    lock_held,
    metrics_event,
    spool_dir_for,
)

log = logging.getLogger(__name__)

RUN_KINDS = ("train", "eval", "compare", "lab", "calibrate", "study")
END_STATUSES = ("finished", "interrupted", "failed")
METRIC_FIELDS = tuple(c.name for c in TABLES["train_metrics"] if c.name != "run_id")
"""Keys a metrics row may have: ``step, episode, loss, td_error, q_tot_mean, epsilon,
reward_ma, accuracy_ma, tokens_ma, grad_norm, wall_time`` (missing ones are NULL)."""

REDACTED = "***redacted***"
_SECRET_KEY = re.compile(
    r"(api[_-]?key|secret|passw(or)?d|authorization|access[_-]?token|auth[_-]?token|bearer)",
    re.IGNORECASE,
)


@dataclass
class LoggerConfig:
    """How a RunLogger moves its spool into the database."""

    ingest_every_s: float = 1.0
    """Seconds between ingest attempts while logging (readers see the spool meanwhile)."""
    fsync: bool = False
    """fsync every spool line: survives power loss, not just a killed process; slower."""
    segment_bytes: int = 16 * 1024 * 1024
    """Start a new spool segment (and delete the ingested one) past this size."""
    background: bool = True
    """Ingest in a background thread; False ingests inline from the logging calls."""
    close_timeout_s: float = DEFAULT_TIMEOUT_S
    """How long ``close`` waits for the database; after that the spool stays for the next opener."""

    def validate(self) -> None:
        if self.ingest_every_s < 0:
            raise ValueError(f"ingest_every_s must be >= 0, got {self.ingest_every_s}")
        if self.segment_bytes < 1024:
            raise ValueError(f"segment_bytes must be >= 1024, got {self.segment_bytes}")
        if self.close_timeout_s < 0:
            raise ValueError(f"close_timeout_s must be >= 0, got {self.close_timeout_s}")


def redact_config(config: Any) -> Any:
    """A JSON-ready copy of ``config`` with secrets replaced by ``***redacted***``.

    A value is secret if its key looks like one (``api_key``, ``secret``, ``password``,
    ``access_token``...), or if it equals the value of a secret-looking environment
    variable (``OPENAI_API_KEY``, ``*_TOKEN``...), or if it looks like an OpenAI key;
    inside other strings such values and URL credentials (``user:password@``) become ``***``.
    Dataclasses become dicts; anything not JSON-native becomes its ``str``.
    """
    return _redact(config, set(secrets_in_environment()))


def _redact(value: Any, env: set[str]) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        value = asdict(value)
    if isinstance(value, Mapping):
        return {
            str(k): REDACTED if _SECRET_KEY.search(str(k)) and value[k] else _redact(value[k], env)
            for k in value
        }
    if isinstance(value, list | tuple | set):
        return [_redact(v, env) for v in value]
    if isinstance(value, str):
        if value in env or re.fullmatch(r"sk-[A-Za-z0-9_\-]{16,}", value):
            return REDACTED
        # A secret inside a longer value: a key in a URL or option, ``user:password@``.
        return scrub(value, env)
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, Path):
        return str(value)
    return str(value)


def _now_us() -> int:
    return time.time_ns() // 1000


def _open_spool(spool_dir: Path, run_id: str, settings: LoggerConfig) -> SpoolWriter:
    try:
        return SpoolWriter(spool_dir, run_id, fsync=settings.fsync)
    except OSError as err:
        raise UserError(
            f"Cannot log run {run_id}: cannot create its spool in {spool_dir} "
            f"({err.strerror or err})."
        ) from err


def new_run_id(kind: str) -> str:
    """``kind-YYYYmmdd-HHMMSS-xxxx``: unique without asking the database, sortable by time."""
    return f"{kind}-{datetime.now():%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


class RunLogger:
    """Logs one run (its row, every episode, training metrics, checkpoints, its end)."""

    def __init__(
        self,
        db: str | os.PathLike[str] | None = None,
        kind: str = "train",
        config: Any = None,
        *,
        backend: str = "sim",
        model: str = "",
        policy: str = "",
        benchmark: str = "",
        seed: int = 0,
        settings: LoggerConfig | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        _resume: tuple[str, int] | None = None,
        _resume_spool: SpoolWriter | None = None,
    ) -> None:
        if kind not in RUN_KINDS:
            raise ValueError(f"kind must be one of {RUN_KINDS}, got {kind!r}")
        self.settings = settings or LoggerConfig()
        self.settings.validate()
        self.db = resolve_db(db)
        self._spool_dir = spool_dir_for(self.db)
        self.closed = False
        self._since_ingest = time.monotonic()
        self.kind = kind
        self.stalled = False
        """The spool's disk refused a write: the run stops (see :meth:`_write`)."""
        self._warned: set[str] = set()
        self._logged_prompts: set[str] = set()
        """Hashes of the prompts this logger's spool holds: each goes in once per run."""
        if _resume is not None:
            self.run_id, self.next_episode = _resume
            # The resume session already created the spool while holding the database.
            self._spool = _resume_spool
            self._start_ingester()
            return
        self.run_id = new_run_id(kind)
        self.next_episode = 0
        # Creating the store up front surfaces a bad --db (not a database, newer schema)
        # before any work is done.
        with write_session(self.db, timeout=timeout):
            self._spool = _open_spool(self._spool_dir, self.run_id, self.settings)
        row = {
            "id": self.run_id,
            "kind": kind,
            "config": json.dumps(redact_config(config)),
            "backend": backend,
            "model": model,
            "policy": policy,
            "benchmark": benchmark,
            "seed": seed,
            "status": "running",
            "started_at": _now_us(),
            "pid": os.getpid(),
            "host": socket.gethostname(),
        }
        try:
            self._write(dumps({"t": "run", "run": row}))
        except DiskFull as err:
            self._spool.close(remove=True)
            raise DiskFull(
                f"cannot start a run: no room for its log in {self._spool_dir} "
                f"({err.__cause__}); free some space and try again."
            ) from err
        self._start_ingester()

    @classmethod
    def resume(
        cls,
        db: str | os.PathLike[str] | None,
        run_id: str,
        *,
        settings: LoggerConfig | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
    ) -> RunLogger:
        """Continue ``run_id``: it is ``running`` again and logs after its last stored episode.

        Nothing is deleted: episodes logged after the checkpoint (by the run that died)
        stay, and the next logged episode is the one after the last stored one
        (:func:`core.store.queries.last_episode`), so an index is never used twice. A run
        with no checkpoint resumes too (its learner starts afresh). The run is ``running``
        again. UserError if the run does not exist or is still running.
        """
        path = resolve_db(db)
        settings = settings or LoggerConfig()
        spool_dir = spool_dir_for(path)
        with write_session(path, timeout=timeout) as cur:
            found = cur.execute("SELECT kind FROM runs WHERE id = ?", [run_id]).fetchone()
            if found is None:
                raise UserError(f"No run {run_id!r} in {path}.")
            if lock_held(spool_dir / f"{run_id}.lock"):
                raise UserError(f"Run {run_id} is still running in another process.")
            last = last_episode_from(cur, run_id)
            cur.execute("BEGIN")
            cur.execute(
                "UPDATE runs SET status = 'running', ended_at = NULL, message = NULL, pid = ?, "
                "host = ? WHERE id = ?",
                [os.getpid(), socket.gethostname(), run_id],
            )
            cur.execute("DELETE FROM spool_progress WHERE run_id = ?", [run_id])
            cur.execute("COMMIT")
            spool = _open_spool(spool_dir, run_id, settings)
        first = 0 if last is None else last + 1
        kind = found[0] if found[0] in RUN_KINDS else "train"
        return cls(path, kind, settings=settings, _resume=(run_id, first), _resume_spool=spool)

    # ------------------------------------------------------------------ logging

    def log_episode(self, record: EpisodeRecord, episode: int | None = None) -> int:
        """Append one finished episode; returns its index within the run."""
        return self.log_episodes([record], first=episode)[0]

    def log_episodes(self, records: Iterable[EpisodeRecord], first: int | None = None) -> list[int]:
        """Append several episodes with one write (indices ``first, first+1, ...``).

        :class:`DiskFull` if the spool's disk is full: the episodes before the one it could
        not take are logged, ``next_episode`` is the first that is not.
        """
        self._check_open()
        if first is not None:
            self.next_episode = first
        now = _now_us()
        lines, indices = [], []
        prompts = set(self._logged_prompts)
        for i, rec in enumerate(records, start=self.next_episode):
            lines.append(dumps(episode_event(i, rec, now, prompts)))
            indices.append(i)
        try:
            self._write(b"".join(lines))
        except DiskFull as full:
            # Whole lines only went in: count them. A prompt logged only with a line that
            # did not go in must be logged again with the next line that sends it.
            taken, done = full.kept, 0
            while done < len(lines) and taken >= len(lines[done]):
                taken -= len(lines[done])
                done += 1
            self.next_episode += done
            raise
        self._logged_prompts = prompts
        self.next_episode += len(indices)
        self._maybe_ingest()
        return indices

    def log_metrics(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Append training-metric rows (keys from :data:`METRIC_FIELDS`)."""
        self._check_open()
        out = []
        for row in rows:
            unknown = set(row) - set(METRIC_FIELDS)
            if unknown:
                raise ValueError(f"unknown metric fields {sorted(unknown)}; known: {METRIC_FIELDS}")
            out.append(row)
        if out:
            self._append(dumps(metrics_event(out)))

    def set_checkpoint(self, path: str | os.PathLike[str], episode: int) -> None:
        """Record that ``path`` holds the learner's state after episode ``episode``."""
        self._check_open()
        event = {"t": "ckpt", "path": str(Path(path).absolute()), "episode": int(episode)}
        self._append(dumps(event))

    def _append(self, data: bytes) -> None:
        self._write(data)
        self._maybe_ingest()

    def _write(self, data: bytes) -> None:
        """Append to the spool; :class:`DiskFull` (with ``kept``, the bytes of whole lines
        that did go in) if its disk is full. The run then stops: logging on in memory would
        lose everything after the disk filled up if the process then died."""
        try:
            self._spool.append(data)
        except SpoolStalled as err:
            self.stalled = True
            raise self._disk_full(err) from err

    def _disk_full(self, err: SpoolStalled) -> DiskFull:
        resume = {"train": "agentqmix train", "eval": "agentqmix eval"}.get(self.kind)
        then = (
            f"then continue it with `{resume} --resume {self.run_id}`"
            if resume
            else "then run it again"
        )
        full = DiskFull(
            f"run {self.run_id} stopped: cannot write its log in {self._spool_dir} ({err}); "
            f"its first {self.next_episode} episodes are kept; free some space, {then}."
        )
        full.kept = err.kept  # type: ignore[attr-defined]
        return full

    def _warn(self, key: str, message: str) -> None:
        """Warn once per kind of trouble (``spool``, ``store``) until it goes away."""
        if key not in self._warned:
            self._warned.add(key)
            log.warning("%s", message)

    def _recovered(self, key: str, message: str) -> None:
        if key in self._warned:
            self._warned.discard(key)
            log.warning("%s", message)

    def flush(self, timeout: float = 0.0) -> bool:
        """Ingest the spool now; False if the database stayed busy for ``timeout`` s."""
        self._check_open()
        done = self._ingest(timeout)
        if done is None:
            return False
        self._maybe_rotate(*done)
        return True

    def _ingest(self, timeout: float) -> tuple[str, int] | None:
        """One ingest of every spool; returns (current segment, its ingested offset)."""
        segment = self._spool.segment_path.name
        try:
            # A full write session (schema ensured): the file may have been moved aside
            # or replaced since the last try, and ATTACH creates an empty one.
            with write_session(self.db, timeout=timeout) as cur:
                row = cur.execute(
                    "SELECT byte_offset FROM spool_progress WHERE file = ?", [segment]
                ).fetchall()
        except StoreBusy:
            return None
        except (UserError, OSError, duckdb.IOException) as err:
            # Damaged, unwritable or replaced: the spool keeps every line for a later try
            # (or for the next process that opens a usable store, or `agentqmix repair`).
            self._warn(
                "store",
                f"run {self.run_id} keeps logging to its spool {self._spool_dir}, because: {err}",
            )
            return None
        finally:
            self._since_ingest = time.monotonic()
        self._recovered(
            "store", f"run {self.run_id}: the store {self.db} is usable again; spool ingested"
        )
        return segment, row[0][0] if row else 0

    def _maybe_rotate(self, segment: str, offset: int) -> None:
        # Only the logging thread rotates, and only a segment that is wholly in the db.
        size = self._spool.size()
        if (
            segment == self._spool.segment_path.name
            and offset == size
            and size >= self.settings.segment_bytes
        ):
            with contextlib.suppress(OSError):  # no room for a new segment: try again later
                self._spool.rotate().unlink(missing_ok=True)

    def _start_ingester(self) -> None:
        self._stop = threading.Event()
        self._ingested: tuple[str, int] | None = None
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        if self.settings.background:
            self._thread = threading.Thread(
                target=self._ingest_loop, name=f"ingest-{self.run_id}", daemon=True
            )
            self._thread.start()

    def _ingest_loop(self) -> None:
        # DuckDB parses and inserts without the GIL, so this mostly runs beside training.
        while not self._stop.wait(self.settings.ingest_every_s):
            try:
                self._ingested = self._ingest(timeout=0.0) or self._ingested
            except BaseException as err:  # handed to the logging thread, see _maybe_ingest
                self._error = err
                return

    def _stop_ingester(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def close(self, status: str = "finished", message: str | None = None) -> None:
        """End the run (``finished``, ``interrupted`` or ``failed``) and ingest everything."""
        if self.closed:
            return
        if status not in END_STATUSES:
            raise ValueError(f"status must be one of {END_STATUSES}, got {status!r}")
        self._stop_ingester()
        if self.stalled:
            status, message = "interrupted", message or "stopped: the disk is full"
        event = {"t": "end", "status": status, "at": _now_us(), "message": message}
        try:
            self._write(dumps(event))
        except DiskFull:
            # No room even for the end: the spool stays as it is (whole lines), and the
            # next command that opens the store ingests it and marks the run interrupted.
            self._spool.close(remove=False)
            self.closed = True
            return
        ingested = self.flush(timeout=self.settings.close_timeout_s)
        # After a successful final flush every line is in the database; otherwise the
        # spool stays and the next opener ingests it (the end event included).
        self._spool.close(remove=ingested)
        self.closed = True
        if not ingested and "store" in self._warned:
            log.warning(
                "run %s ended; its episodes wait in the spool %s until %s can be used",
                self.run_id,
                self._spool_dir,
                self.db,
            )

    def _maybe_ingest(self) -> None:
        if self._thread is not None:
            if self._error is not None:
                err, self._error = self._error, None
                raise RuntimeError(f"ingesting run {self.run_id} failed") from err
            if self._ingested is not None:
                done, self._ingested = self._ingested, None
                self._maybe_rotate(*done)
        elif time.monotonic() - self._since_ingest >= self.settings.ingest_every_s:
            self.flush(timeout=0.0)

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError(f"run {self.run_id} is closed")

    def __enter__(self) -> RunLogger:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close("finished")
        elif issubclass(exc_type, KeyboardInterrupt):
            self.close("interrupted", "stopped by the user")
        elif issubclass(exc_type, DiskFull):
            self.close("interrupted", "stopped: the disk is full")
        elif issubclass(exc_type, EndpointGone):
            self.close("interrupted", f"stopped: {exc}")
        else:
            self.close("failed", f"{exc_type.__name__}: {exc}")
