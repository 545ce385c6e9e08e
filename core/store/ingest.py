"""Moving spool events into DuckDB, and showing the not-yet-ingested tail to readers.

:func:`collect` reads every segment from the offset recorded in ``spool_progress`` to its
last complete line and stages the lines in the session: DuckDB itself parses the episode
and metrics lines (``json_transform_strict`` against a structure derived from
:data:`core.store.schema.TABLES`, into temp tables), so no row passes through Python; the
few control lines (run, checkpoint, end) are parsed in Python. A writer then applies the
batch with :func:`apply` (one ``INSERT ... SELECT unnest(...)`` per table and the new
offsets, in one transaction, so a crash can neither lose nor duplicate rows) and
:func:`finalize_dead` cleans up after producers that died. A reader instead installs
temporary views that shadow the tables (:func:`install_tail_views`), so a query sees
every logged episode.
"""

from __future__ import annotations

import bisect
import json
import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import orjson
import pyarrow as pa

from core.store.engine import ALIAS
from core.store.schema import (
    ARROW_SCHEMAS,
    EDGES_SQL,
    EPISODE_TABLES,
    RUN_TABLES,
    SPOOL_ROW_TYPES,
    TABLES,
    Column,
)
from core.store.spool import (
    METRIC_COLUMNS,
    SPOOL_COLUMNS,
    SPOOL_FORMAT,
    RunSpool,
    list_spools,
    lock_held,
    read_complete,
    segment_format,
    upgrade,
)

log = logging.getLogger(__name__)

_RUN_COLS = [c.name for c in TABLES["runs"]]
_EP_PREFIX = '{"t":"ep",'
_METRICS_PREFIX = '{"t":"metrics",'
# orjson writes keys in insertion order without spaces, so a line's kind is in its prefix.
_DATA_LINE = f"(starts_with(line, '{_EP_PREFIX}') OR starts_with(line, '{_METRICS_PREFIX}'))"
# Staging objects live in the session's temp catalog, which a read-only session may write.
_LINES = "_spool_lines"
_EPISODES = "_spool_episodes"
_METRICS = "_spool_metrics"
_BATCH_LINES = 512


def _spool_sql(c: Column) -> str:
    """The type of a column's value in a spool line."""
    if c.sql == "TIMESTAMP":
        return "BIGINT"  # epoch microseconds
    if c.sql == "JSON":
        return "VARCHAR"
    if c.sql == EDGES_SQL:
        return "INTEGER[][]"  # [src, dst] pairs
    return c.sql


def _from_spool(c: Column, value: str) -> str:
    """SQL turning a spool value into the column's value and type."""
    if c.sql == "TIMESTAMP":
        value = f"make_timestamp({value})"
    elif c.sql == EDGES_SQL:
        value = f"list_transform({value}, lambda e: {{'src': e[1], 'dst': e[2]}})"
    return f"CAST({value} AS {c.sql}) AS {c.name}"


def _structure(table: str, names: tuple[str, ...], suffix: str) -> dict[str, str]:
    cols = {c.name: c for c in TABLES[table]}
    return {name: _spool_sql(cols[name]) + suffix for name in names}


_EPISODE_STRUCTURE = json.dumps(
    {
        "episode": "INTEGER",
        "episodes": _structure("episodes", SPOOL_COLUMNS["episodes"], ""),
        **{t: _structure(t, SPOOL_COLUMNS[t], "[]") for t in EPISODE_TABLES if t != "episodes"},
        "prompts": _structure("prompts", SPOOL_COLUMNS["prompts"], "[]"),
    }
)
"""``json_transform_strict`` structure of an episode line (every key must be present)."""

_METRICS_STRUCTURE = json.dumps(
    {"train_metrics": [_structure("train_metrics", METRIC_COLUMNS, "")]}
)


