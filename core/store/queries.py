"""The lab's questions to the store, as functions: no SQL strings outside this package.

Every function takes the database path first (``None`` = the default, see
:func:`core.store.engine.resolve_db`), opens a short read session (which includes
episodes still in a live run's spool) and returns plain data: an :class:`EpisodeRecord`,
a :class:`RunInfo` or a pandas DataFrame ready for Plotly / ``st.dataframe``. Cache the
results in the UI (``st.cache_data`` with a short TTL); the functions hold no state.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import duckdb
import pandas as pd

from core.actions import ACTION_NAMES
from core.records import DECISION_AGENT, AgentStep, EpisodeRecord, LLMCall, Message, RoundRecord
from core.store.db import read_session
from core.store.spool import failures_from_rows

Db = str | os.PathLike[str] | None

GROUP_COLUMNS = (
    "run_id",
    "policy",
    "benchmark",
    "difficulty",
    "domain",
    "backend",
    "model",
    "n_failed",
)
"""Episode columns that :func:`aggregate` may group by."""


@dataclass
class EpisodeFilter:
    """Which episodes a listing or an aggregate looks at (``None`` = no restriction)."""

    run_ids: Sequence[str] | None = None
    """Only these runs."""
    benchmark: str | None = None
    """Only this benchmark."""
    policy: str | None = None
    """Only this policy or fixed topology."""
    correct: bool | None = None
    """Only right (True) or wrong (False) team answers."""
    with_failures: bool | None = None
    """Only episodes with (True) or without (False) injected failures."""
    difficulty: int | None = None
    """Only this task difficulty."""
    domain: str | None = None
    """Only this domain (math, code, mc)."""
    from_episode: int | None = None
    """Only episodes with index >= this (to page through a long run)."""
    text: str | None = None
    """Only episodes whose task id or question contains this (case-insensitive)."""

    def where(self, alias: str = "e") -> tuple[str, list[Any]]:
        """A SQL ``WHERE`` clause over episodes aliased ``alias``, and its parameters."""
        parts, params = [], []
        if self.run_ids is not None:
            parts.append(f"list_contains(?, {alias}.run_id)")
            params.append(list(self.run_ids))
        for col in ("benchmark", "policy", "correct", "difficulty", "domain"):
            value = getattr(self, col)
            if value is not None:
                parts.append(f"{alias}.{col} = ?")
                params.append(value)
        if self.with_failures is not None:
            parts.append(f"{alias}.n_failed {'>' if self.with_failures else '='} 0")
        if self.from_episode is not None:
            parts.append(f"{alias}.episode >= ?")
            params.append(self.from_episode)
        if self.text:
            # contains(), not LIKE: a user's % or _ is text, not a wildcard.
            parts.append(
                f"(contains(lower({alias}.task_id), ?) OR contains(lower({alias}.question), ?))"
            )
            params += [self.text.lower()] * 2
        return ("WHERE " + " AND ".join(parts)) if parts else "", params


@dataclass
class LoadedEpisode:
    """One stored episode: its ids and the record, exactly as it was logged."""

    run_id: str
    episode: int
    created_at: datetime
    record: EpisodeRecord


@dataclass
class RunInfo:
    """A run's row, with its config parsed, and how many episodes it has."""

    id: str
    kind: str
    status: str
    config: dict[str, Any]
    backend: str
    model: str
    policy: str
    benchmark: str
    seed: int
    started_at: datetime
    ended_at: datetime | None
    pid: int | None
    host: str | None
    checkpoint: str | None
    """Path of the last checkpoint, or None."""
    checkpoint_episode: int | None
    """Index of the last episode the checkpoint includes; resume continues after it."""
    last_episode: int | None
    """Index of the last logged episode."""
    message: str | None
    episodes: int = 0
    """Episodes stored for the run."""


# ------------------------------------------------------------------ episodes


def load_episode(db: Db, run_id: str, episode: int) -> LoadedEpisode | None:
    """The episode with every round, step, message and call; None if there is none."""
    with read_session(db) as cur:
        return load_episode_from(cur, run_id, episode)


