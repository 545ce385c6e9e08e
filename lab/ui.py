"""Small rendering helpers shared by the pages: friendly errors, pickers, the sidebar status."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from core.errors import UserError
from core.store.engine import StoreBusy
from lab import data
from lab.demo import demo_steps
from lab.jobs import CommandQueue

PLOTLY_CONFIG = {"displaylogo": False, "modeBarButtonsToRemove": ["lasso2d", "select2d"]}


@contextmanager
def friendly() -> Iterator[None]:
    """Turn a user mistake (bad database file) or a busy store into a message, not a traceback."""
    try:
        yield
    except UserError as err:
        st.error(str(err), icon=":material/error:")
        st.stop()
    except StoreBusy as err:
        st.warning(
            f"The database is busy right now ({err}). Reload in a moment.",
            icon=":material/hourglass_top:",
        )
        st.stop()


def chart(fig: go.Figure | None, key: str, empty: str = "Nothing to draw.") -> None:
    """Render a Plotly figure at full width, or an info line when there is none."""
    if fig is None:
        st.info(empty)
    else:
        st.plotly_chart(fig, width="stretch", config=PLOTLY_CONFIG, key=key)


def require_runs(db: str) -> pd.DataFrame:
    """The runs table, or a friendly stop when the database has none yet."""
    with friendly():
        runs = data.runs(db)
    if runs.empty:
        runner = data.demo_slot(db)["runner"]
        if runner is not None and not runner.finished:
            st.info("The first-start demo is filling the database — this page fills in a moment.")
        else:
            st.info(
                "The database is empty. Start a training run on the **Train** page, or run "
                "`agentqmix train --benchmark mixed --episodes 200 --out run.pt` in a terminal "
                "with the same `--db`.",
                icon=":material/inbox:",
            )
        st.stop()
    return runs


def run_label(row: pd.Series) -> str:
    """``train-… · qmix · mixed · 200 ep`` — how a run is named in pickers."""
    status = "" if row["status"] == "finished" else f" · {row['status']}"
    return f"{row['id']} · {row['policy'] or row['kind']} · {row['benchmark']} · {row['episodes']} ep{status}"


DEMO_ENV = "AGENTQMIX_LAB_DEMO"
"""Set to ``0`` to open an empty database without the first-start demo."""


def start_demo_if_empty(db: str) -> CommandQueue | None:
    """On a first start (no runs at all) start the demo, once per lab server; return it."""
    slot = data.demo_slot(db)
    if slot["runner"] is None and os.environ.get(DEMO_ENV, "1") != "0":
        with friendly():
            empty = data.runs(db).empty
        if empty:
            workdir = data.workdir(db)
            runner = CommandQueue(data.jobs(db), demo_steps(db, workdir)).start()
            slot["runner"] = runner
    return slot["runner"]


def sidebar_status(db: str) -> None:
    """Database path, the demo's progress and running jobs, refreshed every 2 s."""

    @st.fragment(run_every=2.0)
    def status() -> None:
        runner = data.demo_slot(db)["runner"]
        if runner is not None and not runner.finished:
            st.progress(runner.fraction, text=f"Demo: {runner.current or 'starting'}…")
        elif runner is not None and runner.error:
            st.error(f"The demo stopped: {runner.error.splitlines()[0]}")
        running = data.jobs(db).running()
        for job in running:
            st.caption(f":material/hourglass_top: {job.label}")

    with st.sidebar:
        st.caption(f"Database: `{db}`")
        status()
