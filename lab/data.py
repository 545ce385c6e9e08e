"""Cached access to the episode store for the pages (the only lab module that calls queries).

Query results go through ``st.cache_data`` with a short TTL, so a live run shows up
within seconds while a round-slider rerun never touches the database. Arguments are plain
values (strings, ints, tuples) so the cache keys stay cheap. Long-lived objects (the job
manager, the demo runner) are ``st.cache_resource``: one per lab server.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pandas as pd
import streamlit as st

from core.records import EpisodeRecord
from core.store import queries as q
from core.store.engine import resolve_db
from lab import figures
from lab.jobs import CommandQueue, JobManager

TTL_S = 3
"""Seconds a query result is reused: short, so live runs appear almost at once."""


def db_path() -> str:
    """The database the lab shows: ``$AGENTQMIX_DB`` or ``./agentqmix.duckdb``, absolute."""
    return str(resolve_db(None))


def workdir(db: str) -> Path:
    """Folder for the lab's checkpoints and job logs: ``<db name>.lab/`` next to the database."""
    path = Path(db)
    out = path.with_name(path.name + ".lab")
    (out / "checkpoints").mkdir(parents=True, exist_ok=True)
    (out / "logs").mkdir(parents=True, exist_ok=True)
    return out


def _filters(
    run_id: str | None = None,
    benchmark: str | None = None,
    policy: str | None = None,
    correct: bool | None = None,
    with_failures: bool | None = None,
    from_episode: int | None = None,
) -> q.EpisodeFilter:
    return q.EpisodeFilter(
        run_ids=[run_id] if run_id else None,
        benchmark=benchmark,
        policy=policy,
        correct=correct,
        with_failures=with_failures,
        from_episode=from_episode,
    )


@st.cache_data(ttl=TTL_S, show_spinner=False)
def runs(db: str, kind: str | None = None) -> pd.DataFrame:
    """Runs with headline figures, newest first."""
    return q.list_runs(db, kind=kind)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def episodes(
    db: str,
    run_id: str | None = None,
    benchmark: str | None = None,
    policy: str | None = None,
    correct: bool | None = None,
    with_failures: bool | None = None,
    limit: int = 200,
    from_episode: int | None = None,
) -> pd.DataFrame:
    """Up to ``limit`` episode headlines matching the filters, from index ``from_episode`` on."""
    flt = _filters(run_id, benchmark, policy, correct, with_failures, from_episode)
    return q.list_episodes(db, flt, limit=limit)


def episode_labels(episodes: pd.DataFrame) -> dict[int, str]:
    """``#12 · task-3 · ✔ · 1,234 tok · 1 failed`` per episode index, built in one pass
    (a ``format_func`` that filters the frame per option costs seconds for 200 options)."""
    return {
        int(i): f"#{i} · {task} · {'✔' if ok else '✘'} · {tok:,} tok"
        + (f" · {nf} failed" if nf else "")
        for i, task, ok, tok, nf in zip(
            episodes["episode"],
            episodes["task_id"],
            episodes["correct"],
            episodes["tokens"],
            episodes["n_failed"],
            strict=True,
        )
    }


@st.cache_data(ttl=TTL_S, show_spinner=False)
def count(db: str, run_id: str | None = None) -> int:
    return q.count_episodes(db, _filters(run_id))


@st.cache_data(ttl=600, show_spinner=False, max_entries=256)
def episode(db: str, run_id: str, index: int) -> EpisodeRecord | None:
    """One logged episode (immutable once logged, so cached for long)."""
    loaded = q.load_episode(db, run_id, index)
    return loaded.record if loaded else None


@st.cache_data(ttl=TTL_S, show_spinner=False)
def distinct(db: str, column: str) -> list:
    return q.distinct_values(db, column)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def aggregate(
    db: str,
    by: tuple[str, ...],
    run_ids: tuple[str, ...] | None = None,
    benchmark: str | None = None,
    with_failures: bool | None = None,
) -> pd.DataFrame:
    flt = q.EpisodeFilter(
        run_ids=list(run_ids) if run_ids else None, benchmark=benchmark, with_failures=with_failures
    )
    return q.aggregate(db, by, flt)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def action_distribution(
    db: str,
    by: str,
    run_ids: tuple[str, ...] | None = None,
    benchmark: str | None = None,
    policy: str | None = None,
) -> pd.DataFrame:
    flt = q.EpisodeFilter(
        run_ids=list(run_ids) if run_ids else None, benchmark=benchmark, policy=policy
    )
    return q.action_distribution(db, by, flt)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def robustness(db: str, benchmark: str | None = None) -> pd.DataFrame:
    return q.robustness(db, q.EpisodeFilter(benchmark=benchmark))