def load_episode_from(
    cur: duckdb.DuckDBPyConnection, run_id: str, episode: int
) -> LoadedEpisode | None:
    """:func:`load_episode` on an open session (to load several in one session)."""
    key = [run_id, episode]
    head = cur.execute(
        "SELECT task_id, benchmark, domain, difficulty, question, ground_truth, roles, policy, "
        "seed, team_answer, score, reward, failures, backend, model, created_at, pass_through "
        "FROM episodes WHERE run_id = ? AND episode = ?",
        key,
    ).fetchone()
    if head is None:
        return None
    (task_id, benchmark, domain, difficulty, question, truth, roles, policy, seed, answer) = head[
        :10
    ]
    score, reward, failures, backend, model, created_at, pass_through = head[10:]
    steps_by_round: dict[int, list[AgentStep]] = defaultdict(list)
    decision = None
    for row in cur.execute(
        "SELECT agent, role, round, action, alive, fault, answer, confidence, correct, text, "
        "prompt_tokens, completion_tokens, read_from, agreement, verified, q_values, greedy, "
        "epsilon FROM agent_steps WHERE run_id = ? AND episode = ? ORDER BY round, seq",
        key,
    ).fetchall():
        step = AgentStep(*row)
        if step.agent == DECISION_AGENT:
            decision = step
        else:
            steps_by_round[step.round].append(step)
    messages_by_round: dict[int, list[Message]] = defaultdict(list)
    for row in cur.execute(
        "SELECT src, dst, round, text, answer, confidence, tokens FROM messages "
        "WHERE run_id = ? AND episode = ? ORDER BY round, seq",
        key,
    ).fetchall():
        messages_by_round[row[2]].append(Message(*row))
    rounds = [
        RoundRecord(
            round=r,
            edges=[(e["src"], e["dst"]) for e in edges],
            dropped_edges=[(e["src"], e["dst"]) for e in dropped],
            layers=layers,
            steps=steps_by_round.get(r, []),
            messages=messages_by_round.get(r, []),
            q_tot=q_tot,
            mixer_weights=weights,
            credit=credit,
        )
        for r, edges, dropped, layers, q_tot, weights, credit in cur.execute(
            "SELECT round, edges, dropped_edges, layers, q_tot, mixer_weights, credit "
            "FROM rounds WHERE run_id = ? AND episode = ? ORDER BY round",
            key,
        ).fetchall()
    ]
    calls = [
        LLMCall(*row, prompt=None if messages is None else json.loads(messages))
        for *row, messages in cur.execute(
            "SELECT c.agent, c.round, c.prompt_hash, c.prompt_tokens, c.completion_tokens, "
            "c.usage_reported, c.latency_s, c.retries, c.cache_hit, c.error, p.messages "
            "FROM llm_calls c LEFT JOIN prompts p ON p.messages_hash = c.messages_hash "
            "WHERE c.run_id = ? AND c.episode = ? ORDER BY c.seq",
            key,
        ).fetchall()
    ]
    record = EpisodeRecord(
        task_id=task_id,
        benchmark=benchmark,
        domain=domain,
        difficulty=difficulty,
        question=question,
        ground_truth=truth,
        roles=roles,
        policy=policy,
        seed=seed,
        rounds=rounds,
        decision=decision,
        team_answer=answer,
        score=score,
        reward=reward,
        failures=failures_from_rows(failures),
        calls=calls,
        backend=backend,
        model=model,
        pass_through=pass_through,
    )
    return LoadedEpisode(run_id, episode, created_at, record)


EPISODE_ORDERS = ("episode", "tokens", "reward", "difficulty")
"""Columns :func:`list_episodes` can sort by."""


def list_episodes(
    db: Db,
    filters: EpisodeFilter | None = None,
    *,
    limit: int = 500,
    offset: int = 0,
    order_by: str = "episode",
    descending: bool = False,
) -> pd.DataFrame:
    """Episode headlines, newest run first, then by ``order_by`` (then episode index)."""
    if order_by not in EPISODE_ORDERS:
        raise ValueError(f"order_by must be one of {EPISODE_ORDERS}, got {order_by!r}")
    where, params = (filters or EpisodeFilter()).where()
    order = f"e.{order_by} {'DESC' if descending else 'ASC'}"
    with read_session(db) as cur:
        return cur.execute(
            "SELECT e.run_id, e.episode, e.task_id, e.benchmark, e.domain, e.difficulty, "
            "e.policy, e.correct, e.score, e.reward, e.tokens, e.n_agents, e.n_rounds, "
            "e.n_failed, e.team_answer, e.ground_truth, e.created_at "
            f"FROM episodes e {where} ORDER BY e.run_id DESC, {order}, e.episode "
            "LIMIT ? OFFSET ?",
            [*params, limit, offset],
        ).df()


def episode_rank(
    db: Db,
    filters: EpisodeFilter,
    episode: int,
    *,
    order_by: str = "episode",
    descending: bool = False,
) -> int | None:
    """Where episode ``episode`` stands (0 = first) in :func:`list_episodes` of one run with
    these filters and this order; None when it does not match them (or does not exist)."""
    if order_by not in EPISODE_ORDERS:
        raise ValueError(f"order_by must be one of {EPISODE_ORDERS}, got {order_by!r}")
    if filters.run_ids is None or len(filters.run_ids) != 1:
        raise ValueError("episode_rank ranks the episodes of exactly one run")
    where, params = filters.where()
    order = f"e.{order_by} {'DESC' if descending else 'ASC'}, e.episode"
    with read_session(db) as cur:
        row = cur.execute(
            f"SELECT pos FROM (SELECT e.episode, row_number() OVER (ORDER BY {order}) - 1 AS pos "
            f"FROM episodes e {where}) WHERE episode = ?",
            [*params, episode],
        ).fetchone()
    return None if row is None else int(row[0])


