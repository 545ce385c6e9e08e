"""Cached access to the episode store for the pages (the only lab module that calls queries).

Query results go through ``st.cache_data`` with a short TTL, so a live run shows up
within seconds while a round-slider rerun never touches the database. Arguments are plain
values (strings, ints, tuples) so the cache keys stay cheap. Long-lived objects (the job
manager, the demo runner) are ``st.cache_resource``: one per lab server.
"""

from __future__ import annotations

import io
import json
import tempfile
import threading
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from core.baselines.names import METHOD_KNOBS
from core.host import process_alive
from core.records import DECISION_AGENT, EpisodeRecord
from core.store import queries as q
from core.store.commands import delete_run, export_run
from core.store.engine import resolve_db, sweep_status_dir, write_problem
from core.team.options import TeamOptions, options_from_dict
from core.team.topologies import FIXED_TOPOLOGIES
from lab import asked, figures, forks
from lab import jobs as jobs_module
from lab.demo import ROOT, DemoStatus, read_status
from lab.jobs import JobManager
from lab.palette import LEARNED_METHODS
from lab.policies import describe_policy, describe_training, knob_text
from lab.stats import with_intervals

TTL_S = 3
"""Seconds a query result is reused: short, so live runs appear almost at once."""


def db_path() -> str:
    """The database the lab shows: ``$AGENTQMIX_DB`` or ``./agentqmix.duckdb``, absolute."""
    return str(resolve_db(None))


def workdir(db: str) -> Path:
    """Folder for the lab's checkpoints, job registry and logs: ``<db name>.lab/``."""
    return jobs_module.workdir(db)


TRAINING_POLICY = "env"
"""The store's policy name for episodes played while training (with exploration: ε-greedy
for Agent Q-Mix, sampled graphs for the learned-topology methods)."""

TRAINING_LABEL = "training (exploring)"
"""How the lab names those episodes: they are no policy one would deploy or compare (not
"ε-greedy": AgentPrune's or GPTSwarm's training samples graphs, it has no ε)."""


def policy_label(policy: str | None) -> str:
    """A stored policy name as the lab shows it (``env`` is training, not a policy)."""
    if policy is None:
        return "any"
    return TRAINING_LABEL if policy == TRAINING_POLICY else str(policy)


def replay_first(runs: pd.DataFrame) -> str | None:
    """The run Replay opens on when no link names one: the newest held-out evaluation of a
    learned policy (the first-start demo's shipped policy), else the newest evaluation that
    is not a robustness sweep, else the newest run with an episode. ``runs`` newest first,
    as :func:`runs` returns them."""
    played = runs[runs["episodes"] > 0]
    held = played[played["kind"].isin(["eval", "compare"]) & (played["policy"] != "robustness")]
    for frame in (held[held["policy"].isin(LEARNED_METHODS)], held, played):
        if not frame.empty:
            return str(frame["id"].iloc[0])
    return None


def _family(method: str) -> str | None:
    """``learned`` / ``fixed`` for a name the project ships, else None."""
    if method in LEARNED_METHODS:
        return "learned"
    return "fixed" if method in FIXED_TOPOLOGIES else None


@st.cache_data(ttl=TTL_S, show_spinner=False)
def policy_descriptions(db: str) -> pd.DataFrame:
    """What each policy of each run is (:func:`core.store.queries.policy_descriptions`)."""
    return q.policy_descriptions(db)


def with_methods(df: pd.DataFrame, db: str, run_id: str | None = None) -> pd.DataFrame:
    """``df`` (one row per policy, or per policy in each run: ``policy_id`` and maybe
    ``run_id``) with what each policy is, from the runs' ``config["policies"]``:
    ``method`` (what colours it: qmix, a learned-topology method, a topology), ``family``,
    ``token_weight`` (trained at), ``knob`` (a dict) and ``description``
    (:func:`describe_policy`). Without ``run_id`` in ``df``, ``run_id`` names the one run
    its rows come from. A run that stored no description (logged before issue 20, a fixed
    topology's own eval run, training episodes) keeps its policy name as its method."""
    if df.empty or "policy_id" not in df:
        return df
    described = policy_descriptions(db).rename(columns={"policy": "policy_id"})
    if "run_id" in df:
        df = df.merge(described, on=["run_id", "policy_id"], how="left")
    elif run_id is not None:
        mine = described[described["run_id"] == run_id].drop(columns="run_id")
        df = df.merge(mine, on="policy_id", how="left")
    else:
        df = df.assign(method=None, family=None, token_weight=None, knob=None)
    df["method"] = df["method"].where(df["method"].notna(), df["policy_id"])
    df["family"] = [
        f if isinstance(f, str) else _family(m)
        for f, m in zip(df["family"], df["method"], strict=True)
    ]
    df["token_weight"] = pd.to_numeric(df["token_weight"], errors="coerce")
    df["knob"] = [json.loads(k) if isinstance(k, str) else {} for k in df["knob"]]
    df["description"] = [
        describe_policy(m, f, w, k) if f else label
        for m, f, w, k, label in zip(
            df["method"], df["family"], df["token_weight"], df["knob"], df["policy"], strict=True
        )
    ]
    return df