CURVE_POINTS = 2000
"""Points per training curve at most (a long run is thinned in SQL: the browser stays fast)."""


@st.cache_data(ttl=TTL_S, show_spinner=False)
def curves(db: str, run_id: str, window: int = 25) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per-episode curves, per-update training metrics) of one run, thinned to
    :data:`CURVE_POINTS` rows each (moving averages still use every episode)."""
    return (
        q.episode_curves(db, run_id, window, CURVE_POINTS),
        q.training_curves(db, run_id, CURVE_POINTS),
    )


@st.cache_data(ttl=TTL_S, show_spinner=False)
def action_mix(db: str, run_id: str, bucket: int) -> pd.DataFrame:
    return q.action_mix_over_time(db, run_id, bucket)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def run_info(db: str, run_id: str) -> q.RunInfo | None:
    """One run with its parsed config (the team it used, its checkpoint)."""
    return q.get_run(db, run_id)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def checkpoints(db: str, roles: tuple[str, ...] | None = None) -> pd.DataFrame:
    """Training runs whose checkpoint file exists (learned policies one can evaluate), newest
    first; with ``roles``, only those trained for exactly that team."""
    df = q.list_runs(db, kind="train")
    if df.empty:
        return df
    df = df[df["checkpoint"].notna()]
    df = df.loc[[Path(p).exists() for p in df["checkpoint"]]]
    if roles is not None:
        keep = []
        for run_id in df["id"]:
            info = q.get_run(db, run_id)
            team = (info.config if info else {}).get("team", {})
            keep.append(tuple(team.get("roles", ())) == tuple(roles))
        df = df.loc[keep]
    return df


def clear() -> None:
    """Forget cached query results (after this lab wrote or deleted something)."""
    for fn in (runs, episodes, count, distinct, aggregate, action_distribution, robustness,
               curves, action_mix, checkpoints, run_info):  # fmt: skip
        fn.clear()


@st.cache_resource
def jobs(db: str) -> JobManager:
    """The lab server's job manager for ``db`` (its logs live under :func:`workdir`)."""
    return JobManager(workdir(db) / "logs", cwd=Path(os.getcwd()))


@st.cache_resource
def demo_slot(db: str) -> dict[str, CommandQueue | None]:
    """Holds the first-start demo of ``db`` so it runs once per server, not once per session."""
    return {"runner": None}


@st.cache_resource(max_entries=128, show_spinner=False)
def replay_figures(db: str, run_id: str, index: int, round_index: int) -> dict:
    """The Replay page's figures for one round of one episode, built once and reused.

    ``cache_resource`` hands back the same objects without a copy: the figures are only
    read (serialised) by ``st.plotly_chart``, and moving the round slider stays fast.
    """
    record = episode(db, run_id, index)
    rnd = record.rounds[round_index]
    return {
        "graph": figures.communication_graph(record, round_index),
        "q": figures.q_values_figure(rnd, record.roles),
        "mixer": figures.mixer_figure(rnd, record.roles),
        "tokens": figures.tokens_figure(record, round_index),
        "table": figures.round_table(record, round_index),
        "messages": figures.messages_table(rnd),
    }


@st.cache_resource(max_entries=256, show_spinner=False)
def prebuild_rounds(db: str, run_id: str, index: int, n_rounds: int) -> threading.Thread:
    """Build every round's Replay figures of this episode in a background thread, once.

    Building one round's figures takes 100-300 ms on a busy machine; done while the reader
    looks at the first round, the slider then only fetches finished figures. A move that
    comes first waits for that round's build (``cache_resource`` locks per key).
    """

    def build() -> None:
        for r in range(n_rounds):
            replay_figures(db, run_id, index, r)

    thread = threading.Thread(target=build, name=PREBUILD_THREAD, daemon=True)
    thread.start()
    return thread


PREBUILD_THREAD = "replay-prebuild"