def count_episodes(db: Db, filters: EpisodeFilter | None = None) -> int:
    where, params = (filters or EpisodeFilter()).where()
    with read_session(db) as cur:
        return cur.execute(f"SELECT count(*) FROM episodes e {where}", params).fetchone()[0]


def distinct_values(db: Db, column: str) -> list[Any]:
    """The values an episode column takes (for filter widgets), sorted."""
    if column not in GROUP_COLUMNS:
        raise ValueError(f"column must be one of {GROUP_COLUMNS}, got {column!r}")
    with read_session(db) as cur:
        rows = cur.execute(f"SELECT DISTINCT {column} FROM episodes ORDER BY 1").fetchall()
    return [r[0] for r in rows]


# ------------------------------------------------------------------ runs


_RUN_HEADLINES = """
SELECT *, coalesce(status <> 'running' AND episodes < planned, false) AS incomplete FROM (
SELECT r.id, r.kind, r.status, r.policy, r.benchmark, r.backend, r.model, r.seed, r.pid,
       r.started_at, r.ended_at, r.last_episode, r.checkpoint, r.checkpoint_episode,
       count(e.episode) AS episodes, avg(e.correct::DOUBLE) AS accuracy,
       avg(e.tokens) AS mean_tokens, avg(e.reward) AS mean_reward,
       TRY_CAST(json_extract_string(r.config, '$.team.token_weight') AS DOUBLE) AS token_weight,
       json_extract_string(r.config, '$.team.token_penalty') AS token_penalty,
       CASE WHEN json_extract(r.config, '$.team') IS NULL THEN NULL
            ELSE coalesce(json_extract_string(r.config, '$.team.idle'), 'call') END AS idle,
       coalesce(TRY_CAST(json_extract_string(r.config, '$.eval.episodes') AS BIGINT),
                TRY_CAST(json_extract_string(r.config, '$.train.episodes') AS BIGINT)) AS planned,
       json_extract_string(r.config, '$.sandbox') AS sandbox,
       b.budget_tokens, b.budget_calls, b.spent_tokens, b.spent_calls
FROM runs r LEFT JOIN episodes e ON e.run_id = r.id
LEFT JOIN ({budgets}) b ON b.id = r.id
{where}
GROUP BY ALL) ORDER BY started_at DESC
"""
_RUN_BUDGETS = """
WITH caps AS (
  SELECT id,
         TRY_CAST(coalesce(json_extract_string(config, '$.budget.tokens'),
                           json_extract_string(config, '$.finetune.budget.tokens')) AS BIGINT)
           AS budget_tokens,
         TRY_CAST(coalesce(json_extract_string(config, '$.budget.calls'),
                           json_extract_string(config, '$.finetune.budget.calls')) AS BIGINT)
           AS budget_calls
  FROM runs)
SELECT caps.*, coalesce(sum(c.prompt_tokens + c.completion_tokens), 0) AS spent_tokens,
       count(c.run_id) FILTER (WHERE NOT c.cache_hit) AS spent_calls
FROM caps LEFT JOIN llm_calls c ON c.run_id = caps.id
WHERE caps.budget_tokens IS NOT NULL OR caps.budget_calls IS NOT NULL
GROUP BY ALL
"""
"""A run's budget (``config["budget"]``, or ``config["finetune"]["budget"]`` for a
fine-tune) and what its logged calls spent against it: tokens, and calls not served from
the cache (:func:`run_spend`). Runs without a budget have no row."""


def list_runs(db: Db, *, kind: str | None = None, status: str | None = None) -> pd.DataFrame:
    """Runs with their headline figures (episodes, accuracy, mean tokens, mean reward) and
    the reward's token options from ``config["team"]`` (NULL for runs without them), and the
    idle rule (``call`` for a team run logged before the rule existed, as
    :func:`core.team.options.options_from_dict` reads it), and the sandbox its generated code
    ran in (``bwrap``, ``process``, ``none``; NULL for runs logged before it was recorded).
    ``planned`` is the episodes the run set out to play (``config["eval"]`` or
    ``config["train"]``), and ``incomplete`` says that a run that stopped (killed,
    interrupted, failed) logged fewer: an evaluation continues with ``agentqmix eval
    --resume RUN_ID``, a training run with ``train --resume``. A run that had a budget
    has ``budget_tokens`` / ``budget_calls`` and what its logged calls spent,
    ``spent_tokens`` / ``spent_calls`` (NULL for runs without one)."""
    parts, params = [], []
    if kind is not None:
        parts.append("r.kind = ?")
        params.append(kind)
    if status is not None:
        parts.append("r.status = ?")
        params.append(status)
    where = ("WHERE " + " AND ".join(parts)) if parts else ""
    with read_session(db) as cur:
        query = _RUN_HEADLINES.format(where=where, budgets=_RUN_BUDGETS)
        return cur.execute(query, params).df()


