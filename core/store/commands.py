"""The store's CLI commands as functions that return data, plus a thin rich/JSON printer.

``core/cli/store.py`` wires them into typer: ``runs``, ``sql``, ``export``, ``delete-run``,
``repair``. Each takes ``db`` (``None`` = ``$AGENTQMIX_DB`` or ``./agentqmix.duckdb``).
"""

from __future__ import annotations

import json
import math
import os
import threading
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pyarrow.parquet as pq

from core.errors import UserError
from core.paths import check_folder, check_not_special, replace_file, temp_beside
from core.store.db import DEFAULT_TIMEOUT_S, open_store, read_session, write_session
from core.store.engine import (
    attach_with_retry,
    attached,
    check_store_paths,
    damage,
    is_duckdb_file,
    resolve_db,
    store_error,
)
from core.store.ingest import apply, collect, progress, release
from core.store.queries import list_runs
from core.store.schema import RUN_TABLES, SCHEMA_VERSION, ensure_schema
from core.store.spool import list_spools, lock_held, segments, spool_dir_for

Db = str | os.PathLike[str] | None

SQL_TIMEOUT_S = 60.0
"""How long ``sql`` lets a statement run (executing and fetching) before it stops it."""
SQL_MAX_ROWS = 1000
"""How many rows ``sql`` prints at most (0 = no cap)."""


class Table:
    """A command's result: column names and rows of plain Python values.

    ``cut_at``: set when the result had more rows; ``rows`` are its first ``cut_at``.
    """

    def __init__(
        self, columns: Sequence[str], rows: Sequence[Sequence[Any]], cut_at: int | None = None
    ) -> None:
        self.columns = list(columns)
        self.rows = [list(r) for r in rows]
        self.cut_at = cut_at

    def records(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, r, strict=True)) for r in self.rows]

    def to_json(self) -> str:
        return json.dumps(self.records(), default=_json_value, indent=2)


def runs(db: Db = None) -> Table:
    """Runs with headline figures: episodes (of ``planned``; ``incomplete`` when a run that
    stopped logged fewer), accuracy, mean tokens, mean reward, status, the reward's token
    weight and penalty and the idle rule (``config["team"]``), the sandbox its generated
    code ran in, and — for a run that had a budget — its logged spend against it."""
    path = resolve_db(db)
    if not path.exists():
        raise UserError(f"No episode store at {path}; run train/eval first or pass --db.")
    df = list_runs(path)
    cols = ["id", "kind", "status", "incomplete", "policy", "benchmark", "backend", "episodes"]
    cols += ["planned", "accuracy", "mean_tokens", "mean_reward", "token_weight"]
    cols += ["token_penalty", "idle", "sandbox", "started_at", "checkpoint"]
    rows = [[_plain(v) for v in row] for row in df[cols].itertuples(index=False)]
    spend = df[["budget_tokens", "budget_calls", "spent_tokens", "spent_calls"]]
    for row, caps in zip(rows, spend.itertuples(index=False), strict=True):
        row.append(spend_text(*(_plain(v) for v in caps)))
    return Table([*cols, "budget"], rows)


def spend_text(
    budget_tokens: int | None, budget_calls: int | None, tokens: int | None, calls: int | None
) -> str | None:
    """A run's logged spend against its budget, ``"9,882/12,000 tokens, 40/50 calls"``
    (None for a run without one)."""
    parts = []
    if budget_tokens is not None:
        parts.append(f"{int(tokens or 0):,}/{int(budget_tokens):,} tokens")
    if budget_calls is not None:
        parts.append(f"{int(calls or 0):,}/{int(budget_calls):,} calls")
    return ", ".join(parts) or None


