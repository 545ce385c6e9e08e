"""Moving spool events into DuckDB, and showing the not-yet-ingested tail to readers.

:func:`collect` reads every segment from the offset recorded in ``spool_progress`` to its
last complete line and sorts the events into rows per table. A writer applies them with
:func:`apply` (bulk Arrow inserts, the new offsets in the same transaction, so a crash
can neither lose nor duplicate rows) and then :func:`finalize_dead` cleans up after
producers that died. A reader instead installs them as temporary views that shadow the
tables (:func:`install_tail_views`), so a query sees every logged episode.
"""

from __future__ import annotations

import io
import json
import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from core.store.engine import ALIAS
from core.store.schema import ARROW_SCHEMAS, RUN_TABLES, SPOOL_ROW_TYPES, TABLES
from core.store.spool import RunSpool, list_spools, lock_held, read_complete

log = logging.getLogger(__name__)

_RUN_COLS = [c.name for c in TABLES["runs"]]


EVENT_SCHEMA = pa.schema(
    [
        ("t", pa.string()),
        *[(table, pa.list_(SPOOL_ROW_TYPES[table])) for table in RUN_TABLES],
        ("run", SPOOL_ROW_TYPES["runs"]),
        ("path", pa.string()),
        ("episode", pa.int64()),
        ("status", pa.string()),
        ("at", pa.int64()),
        ("message", pa.string()),
    ]
)
"""Every field any spool event has; Arrow's JSON reader fills absent ones with nulls."""

_CONTROL = [f.name for f in EVENT_SCHEMA if f.name not in RUN_TABLES]


@dataclass
class Pending:
    """Spool events not yet in the database, sorted by destination."""

    spools: dict[str, RunSpool]
    tables: dict[str, list[pa.Table]] = field(default_factory=lambda: defaultdict(list))
    new_runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    updates: dict[str, dict[str, Any]] = field(default_factory=lambda: defaultdict(dict))
    """Column changes for runs already in the database (checkpoint, end, last episode)."""
    offsets: dict[str, tuple[str, int]] = field(default_factory=dict)
    """Segment file name -> (run id, byte offset after its last complete line)."""

    @property
    def empty(self) -> bool:
        return not (self.new_runs or self.updates or self.tables)

    @property
    def live_runs(self) -> set[str]:
        return {rid for rid, s in self.spools.items() if s.alive}

    def table(self, name: str) -> pa.Table | None:
        """All pending rows of one table, in the store's Arrow schema."""
        parts = self.tables.get(name)
        return pa.concat_tables(parts) if parts else None


def progress(cur: duckdb.DuckDBPyConnection) -> dict[str, int]:
    return dict(cur.execute("SELECT file, byte_offset FROM spool_progress").fetchall())


def collect(spool_dir: Path, done: dict[str, int]) -> Pending:
    """Every complete spool event after the ingested offsets ``done``."""
    pending = Pending(list_spools(spool_dir))
    for rid, spool in pending.spools.items():
        for seg in spool.segments:
            start = done.get(seg.name, 0)
            data, end = read_complete(seg, start)
            if data:
                _add_events(pending, rid, parse_events(data, seg))
            if end != start:
                pending.offsets[seg.name] = (rid, end)
    # A run created in this batch gets its changes folded into the row it is inserted with.
    for rid, row in pending.new_runs.items():
        row.update(pending.updates.pop(rid, {}))
    return pending


def parse_events(data: bytes, path: Path) -> pa.Table:
    """Complete spool lines -> one row per event (C++ JSON parsing, no per-row Python)."""
    options = pj.ParseOptions(explicit_schema=EVENT_SCHEMA, unexpected_field_behavior="ignore")
    # 1 MiB blocks parse in parallel; a line longer than a block needs one big block.
    for block in (1 << 20, len(data) + 1):
        try:
            return pj.read_json(
                io.BytesIO(data),
                read_options=pj.ReadOptions(block_size=block),
                parse_options=options,
            )
        except pa.ArrowInvalid:
            if block > len(data):
                break
    # Slow path for what Arrow refuses: NaN values, or a torn line after a power loss.
    events = []
    for line in data.splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            log.warning("skipping a corrupt line in %s", path)
    return pa.Table.from_pylist(events, schema=EVENT_SCHEMA)


def _add_events(pending: Pending, rid: str, events: pa.Table) -> None:
    for table in RUN_TABLES:
        rows = pc.list_flatten(events.column(table))
        if len(rows):
            flat = pa.Table.from_batches(
                [pa.RecordBatch.from_struct_array(chunk) for chunk in rows.chunks if len(chunk)]
            )
            pending.tables[table].append(flat.cast(ARROW_SCHEMAS[table]))
    kinds = events.column("t")
    if pc.any(pc.equal(kinds, "ep")).as_py():
        last = pc.max(pc.list_flatten(events.column("episodes")).combine_chunks().field("episode"))
        upd = pending.updates[rid]
        upd["last_episode"] = max(upd.get("last_episode", -1), last.as_py())
    control = events.filter(pc.is_in(kinds, pa.array(["run", "ckpt", "end"])))
    for event in control.select(_CONTROL).to_pylist():
        if event["t"] == "run":
            pending.new_runs[rid] = event["run"]
        elif event["t"] == "ckpt":
            pending.updates[rid].update(
                checkpoint=event["path"], checkpoint_episode=event["episode"]
            )
        else:
            pending.updates[rid].update(
                status=event["status"], ended_at=event["at"], message=event["message"]
            )


def runs_table(rows: list[dict[str, Any]]) -> pa.Table:
    """Run rows (timestamps as epoch microseconds) -> Arrow in the store's schema."""
    return pa.Table.from_pylist(rows, schema=pa.schema(SPOOL_ROW_TYPES["runs"])).cast(
        ARROW_SCHEMAS["runs"]
    )


