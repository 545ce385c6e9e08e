"""The store's CLI commands as functions that return data, plus a thin rich/JSON printer.

``core/cli.py`` wires them into typer: ``runs``, ``sql``, ``export``, ``delete-run``.
Each takes ``db`` (``None`` = ``$AGENTQMIX_DB`` or ``./agentqmix.duckdb``).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from datetime import date, datetime
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pyarrow.parquet as pq

from core.errors import UserError
from core.store.db import read_session, write_session
from core.store.engine import resolve_db
from core.store.queries import list_runs
from core.store.schema import RUN_TABLES
from core.store.spool import lock_held, segments, spool_dir_for

Db = str | os.PathLike[str] | None

_READ_ONLY_STATEMENTS = {"SELECT", "EXPLAIN", "PRAGMA", "SHOW"}


class Table:
    """A command's result: column names and rows of plain Python values."""

    def __init__(self, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        self.columns = list(columns)
        self.rows = [list(r) for r in rows]

    def records(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, r, strict=True)) for r in self.rows]

    def to_json(self) -> str:
        return json.dumps(self.records(), default=_json_value, indent=2)


def runs(db: Db = None) -> Table:
    """Runs with headline figures: episodes, accuracy, mean tokens, mean reward, status."""
    path = resolve_db(db)
    if not path.exists():
        raise UserError(f"No episode store at {path}; run train/eval first or pass --db.")
    df = list_runs(path)
    cols = ["id", "kind", "status", "policy", "benchmark", "backend", "episodes", "accuracy"]
    cols += ["mean_tokens", "mean_reward", "started_at", "checkpoint"]
    rows = [[_plain(v) for v in row] for row in df[cols].itertuples(index=False)]
    return Table(cols, rows)


def sql(query: str, db: Db = None) -> Table:
    """Run one read-only statement (SELECT, WITH ... SELECT, EXPLAIN, SHOW, PRAGMA)."""
    try:
        statements = duckdb.extract_statements(query)
    except duckdb.Error as err:
        raise UserError(f"Bad SQL: {_first_line(err)}") from err
    if len(statements) != 1:
        raise UserError(f"sql runs exactly one statement; got {len(statements)}.")
    kind = statements[0].type.name
    if kind not in _READ_ONLY_STATEMENTS:
        raise UserError(f"sql only reads; {kind} statements are not allowed.")
    with read_session(db, create=False) as cur:
        try:
            result = cur.execute(query)
            columns = [d[0] for d in result.description or []]
            rows = result.fetchall()
        except duckdb.Error as err:
            raise UserError(f"Bad SQL: {_first_line(err)}") from err
    return Table(columns, [[_plain(v) for v in row] for row in rows])


def export_run(run_id: str, out_dir: str | os.PathLike[str], db: Db = None) -> dict[str, int]:
    """Write the run's row and each of its tables as ``<table>.parquet`` in ``out_dir``.

    Returns the number of rows written per table.
    """
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise UserError(f"{out} exists and is not a folder.")
    counts = {}
    with read_session(db, create=False) as cur:
        if cur.execute("SELECT count(*) FROM runs WHERE id = ?", [run_id]).fetchall()[0][0] == 0:
            raise UserError(f"No run {run_id!r} in {resolve_db(db)}.")
        try:
            out.mkdir(parents=True, exist_ok=True)
            for table, key in (("runs", "id"), *((t, "run_id") for t in RUN_TABLES)):
                data = cur.sql(
                    f"SELECT * FROM {table} WHERE {key} = ?", params=[run_id]
                ).to_arrow_table()
                pq.write_table(data, out / f"{table}.parquet")
                counts[table] = data.num_rows
        except OSError as err:  # pyarrow's IO errors are OSErrors too
            reason = err.strerror or str(err).splitlines()[0]
            raise UserError(f"Cannot write Parquet files into {out} ({reason}).") from err
    return counts


def delete_run(run_id: str, db: Db = None) -> dict[str, int]:
    """Delete a run and all its rows; UserError if it does not exist or is still running."""
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
        cur.execute("DELETE FROM runs WHERE id = ?", [run_id])
        cur.execute("DELETE FROM spool_progress WHERE run_id = ?", [run_id])
        cur.execute("COMMIT")
        for _, seg in segments(spool_dir, run_id):
            seg.unlink(missing_ok=True)
    return counts


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
    """pandas / numpy scalars -> Python values; NaN/NaT -> None."""
    if v is None or v is pd.NaT:
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