def train_run_method(info: q.RunInfo | None) -> tuple[str, float | None, dict[str, float]]:
    """What a training run learns: its method (``qmix`` or a learned-topology method), the
    token weight it trains at and its knob (a sweep trial's swept setting, else the
    method's own knob at the value it was given); a run that is gone learns ``qmix``."""
    config = info.config if info is not None else {}
    method = (config.get("method") or {}).get("name") or "qmix"
    weight = (config.get("team") or {}).get("token_weight")
    knob = (config.get("sweep") or {}).get("knob")
    if not isinstance(knob, dict):
        name = METHOD_KNOBS.get(method)
        settings = (config.get("method") or {}).get("config") or {}
        knob = {name: float(settings[name])} if name in settings else {}
    return method, None if weight is None else float(weight), knob


def short_run(run_id: str) -> str:
    """``eval-…-e490`` → ``eval-e490``: enough to tell runs apart on a chart."""
    parts = str(run_id).split("-")
    return f"{parts[0]}-{parts[-1]}" if len(parts) > 2 else str(run_id)


def engine_label(backend: str | None, model: str | None) -> str:
    """What answered a run's questions, as charts name it: ``simulated`` for the synthetic
    society, else ``back-end · model`` (``openai · SmolLM2-135M-Instruct``)."""
    if backend in (None, "", "sim"):
        return "simulated"
    return f"{backend} · {model}" if model else str(backend)


def _label_policies(df: pd.DataFrame, include_training: bool) -> pd.DataFrame:
    """Keep the stored name as ``policy_id``, show ``policy`` as :func:`policy_label`;
    without ``include_training``, drop the training episodes."""
    if "policy" not in df:
        return df
    df = df.rename(columns={"policy": "policy_id"})
    if not include_training:
        df = df[df["policy_id"] != TRAINING_POLICY]
    df.insert(list(df.columns).index("policy_id"), "policy", df["policy_id"].map(policy_label))
    return df.reset_index(drop=True)


@dataclass(frozen=True)
class Listing:
    """Which episodes a page lists (``None``: no restriction): Replay's filters and search,
    or one run's episodes for the other pages. The cached queries below key on it."""

    run_id: str | None = None
    """Only this run."""
    benchmark: str | None = None
    """Only this benchmark."""
    policy: str | None = None
    """Only this policy or fixed topology (its stored name)."""
    correct: bool | None = None
    """Only right (True) or wrong (False) team answers."""
    with_failures: bool | None = None
    """Only episodes with (True) or without (False) injected failures."""
    text: str | None = None
    """Only episodes whose task id or question contains this; empty searches nothing."""

    def query(self) -> q.EpisodeFilter:
        """The store's filter for this listing."""
        return q.EpisodeFilter(
            run_ids=[self.run_id] if self.run_id else None,
            benchmark=self.benchmark,
            policy=self.policy,
            correct=self.correct,
            with_failures=self.with_failures,
            text=self.text or None,
        )


@st.cache_data(ttl=TTL_S, show_spinner=False)
def runs(db: str, kind: str | None = None) -> pd.DataFrame:
    """Runs with headline figures and what their config says they belong to (the columns
    of :func:`core.store.queries.run_tags`: sweep, fork, robustness mode), newest first,
    the Failure lab's forks after every other run (pickers list them as one group)."""
    df = q.list_runs(db, kind=kind)
    if df.empty:
        return df
    df = df.merge(q.run_tags(db), on="id", how="left").assign(budget=budget_column(df))
    fork = (df["kind"] == forks.FORK_KIND).astype(int)
    return df.assign(_fork=fork).sort_values("_fork", kind="stable").drop(columns="_fork")


@st.cache_data(ttl=TTL_S, show_spinner=False)
def calibration_report(db: str, run_id: str) -> dict[str, Any]:
    """The report an ``agentqmix calibrate`` run logged ({} if it has none)."""
    info = q.get_run(db, run_id)
    return (info.config.get("calibration") or {}) if info is not None else {}


