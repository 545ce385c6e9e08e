"""Small rendering helpers shared by the pages: friendly errors, charts, links, the demo's
progress and the sidebar status."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlencode, urlsplit

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from core.errors import UserError
from core.store.engine import StoreBusy
from core.team.options import TeamOptions
from lab import asked, data, figures, params
from lab.demo import DemoStatus, cancel_demo, demo_enabled, spawn_demo

PLOTLY_CONFIG = {
    "displaylogo": False,
    "modeBarButtonsToRemove": ["lasso2d"],
    # The toolbar's camera saves the chart as it is shown, at twice the pixels (slides).
    "toImageButtonOptions": {"format": "png", "scale": 2},
}
CHART_FORMATS = {"PNG": "png", "SVG": "svg"}
"""What the toolbar's camera saves, chosen in the sidebar (``chart_format``): a picture for
slides, or vector graphics for a paper."""


def plotly_config() -> dict[str, Any]:
    """:data:`PLOTLY_CONFIG` with the camera saving in the format picked in the sidebar."""
    fmt = CHART_FORMATS.get(st.session_state.get("chart_format") or "PNG", "png")
    return {**PLOTLY_CONFIG, "toImageButtonOptions": {"format": fmt, "scale": 2}}


_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>$~=:&])")


def markdown_literal(text: str) -> str:
    """``text`` as Markdown that renders to exactly ``text``: what a model wrote is shown as
    written, never as headings, emphasis, links, HTML or LaTeX (``$5 and $6``), with its
    line breaks and indents kept (leading spaces become ``&nbsp;``, which Markdown does not
    strip; a literal ``&`` is escaped, so ``&amp;`` stays ``&amp;``)."""
    lines = []
    for line in text.expandtabs(4).splitlines():
        body = line.lstrip(" ")
        lines.append("&nbsp;" * (len(line) - len(body)) + _MARKDOWN_SPECIAL.sub(r"\\\1", body))
    # A hard break ("  " at a line's end) between two written lines; a blank line stays
    # empty (Streamlit dedents what it is given, which empties whitespace-only lines).
    out = lines[:1]
    for before, line in zip(lines, lines[1:], strict=False):
        out.append(("  \n" if before and line else "\n") + line)
    return "".join(out)


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


def read_only_notice(db: str, what: str) -> bool:
    """If the lab cannot write ``db``, say that ``what`` (this page's writing part) is off
    and what still works; True then (the page hides or disables that part)."""
    reason = data.read_only(db)
    if reason is None:
        return False
    st.info(
        f"This database is open read-only ({reason}): {what} needs a database this lab can "
        "write. Replay, Compare, Run diff and CTDE work; to write, copy the file somewhere "
        "you can write and start `agentqmix lab --db COPY`.",
        icon=":material/lock:",
    )
    return True


def chart(
    fig: go.Figure | None,
    key: str,
    empty: str = "Nothing to draw.",
    on_select: str | Callable[[], None] = "ignore",
) -> Any:
    """Render a Plotly figure at full width (or an info line when there is none) with a
    button under it that downloads the data behind it as CSV (the toolbar's camera saves the
    picture, PNG or SVG as picked in the sidebar); with ``on_select``, returns the chart's
    selection state."""
    if fig is None:
        st.info(empty)
        return None
    extra = {} if on_select == "ignore" else dict(on_select=on_select, selection_mode="points")
    state = st.plotly_chart(fig, width="stretch", config=plotly_config(), key=key, **extra)
    st.download_button(
        "Data (CSV)",
        figures.figure_table(fig).to_csv(index=False),
        file_name=f"{key}.csv",
        mime="text/csv",
        icon=":material/download:",
        key=f"{key}_csv",
        on_click="ignore",
        type="tertiary",
    )
    return state


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
    came from and where its generated code ran; a run that had a budget adds what its
    logged episodes spent of it (``· spent 9,882/12,000 tokens of its budget``)."""
    sandbox = row.get("sandbox")
    where = SANDBOX_LABELS.get(sandbox if isinstance(sandbox, str) else "", "sandbox not recorded")
    budget = row.get("budget")
    spent = f" · spent {budget} of its budget" if isinstance(budget, str) else ""
    return f"back-end {row['backend']} · model {row['model']} · {where}{spent}"


def run_label(row: pd.Series) -> str:
    """``train-… · qmix · mixed · 200 ep`` — how a run is named in pickers (a real model's
    run also names its back-end and model: ``eval-… · star · gsm8k · local · SmolLM2… · 3 ep``); a Failure-lab
    fork says what it forked (``lab · fork of eval-… #3 · fixed · full · 1 coder crash…``),
    a sweep's run its sweep, weight and seed (and its decision rule under the consensus
    pass-through)."""
    status = "" if row["status"] == "finished" else f" · {row['status']}"
    if isinstance(row.get("fork_label"), str):
        return f"lab · {row['fork_label']}{status}"
    sweep = row.get("sweep_id")
    if isinstance(sweep, str):
        w = row.get("sweep_token_weight")
        part = "fixed" if w is None or w != w else f"w={w:g} · seed {int(row['sweep_seed'])}"
        rule = row.get("sweep_pass_through")
        if isinstance(rule, str) and rule != TeamOptions.pass_through:
            part += f" · pass-through {rule}"
        policy = data.policy_label(row["policy"]) if row["policy"] else row["kind"]
        return f"{row['id']} · {policy} · {sweep} · {part} · {row['episodes']} ep{status}"
    policy = data.policy_label(row["policy"]) if row["policy"] else row["kind"]
    real = row.get("backend") not in (None, "", "sim")
    engine = f" · {data.engine_label(row['backend'], row.get('model'))}" if real else ""
    return f"{row['id']} · {policy} · {row['benchmark']}{engine} · {row['episodes']} ep{status}"


# ---------------------------------------------------------------- links


class UrlState:
    """A page's view in its URL: read once per value a link brings, written on every run.

    ``seed`` (before a widget is drawn) puts a ``?param=`` value the session has not seen
    yet into the widget's state; ``write`` (after the widgets) puts the view back into the
    address bar, so copying it reopens this exact view. What was written counts as seen,
    so the page's own writes never re-seed a widget. A value that does not parse (see
    :mod:`lab.params`) is never clamped or dropped in silence: the page shows its default
    and a warning names the parameter and the reason.
    """

    def __init__(self, page: str):
        self.page = page
        self.seen: dict[str, str] = st.session_state.setdefault(f"_url_seen_{page}", {})
        for name in list(st.query_params):
            if name not in params.PAGE_PARAMS[page] and (raw := self.new(name)) is not None:
                self.refuse(name, raw, "is not a parameter of this page", "the page without it")
                del st.query_params[name]

    def new(self, param: str) -> str | None:
        """The link's raw ``?param=`` value if this session has not seen it yet, else None
        (it is then marked seen)."""
        raw = st.query_params.get(param)
        if raw is None or self.seen.get(param) == raw:
            return None
        self.seen[param] = raw
        return raw

    def seed(self, key: str, param: str, parse: params.Parse = params.text) -> bool:
        """Seed widget ``key`` from ``?param=``; True when it did (a new, valid value)."""
        raw = self.new(param)
        if raw is None:
            return False
        try:
            value = parse(raw)
        except params.BadParam as err:
            self.refuse(param, raw, str(err))
            return False
        st.session_state[key] = value
        return True

    def seed_run(
        self, key: str, param: str, labels: dict[str, str], raw: str | None = None
    ) -> bool:
        """:meth:`seed` for a run picker: a run the database does not have is named, and
        the runs it does have are offered as links (this page, that run). ``raw``: the
        link's value when the page has read it already (:meth:`new`)."""
        raw = raw if raw is not None else self.new(param)
        if raw is None:
            return False
        if raw.strip() in labels:
            st.session_state[key] = raw.strip()
            return True
        st.warning(
            f"The link's `{param}={params.shown(raw)}` names a run that does not exist in "
            "this database (deleted, or a link from another database); showing the page's "
            "default run instead. The runs it has:",
            icon=":material/link_off:",
        )
        listed = list(labels.items())[:RUNS_OFFERED]
        more = len(labels) - len(listed)
        st.markdown(
            "\n".join(
                f"- [{label}](/{self.page}?{urlencode({param: rid})})" for rid, label in listed
            )
            + (f"\n- … and {more:,} more in the picker below" if more > 0 else "")
        )
        return False

    def refuse(self, param: str, raw: str, reason: str, instead: str = "the default") -> None:
        """Say that the link's ``param=raw`` is not used, and why."""
        st.warning(
            f"The link's `{param}={params.shown(raw)}` {reason}; showing {instead}.",
            icon=":material/link_off:",
        )

    def write(self, **values: Any) -> None:
        """Put these values into the URL (``None``, ``""`` or ``[]`` removes the parameter)."""
        for name, value in values.items():
            if value is None or value == "" or (isinstance(value, list | tuple) and not value):
                if name in st.query_params:
                    del st.query_params[name]
                self.seen.pop(name, None)
                continue
            text = ",".join(map(str, value)) if isinstance(value, list | tuple) else str(value)
            if st.query_params.get(name) != text:
                st.query_params[name] = text
            self.seen[name] = text


RUNS_OFFERED = 8
"""Runs listed as links under a warning about a link's missing run."""


def unknown_page_notice(pages: list[Any], page: Any) -> None:
    """Say so when the address names no page of the lab (``/doesnotexist``): Streamlit then
    runs the default page, and it used to do that without a word."""
    path = urlsplit(st.context.url or "").path.strip("/").rsplit("/", 1)[-1]
    if page.url_path == "" and path and path not in {p.url_path for p in pages}:
        st.warning(
            f"There is no page `/{params.shown(path)}` in this lab; showing the Overview.",
            icon=":material/link_off:",
        )


def step_round(prefix: str, delta: int, n_rounds: int) -> None:
    """Move ``st.session_state[f"{prefix}_round"]`` by ``delta``, within 1..``n_rounds``."""
    key = f"{prefix}_round"
    st.session_state[key] = min(max(st.session_state[key] + delta, 1), n_rounds)


def round_stepper(prefix: str, n_rounds: int, label: str, sides: str = "") -> int:
    """Back / next buttons and a slider over rounds 1..``n_rounds`` that all drive
    ``st.session_state[f"{prefix}_round"]`` (keys ``{prefix}_prev`` / ``_next`` / ``_round``);
    ``sides`` ends the buttons' help (", on both sides"). The buttons take the width their
    labels need (fixed columns cut them to "‹ s…"). Returns the round shown (from 1)."""
    steps, slider = st.columns([1, 3])
    now = st.session_state[f"{prefix}_round"]
    with steps.container(horizontal=True):
        st.button("back", key=f"{prefix}_prev", on_click=step_round, args=(prefix, -1, n_rounds),
                  disabled=now <= 1, icon=":material/chevron_left:",
                  help=f"The previous round{sides}.")  # fmt: skip
        st.button("next", key=f"{prefix}_next", on_click=step_round, args=(prefix, 1, n_rounds),
                  disabled=now >= n_rounds, icon=":material/chevron_right:",
                  icon_position="right", help=f"The next round{sides}.")  # fmt: skip
    if n_rounds > 1:
        slider.slider(label, 1, n_rounds, key=f"{prefix}_round")
    return st.session_state[f"{prefix}_round"]


def replay_link(run_id: str, episode: int, round_index: int | None = None) -> str:
    """``/replay?run=…&episode=…`` (and ``&round=…``): opens that episode at that round.

    ``round_index`` counts from 0 as the store does; the link, read by people, from 1."""
    query: dict[str, Any] = {"run": run_id, "episode": int(episode)}
    if round_index is not None:
        query["round"] = int(round_index) + 1
    return "/replay?" + urlencode(query)


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
    if data.read_only(db) is not None:
        return  # the demo writes runs: a read-only store shows what it holds
    status = data.demo_status(db)
    if status is not None and (status.live or status.cancelled):
        return  # running, or the user stopped it: never start it behind their back
    if data.runs(db).empty:
        spawn_demo(db, new_session=False)


def restart_demo(db: str) -> None:
    """Start the demo again after the user cancelled it (a new status: not cancelled)."""
    spawn_demo(db, new_session=False)
    data.clear()


def demo_progress(status: DemoStatus, db: str, compact: bool = False) -> None:
    """The demo's bar, what it is doing, a button that cancels it, and the steps done (no
    emoji: Material icons)."""
    text = status.phase + (f" · {status.detail}" if status.detail else "")
    st.progress(min(max(status.fraction, 0.0), 1.0), text=f"Demo {status.fraction:.0%}: {text}")
    if st.button(
        "Cancel the demo", key="sidebar_demo_cancel" if compact else "home_demo_cancel",
        icon=":material/cancel:", type="tertiary",
        help="Stops it now; what it logged so far stays. The Overview page can start it again.",
    ):  # fmt: skip
        with st.spinner("Stopping the demo…"):
            cancel_demo(db)
        data.clear()
        st.rerun(scope="app")
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


LIVE_POLL_S = 2.0
"""How often the sidebar's status reruns while a demo, job or sweep is live."""
IDLE_POLL_S = 10.0
"""How often it reruns while nothing is: each rerun costs Streamlit ~0.2 CPU-s, so at 2 s an
idle open tab used ~0.14 CPU-s a second (benchmarks/RESULTS.md, "CPU-seconds per test
file, third round"); work started elsewhere (a sweep from a terminal) shows within this."""


def _status_lines(db: str) -> bool:
    """The demo's progress, running jobs and live sweeps; whether any of them is live."""
    live = False
    demo = data.demo_status(db)
    if demo is not None and demo.live:
        demo_progress(demo, db, compact=True)
        live = True
    elif demo is not None and (demo.state == "failed" or demo.lost):
        st.error(f"The demo stopped: {(demo.error or 'its process ended').splitlines()[0]}")
    for job in data.jobs(db).running():
        st.caption(f":material/hourglass_top: {job.label}")
        live = True
    for sweep in data.live_sweeps(db).values():
        if sweep.live:
            st.progress(
                (sweep.done + sweep.failed) / max(sweep.total, 1),
                text=f"[{sweep.sweep_id}](/compare?sweep={sweep.sweep_id}): {sweep.line()}",
            )
            live = True
    return live


def sidebar_status(db: str) -> None:
    """Database path, the demo's progress and running jobs: refreshed every
    :data:`LIVE_POLL_S` while any is live, every :data:`IDLE_POLL_S` while none is."""
    was_live = bool(st.session_state.get("_sidebar_live", False))

    @st.fragment(run_every=LIVE_POLL_S if was_live else IDLE_POLL_S)
    def status() -> None:
        live = _status_lines(db)
        st.session_state["_sidebar_live"] = live
        if live != was_live:
            st.rerun()  # the page polls at the other pace from now on

    with st.sidebar:
        st.caption(f"Database: `{db}`" + (" (read-only)" if data.read_only(db) else ""))
        status()
        st.segmented_control(
            "Charts save as", list(CHART_FORMATS), default="PNG", key="chart_format",
            help="What the camera in each chart's toolbar downloads: PNG (slides) or SVG "
            "(vector graphics, for a paper). Each chart's data: its Data (CSV) button.",
        )  # fmt: skip