def policy_descriptions(db: Db) -> pd.DataFrame:
    """What each learned or fixed policy of a run is, from ``config["policies"]`` (eval,
    compare and robustness runs store it; docs/baselines.md): ``run_id``, ``policy`` (the
    label its episodes carry), ``family`` (``learned`` / ``fixed``), ``method`` (``qmix``,
    ``gptswarm``, ..., or the topology), ``token_weight`` (trained at; NULL for a fixed
    topology) and ``knob`` (JSON text, e.g. ``{"prune_ratio":0.5}``) — what a chart colours
    by. Runs logged before issue 20 have none."""
    with read_session(db) as cur:
        return cur.execute(
            "SELECT r.id AS run_id, k.policy, "
            "json_extract_string(r.config, '$.policies.\"' || k.policy || '\".family') AS family, "
            "json_extract_string(r.config, '$.policies.\"' || k.policy || '\".method') AS method, "
            "TRY_CAST(json_extract_string(r.config, "
            "'$.policies.\"' || k.policy || '\".token_weight') AS DOUBLE) AS token_weight, "
            "json_extract(r.config, '$.policies.\"' || k.policy || '\".knob')::VARCHAR AS knob "
            "FROM runs r, unnest(json_keys(r.config, '$.policies')) AS k(policy) "
            "ORDER BY r.started_at, k.policy"
        ).df()


def get_run(db: Db, run_id: str) -> RunInfo | None:
    """One run (for ``train --resume``: its checkpoint and episode), or None."""
    runs = _run_infos(db, "WHERE r.id = ?", [run_id])
    return runs[0] if runs else None


def last_episode(db: Db, run_id: str) -> int | None:
    """Index of the run's last logged episode (live spool included); None if it has none.

    A resumed run numbers its episodes after this one (``RunLogger.resume`` does), so it
    keeps every episode it logged before and never uses an index twice.
    """
    with read_session(db) as cur:
        return last_episode_from(cur, run_id)


def last_episode_from(cur: duckdb.DuckDBPyConnection, run_id: str) -> int | None:
    """:func:`last_episode` on an open session (also a write session)."""
    # runs.last_episode too: it remembers an index even if its rows were lost (repair).
    return cur.execute(
        "SELECT greatest((SELECT max(episode) FROM episodes WHERE run_id = ?), "
        "(SELECT last_episode FROM runs WHERE id = ?))",
        [run_id, run_id],
    ).fetchone()[0]


def last_logged(db: Db, run_id: str) -> tuple[int | None, int | None]:
    """The run's last stored episode index (:func:`last_episode_from`) and train-metrics
    step (None when it has none): where ``train --resume`` continues numbering, so that no
    logged row is ever replaced."""
    with read_session(db) as cur:
        episode = last_episode_from(cur, run_id)
        (step,) = cur.execute(
            "SELECT max(step) FROM train_metrics WHERE run_id = ?", [run_id]
        ).fetchone()
    return episode, step


def run_spend(db: Db, run_id: str) -> tuple[int, int]:
    """What a run's logged episodes cost: (tokens, calls not served from the cache)."""
    with read_session(db) as cur:
        tokens, calls = cur.execute(
            "SELECT coalesce(sum(prompt_tokens + completion_tokens), 0), "
            "coalesce(sum(CASE WHEN cache_hit THEN 0 ELSE 1 END), 0) "
            "FROM llm_calls WHERE run_id = ?",
            [run_id],
        ).fetchone()
    return int(tokens), int(calls)


def runs_to_resume(db: Db) -> list[RunInfo]:
    """Training runs that stopped early (interrupted/failed) and have a checkpoint, newest first."""
    return _run_infos(
        db,
        "WHERE r.kind = 'train' AND r.status IN ('interrupted', 'failed') "
        "AND r.checkpoint IS NOT NULL",
        [],
    )


def _run_infos(db: Db, where: str, params: list[Any]) -> list[RunInfo]:
    with read_session(db) as cur:
        rows = cur.execute(
            "SELECT r.id, r.kind, r.status, r.config, r.backend, r.model, r.policy, r.benchmark, "
            "r.seed, r.started_at, r.ended_at, r.pid, r.host, r.checkpoint, r.checkpoint_episode, "
            "r.last_episode, r.message, "
            "(SELECT count(*) FROM episodes e WHERE e.run_id = r.id) "
            f"FROM runs r {where} ORDER BY r.started_at DESC",
            params,
        ).fetchall()
    out = []
    for row in rows:
        info = RunInfo(*row[:17], episodes=row[17])
        info.config = json.loads(info.config) if info.config else {}
        out.append(info)
    return out