def study_result(db: str, run_id: str) -> dict[str, Any]:
    """The result an ``agentqmix study transfer`` run logged ({} if it has none)."""
    info = q.get_run(db, run_id)
    return (info.config.get("study") or {}) if info is not None else {}


def budget_column(df: pd.DataFrame) -> list[str | None]:
    """Each run's logged spend against its budget (``9,882/12,000 tokens``; None for a run
    without one), as ``agentqmix runs`` shows it."""
    from core.store.commands import spend_text

    caps = df[["budget_tokens", "budget_calls", "spent_tokens", "spent_calls"]]
    return [
        spend_text(*(None if pd.isna(v) else int(v) for v in row))
        for row in caps.itertuples(index=False)
    ]


def fork_run_ids(db: str) -> set[str]:
    """Runs the Failure lab logged (forks): one-episode pairs, no policy's evaluation."""
    df = runs(db)
    return set() if df.empty else set(df.loc[df["kind"] == forks.FORK_KIND, "id"])


@st.cache_data(ttl=TTL_S, show_spinner=False)
def episodes(
    db: str,
    listing: Listing = Listing(),
    limit: int = 200,
    order_by: str = "episode",
    descending: bool = False,
    offset: int = 0,
) -> pd.DataFrame:
    """Up to ``limit`` headlines of the listing's episodes, sorted by ``order_by``, skipping
    the first ``offset``."""
    return q.list_episodes(
        db, listing.query(), limit=limit, offset=offset, order_by=order_by, descending=descending
    )


def episode_labels(episodes: pd.DataFrame) -> dict[int, str]:
    """``#12 · task-3 · right · 1,234 tok · reward 0.91 · 1 failed`` per episode index, built
    in one pass (a ``format_func`` that filters the frame per option costs seconds for 200
    options). Words, not glyphs: no font on the reader's machine is assumed."""
    return {
        int(i): f"#{i} · {task} · {'right' if ok else 'wrong'} · {tok:,} tok · reward {rw:.2f}"
        + (f" · {nf} failed" if nf else "")
        for i, task, ok, tok, rw, nf in zip(
            episodes["episode"],
            episodes["task_id"],
            episodes["correct"],
            episodes["tokens"],
            episodes["reward"],
            episodes["n_failed"],
            strict=True,
        )
    }


@st.cache_data(ttl=TTL_S, show_spinner=False)
def count(db: str, listing: Listing = Listing()) -> int:
    """Episodes in the listing."""
    return q.count_episodes(db, listing.query())


@st.cache_data(ttl=TTL_S, show_spinner=False)
def episode_position(
    db: str, listing: Listing, index: int, order_by: str = "episode", descending: bool = False
) -> int | None:
    """Where episode ``index`` of the listing's run stands in the listing in this order (for
    paging to it); None when it does not match the listing."""
    return q.episode_rank(db, listing.query(), index, order_by=order_by, descending=descending)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def run_values(db: str, run_id: str, column: str) -> list:
    """The values ``column`` (policy, benchmark...) takes in one run's episodes (stored
    names), sorted: filters then offer only what the run has."""
    df = q.aggregate(db, (column,), q.EpisodeFilter(run_ids=[run_id]))
    return sorted(df[column].dropna().tolist())


@st.cache_data(ttl=TTL_S, show_spinner=False)
def task_outcomes(db: str, run_id: str, policy: str, healthy: bool = True) -> pd.DataFrame:
    """One side of a run diff: per task, how one policy of one run did (healthy episodes
    only, unless ``healthy`` is False)."""
    listing = Listing(run_id, policy=policy, with_failures=False if healthy else None)
    return q.task_outcomes(db, listing.query())


@st.cache_data(ttl=TTL_S, show_spinner=False)
def task_players(db: str, task_id: str, healthy: bool = True) -> set[tuple[str, str]]:
    """The (run, policy) pairs that played ``task_id`` (healthy episodes only, unless
    ``healthy`` is False): who the side-by-side view can put beside a task's episode."""
    listing = Listing(with_failures=False if healthy else None)
    df = q.task_players(db, task_id, listing.query())
    return set(zip(df["run_id"], df["policy"], strict=True))


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
    include_training: bool = False,
) -> pd.DataFrame:
    """Accuracy, tokens and reward per group, with 95 % intervals (Wilson for accuracy,
    normal SE for the means). Grouped by policy, ``policy`` is the display name and
    ``policy_id`` the stored one; training episodes only with ``include_training``.
    Grouped by run and policy, each row also says what its policy is
    (:func:`with_methods`: method, family, trained token weight, knob, description)."""
    flt = q.EpisodeFilter(
        run_ids=list(run_ids) if run_ids else None, benchmark=benchmark, with_failures=with_failures
    )
    df = q.aggregate(db, by, flt)
    if "run_id" in df and not run_ids:
        # A fork is two episodes of one task: a point of n = 1 that says nothing of a policy.
        df = df[~df["run_id"].isin(fork_run_ids(db))]
    df = _label_policies(df, include_training)
    if "backend" in df:
        df["engine"] = [engine_label(b, m) for b, m in zip(df["backend"], df["model"], strict=True)]
    if "run_id" in df and "policy" in df:
        df["label"] = [
            f"{p} · {short_run(r)}" for p, r in zip(df["policy"], df["run_id"], strict=True)
        ]
        df = _training_points(with_methods(df, db), db)
    return with_intervals(df) if not df.empty else df