def sql(
    query: str,
    db: Db = None,
    *,
    timeout: float = SQL_TIMEOUT_S,
    max_rows: int = SQL_MAX_ROWS,
) -> Table:
    """Run one statement a user wrote; it can read the store and nothing else.

    DuckDB enforces that, not a filter of ours: the store is attached read-only, the spool
    tail is staged beforehand, and then the session loses every file (even the store's own
    paths) and its settings are locked (:func:`core.store.engine.lock_down`). So COPY,
    IMPORT/EXPORT DATABASE, read_*() and glob(), ATTACH, INSTALL/LOAD and SET fail however
    they are wrapped (``EXPLAIN ANALYZE COPY ...``).

    The statement runs for ``timeout`` seconds at most (then a UserError) and Ctrl-C stops
    it (KeyboardInterrupt, raised once DuckDB has let go). It returns the first
    ``max_rows`` rows (0 = all), fetching one more to tell, in ``Table.cut_at``, that the
    result had more.
    """
    if not (math.isfinite(timeout) and timeout > 0):
        raise UserError(f"--timeout must be a finite number of seconds > 0, not {timeout:g}.")
    if max_rows < 0:
        raise UserError(f"--max-rows must be >= 0 (0 = no cap), not {max_rows}.")
    try:
        query.encode("utf-8")
    except UnicodeEncodeError as err:
        raise UserError("The SQL text is not valid UTF-8.") from err
    try:
        statements = duckdb.extract_statements(query)
    except duckdb.Error as err:
        raise UserError(f"Bad SQL: {_first_line(err)}") from err
    if len(statements) != 1:
        raise UserError(f"sql runs exactly one statement; got {len(statements)}.")
    path = resolve_db(db)
    with read_session(path, create=False, locked=True) as cur:
        try:
            columns, rows = _run_bounded(cur, statements[0], timeout, max_rows)
        except duckdb.Error as err:
            if (converted := store_error(path, err)) is not None:
                raise converted from err
            if isinstance(err, duckdb.PermissionException):
                raise UserError(
                    f"sql only reads the episode store, not files or extensions: {_first_line(err)}"
                ) from err
            raise UserError(f"Bad SQL: {_first_line(err)}") from err
    cut_at = max_rows if 0 < max_rows < len(rows) else None
    return Table(columns, [[_plain(v) for v in row] for row in rows[:cut_at]], cut_at)


def _run_bounded(
    cur: duckdb.DuckDBPyConnection, statement: Any, timeout: float, max_rows: int
) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Column names and the first ``max_rows`` + 1 rows (0: all) of ``statement``.

    It runs in a thread of its own: Python handles Ctrl-C in the main thread only between
    bytecodes, which never come while DuckDB executes, so the main thread waits instead
    and, on the timeout or Ctrl-C, stops the statement with DuckDB's own interrupt on
    this cursor. Results stream, so fetching the first rows does not run the rest.
    """
    outcome: dict[str, Any] = {}
    done = threading.Event()

    def work() -> None:
        try:
            result = cur.execute(statement)
            outcome["columns"] = [d[0] for d in result.description or []]
            rows = result.fetchall() if max_rows == 0 else result.fetchmany(max_rows + 1)
            outcome["rows"] = rows
        except BaseException as err:  # re-raised in the caller's thread
            outcome["error"] = err
        finally:
            done.set()

    # An Event, not Thread.join: before Python 3.13 a join that Ctrl-C interrupts marks
    # the thread as ended while it still runs.
    threading.Thread(target=work, name="agentqmix-sql", daemon=True).start()
    try:
        finished = done.wait(min(timeout, threading.TIMEOUT_MAX))
    except BaseException:  # Ctrl-C: the session must not close a cursor still in use
        _interrupt(cur, done)
        raise
    if not finished:
        _interrupt(cur, done)
        if isinstance(outcome.get("error"), duckdb.InterruptException):
            raise UserError(
                f"the query ran longer than {timeout:g} s and was stopped; "
                "raise --timeout or narrow it."
            )
    if "error" in outcome:
        raise outcome["error"]
    return outcome["columns"], outcome["rows"]


def _interrupt(cur: duckdb.DuckDBPyConnection, done: threading.Event) -> None:
    """Stop the statement running on ``cur`` and wait until DuckDB has let go of the
    cursor (the session closes it next); more Ctrl-Cs meanwhile change nothing."""
    cur.interrupt()
    while not done.is_set():
        with suppress(KeyboardInterrupt):
            done.wait()


_RUN_PROMPTS = "messages_hash IN (SELECT messages_hash FROM {calls} WHERE run_id = ?)"
"""Prompts a run's calls sent (``{calls}``: the ``llm_calls`` table to look in)."""