# ------------------------------------------------------------------ aggregates


def aggregate(
    db: Db, by: Sequence[str] = ("policy",), filters: EpisodeFilter | None = None
) -> pd.DataFrame:
    """Accuracy, score, tokens and reward per group of episodes (e.g. by policy and benchmark)."""
    cols = _group_cols(by)
    where, params = (filters or EpisodeFilter()).where()
    with read_session(db) as cur:
        return cur.execute(
            f"SELECT {cols}, count(*) AS episodes, avg(e.correct::DOUBLE) AS accuracy, "
            "avg(e.score) AS mean_score, avg(e.tokens) AS mean_tokens, "
            "avg(e.prompt_tokens) AS mean_prompt_tokens, "
            "avg(e.completion_tokens) AS mean_completion_tokens, avg(e.reward) AS mean_reward, "
            "stddev_samp(e.reward) AS std_reward, stddev_samp(e.tokens) AS std_tokens, "
            "sum(e.correct::INTEGER) AS n_correct "
            f"FROM episodes e {where} GROUP BY ALL ORDER BY ALL",
            params,
        ).df()


def task_outcomes(db: Db, filters: EpisodeFilter | None = None) -> pd.DataFrame:
    """Per task of the filtered episodes: how often it was answered right, mean tokens and
    reward, the first episode that played it (for a link) and its first team answer — one
    side of a run diff. Columns: ``task_id, benchmark, question, ground_truth, episodes,
    n_correct, accuracy, mean_tokens, mean_reward, episode, team_answer``."""
    where, params = (filters or EpisodeFilter()).where()
    with read_session(db) as cur:
        return cur.execute(
            "SELECT e.task_id, any_value(e.benchmark) AS benchmark, "
            "any_value(e.question) AS question, any_value(e.ground_truth) AS ground_truth, "
            "count(*) AS episodes, sum(e.correct::INTEGER) AS n_correct, "
            "avg(e.correct::DOUBLE) AS accuracy, avg(e.tokens) AS mean_tokens, "
            "avg(e.reward) AS mean_reward, min(e.episode) AS episode, "
            "arg_min(e.team_answer, e.episode) AS team_answer "
            f"FROM episodes e {where} GROUP BY e.task_id ORDER BY e.task_id",
            params,
        ).df()


def task_players(db: Db, task_id: str, filters: EpisodeFilter | None = None) -> pd.DataFrame:
    """Which runs and policies played task ``task_id`` among the filtered episodes (the
    side-by-side view's partner for a task). Columns: ``run_id, policy, episodes``."""
    where, params = (filters or EpisodeFilter()).where()
    where = f"{where} AND e.task_id = ?" if where else "WHERE e.task_id = ?"
    with read_session(db) as cur:
        return cur.execute(
            "SELECT e.run_id, e.policy, count(*) AS episodes "
            f"FROM episodes e {where} GROUP BY e.run_id, e.policy ORDER BY e.run_id, e.policy",
            [*params, task_id],
        ).df()


@dataclass(frozen=True)
class EpisodeOutcome:
    """What an evaluation's figures need of one logged episode."""

    episode: int
    score: float
    tokens: int
    reward: float


def episode_outcomes(db: Db, run_id: str) -> list[EpisodeOutcome]:
    """Every logged episode of a run (live spool included), in order: its score, tokens
    and reward."""
    with read_session(db) as cur:
        rows = cur.execute(
            "SELECT episode, score, tokens, reward FROM episodes WHERE run_id = ? ORDER BY episode",
            [run_id],
        ).fetchall()
    return [EpisodeOutcome(int(e), float(s), int(t), float(r)) for e, s, t, r in rows]