def _training_points(df: pd.DataFrame, db: str) -> pd.DataFrame:
    """Mark the training episodes' rows (``training``) and say what they are: the method
    their run learns (their colour), family ``training``, and a hover that says they are
    no held-out result (:func:`describe_training`); charts keep them off every front."""
    df = df.assign(training=df["policy_id"] == TRAINING_POLICY)
    for i in df.index[df["training"]]:
        method, weight, knob = train_run_method(run_info(db, df.at[i, "run_id"]))
        df.at[i, "method"], df.at[i, "family"] = method, "training"
        df.at[i, "token_weight"], df.at[i, "knob"] = weight, knob
        df.at[i, "label"] = f"{method} {TRAINING_LABEL} · {short_run(df.at[i, 'run_id'])}"
        df.at[i, "description"] = describe_training(method)
    return df


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
def robustness(
    db: str,
    benchmark: str | None = None,
    include_training: bool = False,
    run_ids: tuple[str, ...] | None = None,
) -> pd.DataFrame:
    """Accuracy by policy and number of failed agents, with Wilson intervals (``run_ids``:
    only those runs, e.g. one robustness measurement, whose policies' methods
    :func:`with_methods` then reads)."""
    flt = q.EpisodeFilter(benchmark=benchmark, run_ids=list(run_ids) if run_ids else None)
    df = _label_policies(q.robustness(db, flt), include_training)
    df = with_methods(df, db, run_ids[0] if run_ids and len(run_ids) == 1 else None)
    return with_intervals(df) if not df.empty else df


def robustness_runs(db: str) -> pd.DataFrame:
    """Robustness measurements (``agentqmix robustness`` or the Failure lab's), newest
    first, with their benchmark and failure mode."""
    df = runs(db)
    if df.empty:
        return df
    return df[(df["policy"] == "robustness") & (df["episodes"] > 0)].sort_values(
        "started_at", ascending=False
    )


@st.cache_data(ttl=TTL_S, show_spinner=False)
def sweeps(db: str) -> pd.DataFrame:
    """Sweeps in the store (:func:`core.store.queries.list_sweeps`), newest first."""
    return q.list_sweeps(db)


@dataclass(frozen=True)
class LiveSweep:
    """How far a sweep is, as its driver last said (``<db>.sweeps/SWEEP_ID.json``)."""

    sweep_id: str
    benchmark: str
    total: int
    done: int
    running: int
    failed: int
    state: str
    """``running``, ``finished``, ``interrupted``, ``failed`` — or ``stopped``: it said it
    was running, but its process is gone."""
    started_at: float
    error: str = ""

    @property
    def live(self) -> bool:
        return self.state == "running"

    def line(self) -> str:
        """``4 of 6 trials done · 2 running · 1 failed`` (and how it ended)."""
        parts = [f"{self.done} of {self.total} trials done"]
        parts += [f"{self.running} running"] if self.running and self.live else []
        parts += [f"{self.failed} failed"] if self.failed else []
        parts += [] if self.live or self.state == "finished" else [self.state]
        return " · ".join(parts)


def live_sweeps(db: str) -> dict[str, LiveSweep]:
    """Every sweep that logs into ``db`` and said how far it is, newest first (not cached:
    a few small files, read every refresh while one runs)."""
    found = []
    for path in sweep_status_dir(db).glob("*.json"):
        try:
            d = json.loads(path.read_text())
            state = d["state"]
            if state == "running" and not process_alive(int(d["pid"])):
                state = "stopped"
            found.append(
                LiveSweep(
                    d["sweep_id"], str(d.get("benchmark") or "?"), int(d["total"]),
                    int(d["done"]), int(d["running"]), int(d["failed"]), state,
                    float(d.get("started_at") or 0.0), str(d.get("error") or ""),
                )
            )  # fmt: skip
        except (OSError, ValueError, KeyError, TypeError):
            continue  # being replaced, or not a sweep's: the next refresh reads it
    return {s.sweep_id: s for s in sorted(found, key=lambda s: -s.started_at)}