def _tail_select(table: str) -> str:
    """``SELECT`` of the staged rows of ``table``, columns named, typed and ordered as stored."""
    cols = TABLES[table]
    if table == "train_metrics":
        exprs = ["run_id"] + [_from_spool(c, f"m.{c.name}") for c in cols[1:]]
        return f"SELECT {', '.join(exprs)} FROM temp.main.{_METRICS}"
    if table == "prompts":
        names = SPOOL_COLUMNS["prompts"]
        inner = ", ".join(f"unnest(e.prompts.{name}) AS {name}" for name in names)
        outer = ", ".join(_from_spool(c, c.name) for c in cols if c.name in names)
        return (
            f"SELECT {outer}, CAST(first_run_id AS VARCHAR) AS first_run_id FROM "
            f"(SELECT run_id AS first_run_id, {inner} FROM temp.main.{_EPISODES})"
        )
    key = "CAST(run_id AS VARCHAR) AS run_id, CAST(episode AS INTEGER) AS episode"
    values = [c for c in cols if c.name not in ("run_id", "episode")]
    if table == "episodes":
        inner = ", ".join(f"e.episodes.{c.name} AS {c.name}" for c in values)
    else:
        # Parallel unnests: the lists of one table in one line have the same length.
        inner = ", ".join(f"unnest(e.{table}.{c.name}) AS {c.name}" for c in values)
    outer = ", ".join(_from_spool(c, c.name) for c in values)
    return (
        f"SELECT {key}, {outer} FROM "
        f"(SELECT run_id, e.episode AS episode, {inner} FROM temp.main.{_EPISODES})"
    )


_TAIL_SELECT = {table: _tail_select(table) for table in (*RUN_TABLES, "prompts")}
_NEW_PROMPTS = (
    f"SELECT * FROM ({_TAIL_SELECT['prompts']}) t WHERE NOT EXISTS "
    f"(SELECT 1 FROM {ALIAS}.main.prompts p WHERE p.messages_hash = t.messages_hash) "
    "QUALIFY row_number() OVER (PARTITION BY messages_hash ORDER BY first_run_id) = 1"
)
"""Staged prompts the store does not hold yet, each once (several runs may log one prompt)."""


@dataclass
class Pending:
    """Spool events not yet in the database: staged rows and changes to run rows."""

    spools: dict[str, RunSpool]
    staged: set[str] = field(default_factory=set)
    """Tables with staged rows (selected by :func:`_tail_select`; ``prompts`` with episodes)."""
    new_runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    updates: dict[str, dict[str, Any]] = field(default_factory=lambda: defaultdict(dict))
    """Column changes for runs already in the database (checkpoint, end, last episode)."""
    offsets: dict[str, tuple[str, int]] = field(default_factory=dict)
    """Segment file name -> (run id, byte offset after its last complete line)."""

    @property
    def empty(self) -> bool:
        return not (self.new_runs or self.updates or self.staged)

    @property
    def live_runs(self) -> set[str]:
        return {rid for rid, s in self.spools.items() if s.alive}


def progress(cur: duckdb.DuckDBPyConnection) -> dict[str, int]:
    return dict(cur.execute("SELECT file, byte_offset FROM spool_progress").fetchall())


def collect(cur: duckdb.DuckDBPyConnection, spool_dir: Path, done: dict[str, int]) -> Pending:
    """Stage every complete spool event after the ingested offsets ``done`` in ``cur``."""
    pending = Pending(list_spools(spool_dir))
    chunks: list[tuple[str, Path, bytes]] = []
    for rid, spool in pending.spools.items():
        for seg in spool.segments:
            start = done.get(seg.name, 0)
            data, end = read_complete(seg, start)
            if data:
                fmt = segment_format(seg)
                chunks.append((rid, seg, upgrade(data, fmt) if fmt < SPOOL_FORMAT else data))
            if end != start:
                pending.offsets[seg.name] = (rid, end)
    if chunks:
        lines, sources = _lines_table(chunks)
        cur.register(_LINES, lines)
        try:
            _stage(cur, pending, sources)
        finally:
            cur.unregister(_LINES)
    # A run created in this batch gets its changes folded into the row it is inserted with.
    for rid, row in pending.new_runs.items():
        row.update(pending.updates.pop(rid, {}))
    return pending


@dataclass
class _Sources:
    """Which spool file each staged line came from (line ``i`` -> file), for warnings."""

    starts: list[int] = field(default_factory=list)
    """Index of the first line of each chunk."""
    files: list[Path] = field(default_factory=list)

    def skip(self, bad_lines: list[int]) -> None:
        """Warn (once per file and process) that these lines are skipped."""
        per_file: dict[Path, int] = defaultdict(int)
        for i in bad_lines:
            per_file[self.files[bisect.bisect_right(self.starts, i) - 1]] += 1
        for path, n in per_file.items():
            if str(path) not in _warned_files:
                _warned_files.add(str(path))
                log.warning(
                    "skipping %d malformed line(s) in spool file %s (not JSON, or not an "
                    "event this program writes)",
                    n,
                    path,
                )