def export_run(run_id: str, out_dir: str | os.PathLike[str], db: Db = None) -> dict[str, int]:
    """Write the run's row, each of its tables and the prompts its calls sent as
    ``<table>.parquet`` in ``out_dir``.

    Returns the number of rows written per table.
    """
    out = check_folder(out_dir, "--parquet")
    wheres = {"runs": "id = ?", **{t: "run_id = ?" for t in RUN_TABLES}}
    wheres["prompts"] = _RUN_PROMPTS.format(calls="llm_calls")
    for table in wheres:
        check_not_special(out / f"{table}.parquet", "--parquet")
    counts = {}
    with read_session(db, create=False) as cur:
        if cur.execute("SELECT count(*) FROM runs WHERE id = ?", [run_id]).fetchall()[0][0] == 0:
            raise UserError(f"No run {run_id!r} in {resolve_db(db)}.")
        try:
            out.mkdir(parents=True, exist_ok=True)
            for table, where in wheres.items():
                data = cur.sql(
                    f"SELECT * FROM {table} WHERE {where}", params=[run_id]
                ).to_arrow_table()
                tmp = temp_beside(out / f"{table}.parquet")
                try:
                    pq.write_table(data, tmp)
                except BaseException:
                    tmp.unlink(missing_ok=True)
                    raise
                replace_file(tmp, out / f"{table}.parquet", "--parquet")
                counts[table] = data.num_rows
        except OSError as err:  # pyarrow's IO errors are OSErrors too
            reason = err.strerror or str(err).splitlines()[0]
            raise UserError(f"Cannot write Parquet files into {out} ({reason}).") from err
    return counts


def delete_run(run_id: str, db: Db = None) -> dict[str, int]:
    """Delete a run and all its rows; UserError if it does not exist or is still running.

    A prompt goes with it only when no call of another run sent it too (``prompts`` rows are
    shared); one it logged first that others still use names the earliest of those instead.
    """
    path = resolve_db(db)
    spool_dir = spool_dir_for(path)
    if not path.exists():
        raise UserError(f"No episode store at {path}.")
    with write_session(path) as cur:
        if cur.execute("SELECT count(*) FROM runs WHERE id = ?", [run_id]).fetchone()[0] == 0:
            raise UserError(f"No run {run_id!r} in {path}.")
        if lock_held(spool_dir / f"{run_id}.lock"):
            raise UserError(f"Run {run_id} is still running; stop it before deleting it.")
        counts = {}
        cur.execute("BEGIN")
        for table in RUN_TABLES:
            counts[table] = cur.execute(
                f"DELETE FROM {table} WHERE run_id = ?", [run_id]
            ).fetchone()[0]
        counts["prompts"] = cur.execute(
            "DELETE FROM prompts WHERE messages_hash NOT IN "
            "(SELECT messages_hash FROM llm_calls WHERE messages_hash IS NOT NULL)"
        ).fetchone()[0]
        cur.execute(
            "UPDATE prompts SET first_run_id = (SELECT min(c.run_id) FROM llm_calls c "
            "WHERE c.messages_hash = prompts.messages_hash) WHERE first_run_id = ?",
            [run_id],
        )
        cur.execute("DELETE FROM runs WHERE id = ?", [run_id])
        cur.execute("DELETE FROM spool_progress WHERE run_id = ?", [run_id])
        cur.execute("COMMIT")
        for _, seg in segments(spool_dir, run_id):
            seg.unlink(missing_ok=True)
    return counts


