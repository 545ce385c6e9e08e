"""The episode store's commands: ``runs``, ``sql``, ``export``, ``delete-run``, ``repair``
(thin wrappers of :mod:`core.store.commands`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from core.cli.app import app
from core.cli.flags import Db, Json
from core.cli.output import console


@app.command()
def runs(db: Db = None, as_json: Json = False) -> None:
    """List runs with their headline figures (episodes, accuracy, tokens, reward, status)."""
    from core.store import commands

    commands.print_table(
        commands.runs(db), as_json=as_json, title="runs", width=None if sys.stdout.isatty() else 200
    )


@app.command()
def sql(
    query: Annotated[
        str, typer.Argument(help="One read-only statement, e.g. SELECT ... FROM episodes.")
    ],
    db: Db = None,
    as_json: Json = False,
    timeout: Annotated[
        float | None,
        typer.Option(
            help="Stop the statement after this many seconds of running and fetching it "
            "(default 60; Ctrl-C stops it too)."
        ),
    ] = None,
    max_rows: Annotated[
        int | None,
        typer.Option(
            help="Print at most this many rows, --json too (default 1000; 0 = no cap); "
            "stderr says when the result had more."
        ),
    ] = None,
) -> None:
    """Run read-only SQL against the episode store and print a table."""
    from core.store import commands

    # Unset flags take the defaults of commands.sql (SQL_TIMEOUT_S, SQL_MAX_ROWS), which
    # this module cannot import without loading DuckDB for every command.
    given = {"timeout": timeout, "max_rows": max_rows}
    try:
        table = commands.sql(query, db, **{k: v for k, v in given.items() if v is not None})
    except KeyboardInterrupt:
        console.print("interrupted: the query was stopped.", highlight=False)
        raise typer.Exit(130) from None
    commands.print_table(table, as_json=as_json, width=None if sys.stdout.isatty() else 200)
    if table.cut_at is not None:
        console.print(
            f"showing the first {table.cut_at} rows; the result has more: raise --max-rows "
            "(0 = no cap) or page with LIMIT/OFFSET.",
            highlight=False,
            soft_wrap=True,
        )


@app.command()
def export(
    run: Annotated[str, typer.Option(help="RUN_ID to export.")],
    parquet: Annotated[Path, typer.Option(help="Folder to write one Parquet file per table into.")],
    db: Db = None,
) -> None:
    """Write a run's tables as Parquet files."""
    from core.store import commands

    counts = commands.export_run(run, parquet, db)
    console.print(
        f"wrote {', '.join(f'{t} ({n} rows)' for t, n in counts.items())} to {parquet}",
        soft_wrap=True,
    )


@app.command("delete-run")
def delete_run(run: Annotated[str, typer.Option(help="RUN_ID to delete.")], db: Db = None) -> None:
    """Delete a run and every row it logged."""
    from core.store import commands

    counts = commands.delete_run(run, db)
    console.print(f"deleted run {run} ({sum(counts.values())} rows)")


@app.command()
def repair(db: Db = None) -> None:
    """Rebuild a damaged episode store from what it still reads back and the spools."""
    from core.store import commands

    console.print(commands.repair(db).summary(), soft_wrap=True, markup=False, highlight=False)