_warned_files: set[str] = set()


def _lines_table(chunks: list[tuple[str, Path, bytes]]) -> tuple[pa.Table, _Sources]:
    """Complete lines as an Arrow string column, without copying or splitting in Python.

    Batches of :data:`_BATCH_LINES` lines, because DuckDB scans one Arrow batch per thread.
    """
    batches, first, sources = [], 0, _Sources()
    for rid, seg, data in chunks:
        sources.starts.append(first)
        sources.files.append(seg)
        ends = np.flatnonzero(np.frombuffer(data, np.uint8) == ord("\n"))
        offsets = np.concatenate(([0], ends + 1)).astype(np.int64)
        lines = pa.LargeStringArray.from_buffers(
            len(ends), pa.py_buffer(offsets), pa.py_buffer(data)
        )
        try:
            lines.validate(full=True)
        except pa.ArrowInvalid:  # not UTF-8: a line torn by a power loss
            text = [line.decode("utf-8", "replace") for line in data.split(b"\n")[:-1]]
            lines = pa.array(text, pa.large_string())
        for start in range(0, len(lines), _BATCH_LINES):
            part = lines.slice(start, _BATCH_LINES)
            batches.append(
                pa.record_batch(
                    [
                        pa.array(np.arange(first, first + len(part))),
                        pa.array([rid] * len(part), pa.string()),
                        part,
                    ],
                    names=["i", "run_id", "line"],
                )
            )
            first += len(part)
    return pa.Table.from_batches(batches), sources


def _stage(cur: duckdb.DuckDBPyConnection, pending: Pending, sources: _Sources) -> None:
    """Parse the registered lines: episode and metric rows into temp tables, control in Python.

    A line that is not JSON (torn by a power loss) or is JSON of another shape (written by
    hand, or by a different program) is skipped with a warning, never an error: a spool
    must not stop the store from opening.
    """
    bad = []
    try:
        _parse_lines(cur)
    except duckdb.Error:
        bad = _parse_lines_tolerant(cur)
    for rid, last in cur.execute(
        f"SELECT run_id, max(e.episode) FROM temp.main.{_EPISODES} GROUP BY run_id"
    ).fetchall():
        pending.staged.update((*EPISODE_TABLES, "prompts"))
        upd = pending.updates[rid]
        upd["last_episode"] = max(upd.get("last_episode", -1), last)
    if cur.execute(f"SELECT count(*) FROM temp.main.{_METRICS}").fetchone()[0]:
        pending.staged.add("train_metrics")
    control = cur.execute(
        f"SELECT i, run_id, line FROM {_LINES} WHERE NOT ({_DATA_LINE}) ORDER BY i"
    ).fetchall()
    for i, rid, line in control:
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError:
            event = None
        if not _add_control(pending, rid, event):
            bad.append(i)
    sources.skip(bad)


def _parse_lines(cur: duckdb.DuckDBPyConnection) -> None:
    """The fast path: every data line parses (any bad line fails the whole statement)."""
    cur.execute(
        f"CREATE OR REPLACE TEMP TABLE {_EPISODES} AS SELECT run_id, "
        f"json_transform_strict(line, '{_EPISODE_STRUCTURE}') AS e FROM {_LINES} "
        f"WHERE starts_with(line, '{_EP_PREFIX}')"
    )
    cur.execute(
        f"CREATE OR REPLACE TEMP TABLE {_METRICS} AS SELECT run_id, "
        f"unnest((json_transform_strict(line, '{_METRICS_STRUCTURE}')).train_metrics) AS m "
        f"FROM {_LINES} WHERE starts_with(line, '{_METRICS_PREFIX}')"
    )


def _parse_lines_tolerant(cur: duckdb.DuckDBPyConnection) -> list[int]:
    """Parse line by line (``try``), keep the good lines; returns the indices of the bad ones."""
    cur.execute(
        f"CREATE OR REPLACE TEMP TABLE {_EPISODES} AS SELECT i, run_id, "
        f"try(json_transform_strict(line, '{_EPISODE_STRUCTURE}')) AS e FROM {_LINES} "
        f"WHERE starts_with(line, '{_EP_PREFIX}')"
    )
    cur.execute(
        f"CREATE OR REPLACE TEMP TABLE {_METRICS} AS SELECT i, run_id, "
        f"try(json_transform_strict(line, '{_METRICS_STRUCTURE}')) AS p FROM {_LINES} "
        f"WHERE starts_with(line, '{_METRICS_PREFIX}')"
    )
    bad = cur.execute(
        f"SELECT i FROM temp.main.{_EPISODES} WHERE e IS NULL UNION ALL "
        f"SELECT i FROM temp.main.{_METRICS} WHERE p IS NULL"
    ).fetchall()
    cur.execute(f"DELETE FROM temp.main.{_EPISODES} WHERE e IS NULL")
    cur.execute(
        f"CREATE OR REPLACE TEMP TABLE {_METRICS} AS SELECT run_id, "
        f"unnest(p.train_metrics) AS m FROM temp.main.{_METRICS} WHERE p IS NOT NULL"
    )
    return [i for (i,) in bad]