# ------------------------------------------------------------------ repair


@dataclass
class RepairReport:
    """What :func:`repair` did."""

    db: Path
    damaged: bool
    """False: the file read back whole and was left as it is."""
    problem: str | None = None
    """What was wrong with the file (``checksum error``, ``the file is truncated``...)."""
    moved_to: Path | None = None
    """Where the damaged file went (it is never deleted)."""
    runs: int = 0
    """Runs in the rebuilt database."""
    episodes: int = 0
    """Episodes in the rebuilt database."""
    from_file: int = 0
    """Runs copied whole from the damaged file."""
    from_spools: int = 0
    """Runs with events read back from spools."""
    tables: dict[str, TableSalvage] = field(default_factory=dict)
    """Per table of the damaged file: rows kept of rows it held, columns lost."""

    def summary(self) -> str:
        if not self.damaged:
            return f"{self.db} read back whole; no damage found, so it was left as it is."
        kept = ""
        if self.tables:
            shown = [t.summary(n) for n, t in self.tables.items() if t.total or t.problem]
            kept = "; kept from the damaged file, rows per table: " + ", ".join(shown)
        moved = f"; the damaged file is now {self.moved_to}, unchanged" if self.moved_to else ""
        return (
            f"Rebuilt {self.db} ({self.problem}): recovered {self.runs} runs and "
            f"{self.episodes} episodes ({self.from_file} runs from the damaged file, "
            f"{self.from_spools} from spools){kept}{moved}."
        )


def repair(db: Db = None) -> RepairReport:
    """Rebuild a damaged store from what it still reads back and the spools next to it.

    A new database gets every run of the old file that reads back whole (its rows of every
    table, copied run by run) and every spool event, then replaces the old file, which is
    moved to ``<db>.damaged-<timestamp>``, never deleted. A file that reads back whole is
    left alone. UserError while a producer is still logging to the store.
    """
    path = resolve_db(db)
    spool_dir = spool_dir_for(path)
    check_store_paths(path)
    spools = list_spools(spool_dir)
    live = sorted(rid for rid, s in spools.items() if s.alive)
    if live:
        raise UserError(f"Run {live[0]} is still logging to {path}; stop it before repairing.")
    exists = path.exists()
    if not exists and not spools:
        raise UserError(f"No episode store at {path} and no spools next to it to rebuild from.")
    if exists and not is_duckdb_file(path) and not spools:
        raise UserError(f"{path} is not a DuckDB database and there are no spools to rebuild from.")
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    tmp = path.with_name(f"{path.name}.repair-{stamp}.tmp")
    report = RepairReport(path, damaged=True)
    try:
        # A private instance: a damaged file must not take the process's engine down.
        with attached(tmp, write=True, timeout=0, private=True) as cur:
            ensure_schema(cur, str(tmp))
            if exists:
                _salvage(cur, path, report)
            else:
                report.problem = "the file was missing"
            pending = collect(cur, spool_dir, progress(cur))
            apply(cur, pending)
            release(cur)
            report.from_spools = len({rid for rid, _ in pending.offsets.values()})
            _add_lost_run_rows(cur)
            report.runs = cur.execute("SELECT count(*) FROM runs").fetchone()[0]
            report.episodes = cur.execute("SELECT count(*) FROM episodes").fetchone()[0]
    except BaseException:
        _remove_db(tmp)
        raise
    if not report.damaged:
        _remove_db(tmp)
        open_store(path)  # the usual recovery of dead producers' spools
        return report
    if exists:
        report.moved_to = path.with_name(f"{path.name}.damaged-{stamp}")
        os.replace(path, report.moved_to)
        wal = path.with_name(path.name + ".wal")
        if wal.exists():  # it belongs to the damaged file; it must not meet the new one
            os.replace(wal, report.moved_to.with_name(report.moved_to.name + ".wal"))
    os.replace(tmp, path)
    open_store(path)  # marks dead runs interrupted, removes the spools now ingested
    return report