def insert_arrow(cur: duckdb.DuckDBPyConnection, table: str, data: pa.Table) -> None:
    """Bulk insert through Arrow registration (one statement per table)."""
    cur.register("_batch", data)
    try:
        cur.execute(f"INSERT INTO {ALIAS}.main.{table} SELECT * FROM _batch")
    finally:
        cur.unregister("_batch")


def apply(cur: duckdb.DuckDBPyConnection, pending: Pending) -> None:
    """Write the pending events and their offsets in one transaction."""
    if pending.empty and not pending.offsets:
        return
    cur.execute("BEGIN")
    if pending.new_runs:
        insert_arrow(cur, "runs", runs_table(list(pending.new_runs.values())))
    for table in RUN_TABLES:
        data = pending.table(table)
        if data is not None:
            insert_arrow(cur, table, data)
    for rid, upd in pending.updates.items():
        upd = dict(upd)
        last = upd.pop("last_episode", None)
        if upd:
            sets = ", ".join(f"{col} = ?" for col in upd)
            cur.execute(f"UPDATE runs SET {sets} WHERE id = ?", [*_sql_values(upd), rid])
        if last is not None:
            cur.execute(
                "UPDATE runs SET last_episode = greatest(coalesce(last_episode, -1), ?) "
                "WHERE id = ?",
                [last, rid],
            )
    if pending.offsets:
        values = ", ".join("(?, ?, ?)" for _ in pending.offsets)
        params = [v for name, (rid, off) in pending.offsets.items() for v in (name, rid, off)]
        cur.execute(f"INSERT OR REPLACE INTO spool_progress VALUES {values}", params)
    cur.execute("COMMIT")


def _sql_values(upd: dict[str, Any]) -> list[Any]:
    # Timestamps travel as epoch microseconds.
    return [
        _from_us(v) if col in ("ended_at", "started_at") and v is not None else v
        for col, v in upd.items()
    ]


def _from_us(us: int) -> Any:
    return pa.scalar(us, type=pa.timestamp("us")).as_py()


def finalize_dead(cur: duckdb.DuckDBPyConnection, pending: Pending, spool_dir: Path) -> list[str]:
    """Mark runs without a live producer interrupted and delete their ingested spools.

    Called after :func:`apply` committed, so everything a dead spool held is in the
    database before its files go. Returns the ids of the runs marked interrupted.
    """
    live = pending.live_runs
    running = [r[0] for r in cur.execute("SELECT id FROM runs WHERE status = 'running'").fetchall()]
    dead_running = [rid for rid in running if rid not in live]
    if dead_running:
        cur.execute(
            "UPDATE runs SET status = 'interrupted', ended_at = coalesce(ended_at, now()::TIMESTAMP) "
            "WHERE list_contains(?, id)",
            [dead_running],
        )
    for rid, spool in pending.spools.items():
        if spool.alive:
            continue
        for seg in spool.segments:
            seg.unlink(missing_ok=True)
        (spool_dir / f"{rid}.lock").unlink(missing_ok=True)
    # Offsets of files that are gone are garbage; keep only those of live producers.
    cur.execute("DELETE FROM spool_progress WHERE NOT list_contains(?, run_id)", [sorted(live)])
    return dead_running


def needs_recovery(spool_dir: Path) -> bool:
    """True if some spool's producer is gone (a free lock, or segments without a lock)."""
    return any(not s.alive for s in list_spools(spool_dir).values())


def clean_stale_lock_tmp(spool_dir: Path, max_age_s: float = 60.0) -> None:
    """Remove temporary lock files of producers that died while starting."""
    if not spool_dir.is_dir():
        return
    now = time.time()
    for p in spool_dir.glob("*.lock.*.tmp"):
        try:
            if now - p.stat().st_mtime > max_age_s and not lock_held(p):
                p.unlink(missing_ok=True)
        except FileNotFoundError:
            pass


def install_tail_views(cur: duckdb.DuckDBPyConnection, pending: Pending) -> None:
    """Shadow each table with a temp view = stored rows + spool tail (read-only sessions)."""
    for table in RUN_TABLES:
        data = pending.table(table)
        if data is not None:
            _tail_view(cur, table, data, "")
    run_rows = list(pending.new_runs.values())
    if pending.updates:
        stored = cur.execute(
            f"SELECT * FROM {ALIAS}.main.runs WHERE list_contains(?, id)", [list(pending.updates)]
        ).fetchall()
        for values in stored:
            row = dict(zip(_RUN_COLS, values, strict=True))
            for col in ("started_at", "ended_at"):
                if row[col] is not None:
                    row[col] = _to_us(row[col])
            for col, value in pending.updates[row["id"]].items():
                if col == "last_episode" and row[col] is not None:
                    value = max(value, row[col])
                row[col] = value
            run_rows.append(row)
    if run_rows:
        where = "WHERE id NOT IN (SELECT id FROM _tail_runs)"
        _tail_view(cur, "runs", runs_table(run_rows), where)


def _to_us(ts: Any) -> int:
    return pa.scalar(ts, type=pa.timestamp("us")).value


def _tail_view(cur: duckdb.DuckDBPyConnection, table: str, tail: pa.Table, where: str) -> None:
    cur.register(f"_tail_{table}", tail)
    cast = ", ".join(f"CAST({c.name} AS {c.sql}) AS {c.name}" for c in TABLES[table])
    cur.execute(
        f"CREATE OR REPLACE TEMP VIEW {table} AS "
        f"SELECT * FROM {ALIAS}.main.{table} {where} "
        f"UNION ALL SELECT {cast} FROM _tail_{table}"
    )