def summarize_ranges(db: Db, run_id: str, ranges: Sequence[tuple[int, int]]) -> list[dict]:
    """What :func:`core.team.summary.summarize_records` says of episodes ``lo..hi-1`` of a
    run, for each ``(lo, hi)`` in ``ranges``: episodes, calls, failed calls, accuracy (mean
    score), mean tokens, mean reward and action counts per round (acting agents only).

    An evaluation resumed in another process (``eval --resume``) reports its figures from
    here, over every episode the run logged, not only those played since.
    """
    bins = [{"g": g, "lo": lo, "hi": hi} for g, (lo, hi) in enumerate(ranges)]
    binned = (
        "SELECT b.g, e.episode, e.score, e.tokens, e.reward, e.n_rounds, e.pass_through "
        "FROM episodes e "
        "JOIN (SELECT unnest(?::STRUCT(g INTEGER, lo INTEGER, hi INTEGER)[], recursive := true)) b "
        "ON e.episode >= b.lo AND e.episode < b.hi WHERE e.run_id = ?"
    )
    with read_session(db) as cur:
        heads = cur.execute(
            f"WITH e AS ({binned}), c AS (SELECT episode, count(*) AS calls, "
            "count(*) FILTER (WHERE error IS NOT NULL) AS failed FROM llm_calls "
            "WHERE run_id = ? GROUP BY episode) "
            "SELECT g, count(*), sum(coalesce(c.calls, 0)), sum(coalesce(c.failed, 0)), "
            "avg(score), avg(tokens), avg(reward), max(n_rounds), "
            "count(*) FILTER (WHERE pass_through = 'single'), "
            "count(*) FILTER (WHERE pass_through = 'unanimous') "
            "FROM e LEFT JOIN c USING (episode) GROUP BY g",
            [bins, run_id, run_id],
        ).fetchall()
        actions = cur.execute(
            f"WITH e AS ({binned}) SELECT g, s.round, s.action, count(*) FROM agent_steps s "
            "JOIN e USING (episode) WHERE s.run_id = ? AND s.agent <> ? AND s.alive "
            "AND s.fault IS DISTINCT FROM 'inactive' GROUP BY ALL",
            [bins, run_id, run_id, DECISION_AGENT],
        ).fetchall()
    out = [
        {"episodes": 0, "calls": 0, "failed_calls": 0, "accuracy": 0.0, "mean_tokens": 0.0,
         "mean_reward": 0.0, "action_counts_per_round": [],
         "decisions_passed_through": {"single": 0, "unanimous": 0}}
        for _ in ranges
    ]  # fmt: skip
    for g, n, calls, failed, accuracy, tokens, reward, n_rounds, single, unanimous in heads:
        out[g].update(
            episodes=n, calls=int(calls), failed_calls=int(failed), accuracy=float(accuracy),
            mean_tokens=float(tokens), mean_reward=float(reward),
            action_counts_per_round=[dict.fromkeys(ACTION_NAMES, 0) for _ in range(n_rounds)],
            decisions_passed_through={"single": int(single), "unanimous": int(unanimous)},
        )  # fmt: skip
    for g, round_, action, n in actions:
        counts = out[g]["action_counts_per_round"]
        if 0 <= round_ < len(counts) and 0 <= action < len(ACTION_NAMES):
            counts[round_][ACTION_NAMES[action]] += n
    return out


def robustness(db: Db, filters: EpisodeFilter | None = None) -> pd.DataFrame:
    """Accuracy, reward and tokens by policy and number of failed agents."""
    return aggregate(db, ("policy", "n_failed"), filters)


def _group_cols(by: Sequence[str]) -> str:
    if not by:
        raise ValueError("group by at least one column")
    bad = [c for c in by if c not in GROUP_COLUMNS]
    if bad:
        raise ValueError(f"cannot group by {bad}; choose from {GROUP_COLUMNS}")
    return ", ".join(f"e.{c}" for c in by)


def action_distribution(
    db: Db, by: str = "difficulty", filters: EpisodeFilter | None = None
) -> pd.DataFrame:
    """How often each action was chosen, per task difficulty / round / policy / benchmark.

    Counts live agents' choices (not the decision agent); ``share`` sums to 1 per group.
    """
    key = {
        "difficulty": "e.difficulty",
        "round": "s.round",
        "policy": "e.policy",
        "benchmark": "e.benchmark",
    }
    if by not in key:
        raise ValueError(f"by must be one of {sorted(key)}, got {by!r}")
    flt = filters or EpisodeFilter()
    # Steps carry run_id and episode themselves: skip the join (a third of the cost on a
    # large store) unless the grouping or a filter needs an episode column.
    on_steps = by == "round" and all(getattr(flt, c) is None for c in _EPISODE_ONLY_FILTERS)
    where, params = flt.where("s" if on_steps else "e")
    where = (where + " AND" if where else "WHERE") + " s.agent >= 0 AND s.alive"
    source = (
        "agent_steps s" if on_steps else "agent_steps s JOIN episodes e USING (run_id, episode)"
    )
    with read_session(db) as cur:
        df = cur.execute(
            f"SELECT {key[by]} AS {by}, s.action, count(*) AS count FROM {source} {where} "
            "GROUP BY ALL ORDER BY ALL",
            params,
        ).df()
    return _with_shares(df, by)


_EPISODE_ONLY_FILTERS = (
    "benchmark", "policy", "correct", "with_failures", "difficulty", "domain", "text",
)  # fmt: skip
"""EpisodeFilter fields that only the episodes table has (the rest are on every table)."""


def action_mix_over_time(db: Db, run_id: str, bucket: int = 50) -> pd.DataFrame:
    """Share of each action per block of ``bucket`` episodes of one run (the policy drifting)."""
    if bucket < 1:
        raise ValueError(f"bucket must be >= 1, got {bucket}")
    with read_session(db) as cur:
        df = cur.execute(
            "SELECT (episode // ?) * ? AS episode, action, count(*) AS count FROM agent_steps "
            "WHERE run_id = ? AND agent >= 0 AND alive GROUP BY ALL ORDER BY ALL",
            [bucket, bucket, run_id],
        ).df()
    return _with_shares(df, "episode")