def _salvage(cur: duckdb.DuckDBPyConnection, path: Path, report: RepairReport) -> None:
    """Copy what the damaged file still reads back, table by table, into the current
    database; :attr:`RepairReport.tables` says per table what was kept."""
    try:
        attach_with_retry(cur, path, write=False, timeout=DEFAULT_TIMEOUT_S, alias="damaged")
    except duckdb.Error as err:
        report.problem = damage(err) or _first_line(err)
        return
    try:
        try:
            tables = {
                r[0]
                for r in cur.execute(
                    "SELECT table_name FROM duckdb_tables() WHERE database_name = 'damaged'"
                ).fetchall()
            }
        except duckdb.Error as err:
            report.problem = damage(err) or _first_line(err)
            return
        if "meta" not in tables or "episodes" not in tables:
            raise UserError(f"{path} is a DuckDB database but not an Agent Q-Mix episode store.")
        try:
            version = cur.execute(
                "SELECT value FROM damaged.main.meta WHERE key = 'schema_version'"
            ).fetchone()
        except duckdb.Error:
            version = (str(SCHEMA_VERSION),)  # unreadable: the tables say what they hold
        if version is None or not 1 <= int(version[0]) <= SCHEMA_VERSION:
            raise UserError(
                f"{path} has store schema {version and version[0]}; this program repairs "
                f"schemas 1 to {SCHEMA_VERSION}."
            )
        for table in ("runs", *RUN_TABLES, "prompts", "spool_progress"):
            if table in tables:
                kept = _salvage_table(cur, table)
                report.tables[table] = kept
                if kept.problem:
                    report.problem = report.problem or kept.problem
        report.from_file = cur.execute("SELECT count(*) FROM runs").fetchone()[0]
        report.damaged = report.problem is not None
    finally:
        cur.execute("DETACH damaged")


@dataclass
class TableSalvage:
    """What repair kept of one table of the damaged file."""

    kept: int = 0
    """Rows copied into the rebuilt store."""
    total: int | None = None
    """Rows the table held (None: not even its row count reads back)."""
    lost_columns: list[str] = field(default_factory=list)
    """Columns whose values could not be read (kept rows have NULL there)."""
    problem: str | None = None
    """What DuckDB said of the damage, None if the table read back whole."""

    def summary(self, name: str) -> str:
        total = "?" if self.total is None else str(self.total)
        text = f"{name} {self.kept}/{total}"
        if self.lost_columns:
            text += f" (without {', '.join(self.lost_columns)})"
        return text


_IDENTITY = frozenset({"id", "run_id", "episode", "messages_hash", "file"})
"""Columns a salvaged row must keep (those of them its table has)."""
SALVAGE_ROWS = 2048
"""Row range repair tries at a time when a table does not read back whole (DuckDB's vector)."""