def _add_control(pending: Pending, rid: str, event: Any) -> bool:
    """Apply a run/checkpoint/end event; False (ignored) if it is not one of the right shape."""
    kind = event.get("t") if isinstance(event, dict) else None
    if kind == "run":
        row = event.get("run")
        if not (isinstance(row, dict) and row.get("id") == rid and _valid_run_row(row)):
            return False
        pending.new_runs[rid] = row
    elif kind == "ckpt":
        path, episode = event.get("path"), event.get("episode")
        if not (isinstance(path, str) and _is_int(episode)):
            return False
        pending.updates[rid].update(checkpoint=path, checkpoint_episode=episode)
    elif kind == "end":
        status, at, message = event.get("status"), event.get("at"), event.get("message")
        if not (isinstance(status, str) and _is_int(at) and isinstance(message, str | None)):
            return False
        pending.updates[rid].update(status=status, ended_at=at, message=message)
    else:
        return False
    return True


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _valid_run_row(row: dict[str, Any]) -> bool:
    try:
        runs_table([row])
    except (pa.ArrowException, TypeError, ValueError):
        return False
    return True


def release(cur: duckdb.DuckDBPyConnection) -> None:
    """Drop the staged rows (after :func:`apply`; a read session keeps them for its views)."""
    cur.execute(f"DROP TABLE IF EXISTS temp.main.{_EPISODES}")
    cur.execute(f"DROP TABLE IF EXISTS temp.main.{_METRICS}")


def runs_table(rows: list[dict[str, Any]]) -> pa.Table:
    """Run rows (timestamps as epoch microseconds) -> Arrow in the store's schema."""
    return pa.Table.from_pylist(rows, schema=pa.schema(SPOOL_ROW_TYPES["runs"])).cast(
        ARROW_SCHEMAS["runs"]
    )


def insert_arrow(cur: duckdb.DuckDBPyConnection, table: str, data: pa.Table) -> None:
    """Bulk insert through Arrow registration (one statement)."""
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
        if table in pending.staged:
            cur.execute(f"INSERT INTO {ALIAS}.main.{table} {_TAIL_SELECT[table]}")
    if "prompts" in pending.staged:
        cur.execute(f"INSERT INTO {ALIAS}.main.prompts {_NEW_PROMPTS}")
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
        if table in pending.staged:
            cur.execute(
                f"CREATE OR REPLACE TEMP VIEW {table} AS SELECT * FROM {ALIAS}.main.{table} "
                f"UNION ALL {_TAIL_SELECT[table]}"
            )
    if "prompts" in pending.staged:
        cur.execute(
            f"CREATE OR REPLACE TEMP VIEW prompts AS SELECT * FROM {ALIAS}.main.prompts "
            f"UNION ALL {_NEW_PROMPTS}"
        )
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
        # A table, not the registered Arrow object: a locked-down session (``sql``) may not
        # scan Python objects.
        cast = ", ".join(f"CAST({c.name} AS {c.sql}) AS {c.name}" for c in TABLES["runs"])
        cur.register("_tail_runs_arrow", runs_table(run_rows))
        try:
            cur.execute(
                f"CREATE OR REPLACE TEMP TABLE _tail_runs AS SELECT {cast} FROM _tail_runs_arrow"
            )
        finally:
            cur.unregister("_tail_runs_arrow")
        cur.execute(
            f"CREATE OR REPLACE TEMP VIEW runs AS SELECT * FROM {ALIAS}.main.runs "
            "WHERE id NOT IN (SELECT id FROM temp.main._tail_runs) "
            "UNION ALL SELECT * FROM temp.main._tail_runs"
        )


def _to_us(ts: Any) -> int:
    return pa.scalar(ts, type=pa.timestamp("us")).value