def _with_shares(df: pd.DataFrame, by: str) -> pd.DataFrame:
    df["action_name"] = [ACTION_NAMES[a] for a in df["action"]]
    df["share"] = df["count"] / df.groupby(by)["count"].transform("sum")
    return df


def training_curves(db: Db, run_id: str, max_points: int | None = None) -> pd.DataFrame:
    """The run's per-update metrics (loss, TD error, Q_tot, ε, moving averages) by step.

    With ``max_points``, every k-th row (and the last) so at most about that many remain:
    a chart of 100,000 points costs the browser seconds and shows nothing more.
    """
    with read_session(db) as cur:
        return cur.execute(
            _thinned("SELECT * EXCLUDE (run_id) FROM train_metrics WHERE run_id = ?", "step"),
            [run_id, _stride_param(max_points)],
        ).df()


def _stride_param(max_points: int | None) -> int:
    if max_points is not None and max_points < 2:
        raise ValueError(f"max_points must be >= 2 or None, got {max_points}")
    return max_points or 0


def _thinned(select: str, order: str) -> str:
    """``select`` ordered by ``order``, in at most about ``budget`` rows (the extra
    parameter; 0 = every row): consecutive rows in buckets of k, each bucket one row — the
    mean of each measured column, and, for ``order``, ``episode``, ``wall_time`` and the
    moving averages (``*_ma``, already over every row), the bucket's last row. A bucket's
    mean is what every one of its rows says; picking every k-th row (as before) kept one
    noisy row of k, and a curve smoothed over the picks changed shape as k grew."""
    last = f"c IN ('{order}', 'episode', 'wall_time') OR ends_with(c, '_ma')"
    return (
        f"WITH c AS ({select}), n AS (SELECT ?::BIGINT AS budget), "
        f"t AS (SELECT c.*, row_number() OVER (ORDER BY {order}) - 1 AS _i, "
        "count(*) OVER () AS _n FROM c), "
        "b AS (SELECT t.* EXCLUDE (_i, _n), CASE WHEN n.budget = 0 THEN _i "
        "ELSE _i // greatest(1, ceil(_n / n.budget)::BIGINT) END AS _b FROM t, n) "
        f"SELECT arg_max(COLUMNS(lambda c: {last}), {order}), "
        f"avg(COLUMNS(lambda c: NOT ({last}) AND c != '_b')::DOUBLE) "
        f"FROM b GROUP BY _b ORDER BY {order}"
    )


def episode_curves(
    db: Db, run_id: str, window: int = 50, max_points: int | None = None
) -> pd.DataFrame:
    """Per-episode reward, accuracy and tokens of one run, with moving averages over ``window``.

    The averages use every episode; ``max_points`` then thins the rows as in
    :func:`training_curves`.
    """
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    frame = f"ROWS BETWEEN {int(window) - 1} PRECEDING AND CURRENT ROW"
    select = (
        "SELECT episode, reward, correct, tokens, n_failed, "
        f"avg(reward) OVER (ORDER BY episode {frame}) AS reward_ma, "
        f"avg(correct::DOUBLE) OVER (ORDER BY episode {frame}) AS accuracy_ma, "
        f"avg(tokens) OVER (ORDER BY episode {frame}) AS tokens_ma "
        "FROM episodes WHERE run_id = ?"
    )
    with read_session(db) as cur:
        return cur.execute(_thinned(select, "episode"), [run_id, _stride_param(max_points)]).df()


# ------------------------------------------------------------------ sweeps and lab forks

_SWEEP_RULE = (
    "coalesce(json_extract_string(config, '$.sweep.pass_through'), "
    "json_extract_string(config, '$.team.pass_through'))"
)
"""A sweep run's decision rule: its point's (``config["sweep"]``), else the team's (a run
stored before the rule was an axis of the sweep); NULL for a run older than the rule, which
played the paper's."""

_RUN_TAGS = f"""
SELECT id,
       json_extract_string(config, '$.sweep.id') AS sweep_id,
       TRY_CAST(json_extract_string(config, '$.sweep.token_weight') AS DOUBLE) AS sweep_token_weight,
       TRY_CAST(json_extract_string(config, '$.sweep.seed') AS BIGINT) AS sweep_seed,
       {_SWEEP_RULE} AS sweep_pass_through,
       json_extract_string(config, '$.fork.run') AS fork_run,
       TRY_CAST(json_extract_string(config, '$.fork.episode') AS BIGINT) AS fork_episode,
       json_extract_string(config, '$.fork.label') AS fork_label,
       json_extract_string(config, '$.robustness.mode') AS robustness_mode,
       json_extract_string(config, '$.source_run') AS source_run
FROM runs
"""


