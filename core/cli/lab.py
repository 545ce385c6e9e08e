"""``agentqmix lab``: check the database and the port, then become the lab's launcher."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from core.cli.app import app
from core.cli.flags import Db
from core.cli.output import console
from core.errors import UserError
from core.host import check_port_free


@app.command()
def lab(
    db: Db = None,
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port on 127.0.0.1.")] = 8501,
    open_browser: Annotated[
        bool, typer.Option("--open", help="Open a browser tab (only where there is a display).")
    ] = False,
) -> None:
    """Serve the Streamlit lab headless and print its URL (an empty database gets a demo)."""
    import os

    from core.store.engine import resolve_db

    root = Path(__file__).resolve().parents[2]
    if not (root / "app.py").is_file():
        raise UserError(f"the lab's app.py is missing from {root}; reinstall with pip install -e .")
    path = resolve_db(db)
    check_lab_database(path)
    check_port_free(port, "pass another --port.")
    argv = [sys.executable, "-m", "lab.launch", "--db", str(path), "--port", str(port)]
    sys.stdout.flush()
    sys.stderr.flush()
    # Become the launcher (same pid): a signal sent to `agentqmix lab` reaches the process
    # that owns the Streamlit server and stops it.
    os.chdir(root)
    os.execv(sys.executable, argv + (["--open"] if open_browser else []))


def check_lab_database(path: Path) -> None:
    """UserError unless ``path`` is a readable DuckDB file or a new file in a folder this user
    can write. A store this user can read but not write opens read-only (said in one line)."""
    import duckdb

    from core.store.engine import attached, check_file, write_problem

    problem = write_problem(path)
    if not check_file(path):
        if problem is not None:
            raise UserError(
                f"cannot create database {path}: {problem}; pass --db a path in a folder you "
                "can write."
            )
        return
    try:
        with attached(path, write=False, timeout=5.0) as cur:
            cur.execute("SELECT count(*) FROM duckdb_tables()").fetchone()
    except duckdb.Error as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UserError(f"{path} is not a readable DuckDB database ({first}).") from err
    if problem is not None:
        console.print(
            f"opening {path} read-only ({problem}): replay and compare work; training, forks "
            "and deleting runs are off.",
            soft_wrap=True, markup=False, highlight=False,
        )  # fmt: skip
