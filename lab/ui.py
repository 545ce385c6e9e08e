"""Small rendering helpers shared by the pages: friendly errors, charts, links, the demo's
progress and the sidebar status."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlencode

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from core.errors import UserError
from core.store.engine import StoreBusy
from lab import asked, data
from lab.demo import DemoStatus, demo_enabled, spawn_demo

PLOTLY_CONFIG = {"displaylogo": False, "modeBarButtonsToRemove": ["lasso2d"]}


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


def chart(
    fig: go.Figure | None,
    key: str,
    empty: str = "Nothing to draw.",
    on_select: str | Callable[[], None] = "ignore",
) -> Any:
    """Render a Plotly figure at full width (or an info line when there is none); with
    ``on_select``, returns the chart's selection state."""
    if fig is None:
        st.info(empty)
        return None
    if on_select == "ignore":
        return st.plotly_chart(fig, width="stretch", config=PLOTLY_CONFIG, key=key)
    return st.plotly_chart(
        fig,
        width="stretch",
        config=PLOTLY_CONFIG,
        key=key,
        on_select=on_select,
        selection_mode="points",
    )


def show_asked(a: asked.Asked) -> None:
    """One agent's call (tokens, latency, retries, cache, error) and what it was asked, role
    by role in scrollable text blocks, under an expander; or why it was asked nothing."""
    if a.call is not None:
        st.caption("call: " + asked.call_summary(a.call))
    if not a.messages:
        st.caption(a.note)
        return
    with st.expander("What it was asked", icon=":material/chat:"):
        st.caption(a.note)
        for m in a.messages:
            st.markdown(f"**{m.get('role', '?')}**")
            content = str(m.get("content", ""))
            st.code(content, language=None, wrap_lines=True, height=asked.code_height(content))


def require_runs(db: str) -> pd.DataFrame:
    """The runs table, or a friendly stop when the database has none yet."""
    with friendly():
        runs = data.runs(db)
    if runs.empty:
        status = data.demo_status(db)
        if status is not None and status.live:
            st.info(
                "The first-start demo is filling the database (progress in the sidebar); "
                "this page fills in as soon as it has logged its first run."
            )
        else:
            st.info(
                "The database is empty. Start a training run on the **Train** page, or run "
                "`agentqmix train --benchmark mixed --episodes 200 --out run.pt` in a terminal "
                "with the same `--db`.",
                icon=":material/inbox:",
            )
        st.stop()
    return runs


SANDBOX_LABELS = {
    "bwrap": "generated code ran in bubblewrap",
    "process": "generated code ran in the weaker process sandbox (chosen with --sandbox process)",
    "none": "no generated code ran",
}


def run_provenance(row: pd.Series) -> str:
    """``back-end sim · model sim/flash-lite · no generated code ran``: where a run's answers
    came from and where its generated code ran."""
    sandbox = row.get("sandbox")
    where = SANDBOX_LABELS.get(sandbox if isinstance(sandbox, str) else "", "sandbox not recorded")
    return f"back-end {row['backend']} · model {row['model']} · {where}"


def run_label(row: pd.Series) -> str:
    """``train-… · qmix · mixed · 200 ep`` — how a run is named in pickers; a Failure-lab
    fork says what it forked (``lab · fork of eval-… #3 · fixed · full · 1 coder crash…``),
    a sweep's run its sweep, weight and seed."""
    status = "" if row["status"] == "finished" else f" · {row['status']}"
    if isinstance(row.get("fork_label"), str):
        return f"lab · {row['fork_label']}{status}"
    sweep = row.get("sweep_id")
    if isinstance(sweep, str):
        w = row.get("sweep_token_weight")
        part = "fixed" if w is None or w != w else f"w={w:g} · seed {int(row['sweep_seed'])}"
        policy = data.policy_label(row["policy"]) if row["policy"] else row["kind"]
        return f"{row['id']} · {policy} · {sweep} · {part} · {row['episodes']} ep{status}"
    policy = data.policy_label(row["policy"]) if row["policy"] else row["kind"]
    return f"{row['id']} · {policy} · {row['benchmark']} · {row['episodes']} ep{status}"


# ---------------------------------------------------------------- links