def sweep_label(row: pd.Series) -> str:
    """``sweep-… · mixed · 6 trials (weights 0.1, 0.3) · 7 fixed`` — how a sweep is named
    in pickers (``· pass-through off, unanimous`` when it played the consensus
    pass-through); a sweep whose runs are still being written may have no trial yet (its
    weights are NULL, its benchmark too when no run has logged an episode)."""

    def listed(name: str) -> list[Any]:
        values = row.get(name)
        return [] if values is None or not hasattr(values, "__iter__") else list(values)

    weights, rules = listed("token_weights"), listed("pass_through")
    bench = row.get("benchmark") if isinstance(row.get("benchmark"), str) else "?"
    trials = f"{int(row['trials'])} trials" + (
        f" (weights {', '.join(f'{w:g}' for w in weights)})" if weights else ""
    )
    paper = not rules or rules == [TeamOptions.pass_through]
    rule = "" if paper else f" · pass-through {', '.join(rules)}"
    return f"{row['sweep_id']} · {bench} · {trials} · {int(row['fixed'])} fixed{rule}"


@st.cache_data(ttl=TTL_S, show_spinner=False)
def sweep_points(db: str, sweep_id: str, landed: int | None = None) -> pd.DataFrame:
    """One sweep's held-out points (a trial's learned policy or a fixed topology) with 95 %
    intervals and a ``label``: ``w=0.3 · seed 1`` for an Agent Q-Mix trial, ``agentprune
    prune_ratio=0.3 · w=0.3 · seed 1`` for a learned-topology method's, the topology's name
    for a fixed one; ``knob`` as a dict; ``method`` (what colours the point), ``family`` and
    ``description`` as :func:`with_methods` gives them; ``pass_through`` the decision rule it
    was played under (a run older than the rule played the paper's). ``landed`` (trials done
    or failed, as the running driver last said) only keys the cache: a trial that lands is
    drawn at once."""
    df = q.sweep_points(db, sweep_id)
    if df.empty:
        return df
    df["knob"] = [json.loads(k) if isinstance(k, str) else {} for k in df["knob"]]
    df["pass_through"] = df["pass_through"].fillna(TeamOptions.pass_through)

    def label(policy: str, w: float | None, seed: float, knob: dict) -> str:
        if w is None or w != w:
            return str(policy)
        method = "" if policy == "qmix" else f"{policy} "
        method += f"{knob_text(knob)} " if knob else ""
        return f"{method}{'· ' if method else ''}w={w:g} · seed {int(seed)}"

    df["label"] = [
        label(*row)
        for row in zip(df["policy"], df["token_weight"], df["seed"], df["knob"], strict=True)
    ]
    df["learned"] = df["token_weight"].notna()
    df["method"] = df["policy"]
    df["family"] = ["learned" if w else "fixed" for w in df["learned"]]
    df["description"] = [
        describe_policy(*row)
        for row in zip(df["method"], df["family"], df["token_weight"], df["knob"], strict=True)
    ]
    df["engine"] = [engine_label(b, m) for b, m in zip(df["backend"], df["model"], strict=True)]
    return with_intervals(df)


CURVE_POINTS = 2000
"""Points per training curve at most (a long run is thinned in SQL: the browser stays fast)."""