def _salvage_table(cur: duckdb.DuckDBPyConnection, table: str) -> TableSalvage:
    """Copy a table of the damaged file: whole if it reads back; else the columns that
    read back (the rest NULL, where the schema allows); else row range by row range."""
    out = TableSalvage()
    source = f"damaged.main.{table}"
    try:
        out.total = cur.execute(f"SELECT count(*) FROM {source}").fetchone()[0]
    except duckdb.Error as err:
        out.problem = damage(err) or _first_line(err)
    try:
        out.kept = cur.execute(f"INSERT INTO {table} BY NAME SELECT * FROM {source}").fetchone()[0]
        return out
    except duckdb.Error as err:
        out.problem = out.problem or damage(err) or _first_line(err)
    columns = [
        r[0]
        for r in cur.execute(
            "SELECT column_name FROM duckdb_columns() WHERE database_name = 'damaged' "
            "AND table_name = ? ORDER BY column_index",
            [table],
        ).fetchall()
    ]
    required = {
        r[0]
        for r in cur.execute(
            "SELECT column_name FROM duckdb_columns() WHERE database_name = current_database() "
            "AND table_name = ? AND NOT is_nullable",
            [table],
        ).fetchall()
    }
    # A row without what says whose it is (run, episode, key) is no row worth keeping.
    required = (required | _IDENTITY) & set(columns)
    readable = [c for c in columns if _reads_back(cur, f"SELECT sum(hash({c})) FROM {source}")]
    if readable and required <= set(readable):
        names = ", ".join(readable)
        out.kept = cur.execute(
            f"INSERT INTO {table} ({names}) SELECT {names} FROM {source}"
        ).fetchone()[0]
        out.lost_columns = [c for c in columns if c not in readable]
        return out
    if out.total is None:
        return out
    for lo in range(0, out.total, SALVAGE_ROWS):
        window = f"SELECT * FROM {source} WHERE rowid >= {lo} AND rowid < {lo + SALVAGE_ROWS}"
        try:
            out.kept += cur.execute(f"INSERT INTO {table} BY NAME {window}").fetchone()[0]
        except duckdb.Error:
            continue
    return out


def _reads_back(cur: duckdb.DuckDBPyConnection, sql: str) -> bool:
    try:
        cur.execute(sql).fetchall()
    except duckdb.Error:
        return False
    return True


def _add_lost_run_rows(cur: duckdb.DuckDBPyConnection) -> None:
    """Give episodes whose run row is gone (in an unreadable file, or in a spool segment
    already deleted) a run row, so that ``runs`` lists them."""
    cur.execute(
        "INSERT INTO runs (id, kind, status, started_at, message) "
        "SELECT run_id, CASE WHEN split_part(run_id, '-', 1) IN ('train', 'eval', 'compare', "
        "'lab') THEN split_part(run_id, '-', 1) END, 'interrupted', min(created_at), "
        "'recovered by agentqmix repair; the run row was lost' "
        "FROM episodes WHERE run_id NOT IN (SELECT id FROM runs) GROUP BY run_id"
    )


def _remove_db(path: Path) -> None:
    for p in (path, path.with_name(path.name + ".wal")):
        p.unlink(missing_ok=True)


# ------------------------------------------------------------------ printing


def print_table(
    table: Table, *, as_json: bool = False, title: str | None = None, width: int | None = None
) -> None:
    """Render a command's result with rich (or as JSON on stdout); ``width`` overrides the terminal's."""
    if as_json:
        print(table.to_json())
        return
    from rich.console import Console
    from rich.table import Table as RichTable

    out = RichTable(title=title)
    for i, col in enumerate(table.columns):
        # Ids must stay copy-pasteable (``--run ID``), so the first column never wraps.
        out.add_column(col, overflow="fold", no_wrap=i == 0)
    for row in table.rows:
        out.add_row(*(_cell(v) for v in row))
    Console(width=width).print(out)


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, datetime):
        return v.strftime("%Y-%m-%d %H:%M:%S")
    return str(v)


def _plain(v: Any) -> Any:
    """pandas / numpy scalars -> Python values; NaN/NaT/NA -> None."""
    if v is None or v is pd.NaT or v is pd.NA:
        return None
    if isinstance(v, pd.Timestamp):
        return v.to_pydatetime()
    if hasattr(v, "item") and not isinstance(v, list | dict | str):
        v = v.item()
    if isinstance(v, float) and math.isnan(v):
        return None
    return v


def _json_value(v: Any) -> Any:
    if isinstance(v, datetime | date):
        return v.isoformat()
    return str(v)


def _first_line(err: Exception) -> str:
    return str(err).strip().splitlines()[0]