def run_tags(db: Db) -> pd.DataFrame:
    """What a run's config says it belongs to, one row per run: its sweep
    (``config["sweep"]``: ``sweep_id``, ``sweep_token_weight``, ``sweep_seed``,
    ``sweep_pass_through``), the episode
    a lab fork was played from (``config["fork"]``: ``fork_run``, ``fork_episode``,
    ``fork_label``), a robustness run's failure mode and the training run an evaluation
    played the checkpoint of (``config["source_run"]``: ``source_run``); NULL where a run
    has none."""
    with read_session(db) as cur:
        return cur.execute(_RUN_TAGS).df()


def list_sweeps(db: Db) -> pd.DataFrame:
    """Sweeps in the store, newest first: ``sweep_id``, ``benchmark``, ``started_at`` (its
    first run), ``trials`` (learned eval runs), ``fixed`` (fixed-topology eval runs),
    ``token_weights`` (sorted list), ``seeds`` (sorted list) and ``pass_through`` (the
    decision rules its runs name, sorted; empty for runs older than the rule)."""
    with read_session(db) as cur:
        return cur.execute(
            "WITH s AS (SELECT r.*, json_extract_string(r.config, '$.sweep.id') AS sweep_id, "
            "TRY_CAST(json_extract_string(r.config, '$.sweep.token_weight') AS DOUBLE) AS w, "
            "TRY_CAST(json_extract_string(r.config, '$.sweep.seed') AS BIGINT) AS s, "
            f"{_SWEEP_RULE} AS rule FROM runs r) "
            "SELECT sweep_id, any_value(benchmark) AS benchmark, min(started_at) AS started_at, "
            "count(*) FILTER (WHERE kind = 'eval' AND w IS NOT NULL) AS trials, "
            "count(*) FILTER (WHERE kind = 'eval' AND w IS NULL) AS fixed, "
            "list_sort(list_distinct(list(w) FILTER (WHERE w IS NOT NULL))) AS token_weights, "
            "list_sort(list_distinct(list(s) FILTER (WHERE s IS NOT NULL))) AS seeds, "
            "list_sort(list_distinct(list(rule) FILTER (WHERE rule IS NOT NULL))) AS pass_through "
            "FROM s WHERE sweep_id IS NOT NULL GROUP BY sweep_id ORDER BY started_at DESC"
        ).df()


def sweep_points(db: Db, sweep_id: str) -> pd.DataFrame:
    """Every held-out point of one sweep: one row per ``eval`` run of it (a trial's learned
    policy, or a fixed topology with ``token_weight`` and ``seed`` NULL), with ``run_id``,
    ``policy`` (``qmix``, a learned-topology method or a topology), ``backend``, ``model``,
    ``token_weight``, ``seed``, ``knob`` (JSON text of the method's swept setting, e.g.
    ``{"prune_ratio":0.3}``; NULL or ``{}`` without one), ``pass_through`` (the decision rule
    it was played under; NULL for a run older than the rule), ``episodes``, ``n_correct``, ``accuracy``,
    ``mean_score``, ``mean_tokens``, ``std_tokens``, ``mean_reward``, ``std_reward`` (the
    columns :func:`lab.stats.with_intervals` reads), cheapest first."""
    with read_session(db) as cur:
        return cur.execute(
            "SELECT r.id AS run_id, r.policy, r.backend, r.model, "
            "TRY_CAST(json_extract_string(r.config, '$.sweep.token_weight') AS DOUBLE) "
            "AS token_weight, "
            "TRY_CAST(json_extract_string(r.config, '$.sweep.seed') AS BIGINT) AS seed, "
            "json_extract_string(r.config, '$.sweep.knob') AS knob, "
            f"{_SWEEP_RULE} AS pass_through, "
            "count(*) AS episodes, sum(e.correct::INTEGER) AS n_correct, "
            "avg(e.correct::DOUBLE) AS accuracy, avg(e.score) AS mean_score, "
            "avg(e.tokens) AS mean_tokens, stddev_samp(e.tokens) AS std_tokens, "
            "avg(e.reward) AS mean_reward, stddev_samp(e.reward) AS std_reward "
            "FROM runs r JOIN episodes e ON e.run_id = r.id "
            "WHERE r.kind = 'eval' AND json_extract_string(r.config, '$.sweep.id') = ? "
            "GROUP BY ALL ORDER BY mean_tokens, run_id",
            [sweep_id],
        ).df()


def sweep_runs(db: Db, sweep_id: str) -> list[RunInfo]:
    """Every run of one sweep (train and eval, finished or not: what ``sweep --resume``
    sorts into done and left to do), oldest first."""
    runs = _run_infos(db, "WHERE json_extract_string(r.config, '$.sweep.id') = ?", [sweep_id])
    return runs[::-1]