@st.cache_data(ttl=TTL_S, show_spinner=False)
def curves(db: str, run_id: str, window: int = 1) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per-episode curves, per-update training metrics) of one run, thinned to
    :data:`CURVE_POINTS` rows each (moving averages still use every episode)."""
    return (
        q.episode_curves(db, run_id, window, CURVE_POINTS),
        q.training_curves(db, run_id, CURVE_POINTS),
    )


def run_of_job(db: str, pid: int, since: float) -> str | None:
    """The training run a lab job logs (the run started since ``since``, a Unix time, by
    process ``pid``), once the store has it; None before. Not cached: the Train page asks
    until it shows."""
    df = q.list_runs(db, kind="train")
    if df.empty:
        return None
    for run_id in df.loc[df["started_at"] >= pd.Timestamp(since - 2, unit="s"), "id"]:
        info = q.get_run(db, run_id)
        if info is not None and info.pid == pid:
            return str(run_id)
    return None


def run_of_eval_job(db: str, pid: int, since: float) -> str | None:
    """The evaluation run (``eval`` or ``compare``) a lab job logs, once the store has it
    (as :func:`run_of_job`); None before. Not cached: the page asks until it shows."""
    for kind in ("compare", "eval"):
        df = q.list_runs(db, kind=kind)
        if df.empty:
            continue
        for run_id in df.loc[df["started_at"] >= pd.Timestamp(since - 2, unit="s"), "id"]:
            info = q.get_run(db, run_id)
            if info is not None and info.pid == pid:
                return str(run_id)
    return None


def evaluations_of(db: str, train_run: str) -> pd.DataFrame:
    """The evaluation runs that played ``train_run``'s checkpoint (``config["source_run"]``),
    newest first (:func:`runs`' columns)."""
    df = runs(db)
    if df.empty:
        return df
    return df[df["source_run"] == train_run].sort_values("started_at", ascending=False)


TEAM_IDENTITY = (
    "benchmark", "backend", "model", "preset", "society", "roles", "rounds", "token_weight",
    "token_budget", "token_penalty", "idle", "pass_through", "actions", "embedding",
    "fail_prob", "failures",
)  # fmt: skip
"""The team fields that decide what an evaluation's episodes are and what they score: two
runs that agree on them (and on the stream) played the same episodes."""


def _identity(team: dict[str, Any]) -> tuple:
    opts = options_from_dict(team)
    return tuple(getattr(opts, name) for name in TEAM_IDENTITY)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def evaluated_topologies(db: str, team: str, seed: int, episodes: int) -> frozenset[str]:
    """The fixed topologies already played healthy on held-out episodes 0..episodes-1 of
    stream ``seed`` by the team ``team`` (the JSON of a ``config["team"]``, failures and all:
    :data:`TEAM_IDENTITY`), in a finished ``eval`` or ``compare`` run of the store: a new
    evaluation need not play them again."""
    want = _identity(json.loads(team))
    done: set[str] = set()
    for kind in ("eval", "compare"):
        df = q.list_runs(db, kind=kind, status="finished")
        for run_id in df.loc[df["seed"] == seed, "id"] if not df.empty else ():
            info = q.get_run(db, run_id)
            plan = info.config.get("eval") if info is not None else None
            if (
                not plan
                or plan.get("command") not in ("eval", "compare")
                or plan.get("first", 0) != 0
                or plan.get("per_policy", 0) < episodes
                or _identity(info.config.get("team", {})) != want
            ):
                continue
            done.update(p for p in plan.get("policies", ()) if p in FIXED_TOPOLOGIES)
    return frozenset(done)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def action_mix(db: str, run_id: str, bucket: int) -> pd.DataFrame:
    return q.action_mix_over_time(db, run_id, bucket)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def run_info(db: str, run_id: str) -> q.RunInfo | None:
    """One run with its parsed config (the team it used, its checkpoint)."""
    return q.get_run(db, run_id)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def checkpoints(db: str, roles: tuple[str, ...] | None = None) -> pd.DataFrame:
    """Learned policies one can play (their checkpoint file exists), newest run first: those
    of training runs and those only evaluated here (a policy trained elsewhere, such as the
    demo's shipped one: ``id`` is then the evaluation run's); with ``roles``, only those for
    exactly that team. Columns: ``id``, ``policy``, ``checkpoint``, ``started_at``."""
    trained = q.list_runs(db, kind="train")
    trained = trained[trained["checkpoint"].notna()] if not trained.empty else trained
    rows = [(r["id"], r["policy"], r["checkpoint"], r["started_at"]) for _, r in trained.iterrows()]
    seen = {path for *_, path, _ in rows}
    for _, r in q.list_runs(db, kind="eval").iterrows():
        info = q.get_run(db, r["id"])
        for path in (info.config if info else {}).get("eval", {}).get("checkpoints") or ():
            if path not in seen:
                seen.add(path)
                rows.append((r["id"], r["policy"], path, r["started_at"]))
    df = pd.DataFrame(rows, columns=["id", "policy", "checkpoint", "started_at"])
    df = df.sort_values("started_at", ascending=False, kind="stable")
    df = df.loc[[Path(p).exists() for p in df["checkpoint"]]]
    if roles is not None:
        keep = []
        for run_id in df["id"]:
            info = q.get_run(db, run_id)
            team = (info.config if info else {}).get("team", {})
            keep.append(tuple(team.get("roles", ())) == tuple(roles))
        df = df.loc[keep]
    return df.reset_index(drop=True)


def clear() -> None:
    """Forget cached query results (after this lab wrote or deleted something)."""
    for fn in (runs, episodes, count, distinct, aggregate, action_distribution, robustness,
               curves, action_mix, checkpoints, run_info, episode_position,
               run_values, sweeps, sweep_points, policy_descriptions,
               evaluated_topologies):  # fmt: skip
        fn.clear()


def read_only(db: str) -> str | None:
    """Why this lab cannot write ``db`` (its file or folder is read-only for the user who
    started it), else None. The lab then opens it read-only: Replay, Compare, Run diff and
    CTDE work (they only read); what writes (training, forks, deleting a run, the demos)
    says it cannot. Asked on every draw: a ``chmod`` shows at the next click."""
    return write_problem(Path(db))


@st.cache_resource
def jobs(db: str) -> JobManager:
    """The job manager for ``db``: its registry folder is shared by every session and every
    lab server on that database (see :class:`lab.jobs.JobManager`); read-only (lists the
    registry, starts nothing) when the lab cannot write the database."""
    if (reason := read_only(db)) is not None:
        return JobManager(jobs_module.lab_folder(db) / "jobs", cwd=ROOT, read_only=reason)
    return JobManager(workdir(db) / "jobs", cwd=ROOT)


@st.cache_resource(max_entries=8, show_spinner=False)
def policy(kind: str, value: str, mtime: float | None, team: str) -> Any:
    """A policy the Failure lab plays, loaded once per checkpoint file and modification
    time (a checkpoint rewritten by a resumed run loads afresh) and team (``team``: the
    JSON of :func:`lab.forks.fork_options`, whose shapes the checkpoint must fit). The
    learned policy keeps no state between calls (its memory is the caller's), so every
    session can share it."""
    opts = options_from_dict(json.loads(team))
    return forks.load_policy(forks.PolicyChoice(kind, value), opts)


def checkpoint_mtime(path: str) -> float | None:
    """The checkpoint file's modification time (part of :func:`policy`'s cache key)."""
    try:
        return Path(path).stat().st_mtime
    except OSError:
        return None


@st.cache_resource(show_spinner=False)
def warm_rollout() -> threading.Thread:
    """Import PyTorch and the rollout path in a background thread, once per server: the
    first *Run it now* then does not wait for the import (seconds on a busy machine).

    Not a daemon: a process that ends while the import runs (a stopped server, an AppTest
    script) waits for it. A daemon thread killed mid-import at interpreter shutdown made
    the process die with "Fatal Python error: ... could not acquire lock for <stderr>"
    and a nonzero exit code."""

    def load() -> None:
        import core.experiment.evaluate  # noqa: F401

    thread = threading.Thread(target=load, name="warm-rollout", daemon=False)
    thread.start()
    return thread


def demo_status(db: str) -> DemoStatus | None:
    """The first-start demo's progress (None if it never ran for this database)."""
    return read_status(db)


EXPORTS = "exports"
"""Default export folder, relative to the database's folder."""


def db_folder(db: str) -> Path:
    """The folder the database file is in (exports must stay inside it)."""
    return Path(db).resolve().parent


def export_dir(db: str, folder: str, run_id: str) -> Path:
    """``<database's folder>/<folder>/<run_id>/``; ValueError if ``folder`` leaves the
    database's folder (absolute, ``..``, a symlink out)."""
    base = db_folder(db)
    target = (base / (folder.strip() or EXPORTS)).resolve()
    if target != base and base not in target.parents:
        raise ValueError(f"export folders must be inside {base}; {folder!r} is not.")
    return target / run_id


def export_to_folder(db: str, folder: str, run_id: str) -> tuple[Path, dict[str, int]]:
    """Writes the run's tables as Parquet files into :func:`export_dir`; returns that folder
    and the rows written per table. ValueError for a folder outside the database's folder,
    UserError for an unknown run."""
    target = export_dir(db, folder, run_id)
    return target, export_run(run_id, target, db)


def delete_logged_run(db: str, run_id: str) -> dict[str, int]:
    """Deletes the run and everything logged under it (UserError for an unknown or live
    run); returns the rows deleted per table. The cached queries are cleared: every page
    must stop showing it."""
    counts = delete_run(run_id, db)
    clear()
    return counts


def export_zip(db: str, run_id: str) -> bytes:
    """The run's tables as Parquet files in one zip (for the browser download)."""
    with tempfile.TemporaryDirectory(prefix="agentqmix-export-") as tmp:
        export_run(run_id, tmp, db)
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
            for path in sorted(Path(tmp).glob("*.parquet")):
                zf.write(path, f"{run_id}/{path.name}")
        return buf.getvalue()


@st.cache_resource(max_entries=128, show_spinner=False)
def replay_figures(db: str, run_id: str, index: int, round_index: int) -> dict:
    """The Replay page's figures for one round of one episode, built once and reused.

    ``cache_resource`` hands back the same objects without a copy: the figures are only
    read (serialised) by ``st.plotly_chart``, and moving the round slider stays fast.
    """
    record = episode(db, run_id, index)
    rnd = record.rounds[round_index]
    agents = list(range(len(record.roles)))
    if round_index == len(record.rounds) - 1 and record.decision is not None:
        agents.append(DECISION_AGENT)
    names = {i: figures.agent_name(i, record.roles) for i in agents}
    names[DECISION_AGENT] = f"{figures.DECISION} decision"
    return {
        "graph": figures.communication_graph(record, round_index),
        "q": figures.q_values_figure(rnd, record.roles),
        "credit": figures.credit_figure(rnd, record.roles),
        "weights": figures.weights_figure(rnd.mixer_weights, record.roles),
        "tokens": figures.tokens_figure(record, round_index),
        "table": figures.round_table(record, round_index),
        "messages": figures.messages_table(rnd),
        "asked": {i: asked.asked(record, round_index, i) for i in agents},
        "names": names,
        "calls": asked.calls_table(record, round_index, names),
    }


@st.cache_resource(max_entries=128, show_spinner=False)
def side_figures(db: str, run_id: str, index: int, round_index: int) -> dict:
    """What the side-by-side view draws of one round of one episode, built once: Replay's
    graph and agent table (the same builders as :func:`replay_figures`, without the Q-value,
    mixer, token and prompt panels the view has no room for: a quarter of the build)."""
    record = episode(db, run_id, index)
    return {
        # Lower than Replay's: the graph is square and half the page wide.
        "graph": figures.communication_graph(record, round_index, height=400),
        "table": figures.round_table(record, round_index),
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


# --------------------------------------------------------------------------- methods contest


@st.cache_data(ttl=TTL_S, show_spinner=False)
def contests(db: str) -> pd.DataFrame:
    """The methods contests in the store (:func:`core.experiment.contest_store.list_contests`)."""
    from core.experiment.contest_store import list_contests

    return list_contests(db)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def contest_runs(db: str, contest: str) -> pd.DataFrame:
    """Every finished run of one contest (:func:`core.experiment.contest_store.contest_runs`)."""
    from core.experiment.contest_store import contest_runs as runs_of

    return runs_of(db, contest)


@st.cache_data(ttl=600, show_spinner=False, max_entries=16)
def contest_standings(db: str, contest: str, run_ids: tuple[str, ...]) -> Any:
    """:class:`lab.methods.Standings` of these finished runs of a contest (one protocol's;
    immutable once finished, so cached for long, keyed by the runs)."""
    from core.experiment.contest_store import contest_episodes
    from lab.methods import standings

    runs = contest_runs(db, contest)
    return standings(runs[runs["run_id"].isin(run_ids)], contest_episodes(db, run_ids))


@st.cache_data(ttl=600, show_spinner=False, max_entries=16)
def contest_leaderboard(db: str, contest: str, run_ids: tuple[str, ...]) -> pd.DataFrame:
    """:func:`lab.methods.leaderboard` of :func:`contest_standings` (the bootstrap runs once)."""
    from lab.methods import leaderboard

    return leaderboard(contest_standings(db, contest, run_ids))


@st.cache_data(ttl=600, show_spinner=False, max_entries=16)
def contest_claim(db: str, contest: str, run_ids: tuple[str, ...]) -> str | None:
    """:func:`lab.methods.dropout_claim` of :func:`contest_standings`."""
    from lab.methods import dropout_claim

    return dropout_claim(contest_standings(db, contest, run_ids))


@st.cache_data(ttl=600, show_spinner=False, max_entries=64)
def contest_subsets(
    db: str, contest: str, run_ids: tuple[str, ...], by: str, metric: str,
    labels: tuple[str, ...], margins: bool,
) -> pd.DataFrame:  # fmt: skip
    """:func:`lab.methods.by_subset` (or, with ``margins``, :func:`~lab.methods.
    margins_by_subset`) of :func:`contest_standings`."""
    from lab import methods

    build = methods.margins_by_subset if margins else methods.by_subset
    return build(contest_standings(db, contest, run_ids), by, metric, list(labels))


@st.cache_data(ttl=600, show_spinner=False, max_entries=16)
def first_round_plans(db: str, run_ids: tuple[str, ...]) -> pd.DataFrame:
    """Each episode's round-0 plan as text (:func:`core.experiment.contest_store.first_round_plans`)."""
    from core.experiment.contest_store import first_round_plans as plans

    return plans(db, run_ids)