class UrlState:
    """A page's view in its URL: read once per value a link brings, written on every run.

    ``seed`` (before a widget is drawn) puts a ``?param=`` value the session has not seen
    yet into the widget's state; ``write`` (after the widgets) puts the view back into the
    address bar, so copying it reopens this exact view. What was written counts as seen,
    so the page's own writes never re-seed a widget.
    """

    def __init__(self, page: str):
        self.seen: dict[str, str] = st.session_state.setdefault(f"_url_seen_{page}", {})

    def seed(
        self,
        key: str,
        param: str,
        parse: Callable[[str], Any] = str,
        choices: Sequence[Any] | None = None,
    ) -> bool:
        """Seed widget ``key`` from ``?param=``; True when it did (a new value from a link).

        A value that does not parse, or is not among ``choices``, is ignored with a warning.
        """
        raw = st.query_params.get(param)
        if raw is None or self.seen.get(param) == raw:
            return False
        self.seen[param] = raw
        try:
            value = parse(raw)
        except (ValueError, TypeError):
            st.warning(f"The link's {param}={raw!r} is not valid here; showing the default.")
            return False
        if choices is not None and value not in choices:
            st.warning(f"The link's {param}={raw!r} is not in this database; showing the default.")
            return False
        st.session_state[key] = value
        return True

    def write(self, **params: Any) -> None:
        """Put these values into the URL (``None``, ``""`` or ``[]`` removes the parameter)."""
        for name, value in params.items():
            if value is None or value == "" or (isinstance(value, list | tuple) and not value):
                if name in st.query_params:
                    del st.query_params[name]
                self.seen.pop(name, None)
                continue
            text = ",".join(map(str, value)) if isinstance(value, list | tuple) else str(value)
            if st.query_params.get(name) != text:
                st.query_params[name] = text
            self.seen[name] = text


def bool_param(raw: str) -> bool:
    if raw.lower() in ("1", "true", "yes", "on"):
        return True
    if raw.lower() in ("0", "false", "no", "off"):
        return False
    raise ValueError(raw)


def optional_bool_param(raw: str) -> bool | None:
    return None if raw.lower() in ("", "any") else bool_param(raw)


def replay_link(run_id: str, episode: int, round_index: int | None = None) -> str:
    """``/replay?run=…&episode=…`` (and ``&round=…``): opens that episode at that round."""
    params: dict[str, Any] = {"run": run_id, "episode": int(episode)}
    if round_index is not None:
        params["round"] = int(round_index)
    return "/replay?" + urlencode(params)


# ---------------------------------------------------------------- the first-start demo


@st.cache_resource(show_spinner=False)
def _demo_guard(db: str) -> dict[str, bool]:
    return {"checked": False}


def ensure_demo(db: str) -> None:
    """When the lab was started without ``agentqmix lab`` (plain ``streamlit run app.py``)
    on a database without runs, start the first-start demo — once per server, and never
    while another process (the launcher's demo) is running it."""
    guard = _demo_guard(db)
    if guard["checked"] or not demo_enabled():
        return
    guard["checked"] = True
    status = data.demo_status(db)
    if status is not None and status.live:
        return
    if data.runs(db).empty:
        spawn_demo(db, new_session=False)


def demo_progress(status: DemoStatus, compact: bool = False) -> None:
    """The demo's bar, what it is doing, and the steps done (no emoji: Material icons)."""
    text = status.phase + (f" · {status.detail}" if status.detail else "")
    st.progress(min(max(status.fraction, 0.0), 1.0), text=f"Demo {status.fraction:.0%}: {text}")
    if compact:
        return
    labels = ("train a QMIX team", "evaluate the learned policy", "learned vs fixed topologies")
    for k, label in enumerate(labels[: status.n_steps]):
        if k < status.step:
            st.markdown(f":material/check_circle: {label} — done")
        elif k == status.step:
            st.markdown(f":material/pending: {label} — running")
        else:
            st.markdown(f":material/radio_button_unchecked: {label}")


def sidebar_status(db: str) -> None:
    """Database path, the demo's progress and running jobs, refreshed every 2 s."""

    @st.fragment(run_every=2.0)
    def status() -> None:
        demo = data.demo_status(db)
        if demo is not None and demo.live:
            demo_progress(demo, compact=True)
        elif demo is not None and (demo.state == "failed" or demo.lost):
            st.error(f"The demo stopped: {(demo.error or 'its process ended').splitlines()[0]}")
        for job in data.jobs(db).running():
            st.caption(f":material/hourglass_top: {job.label}")

    with st.sidebar:
        st.caption(f"Database: `{db}`")
        status()
