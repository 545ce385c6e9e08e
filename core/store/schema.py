"""The episode store's tables: one column list drives the DuckDB DDL and the Arrow batches.

Every table that holds episode data is keyed by ``(run_id, episode)``; rows are appended
in episode order, so DuckDB's per-row-group min/max statistics (zone maps) prune a lookup
of one episode to a single row group without a secondary index (an ART index would slow
every bulk insert). Nested data uses DuckDB LIST/STRUCT types, never pickles.

The ``prompts`` table is the one table not keyed by episode: each distinct prompt a real
back-end sent is stored once, however many calls, episodes and runs sent it
(``llm_calls.messages_hash`` refers to it); see docs/store.md.

Schema changes bump :data:`SCHEMA_VERSION` and add a step to :data:`MIGRATIONS`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import duckdb
import pyarrow as pa

from core.errors import UserError

SCHEMA_VERSION = 3
"""Version written to ``meta.schema_version``; a larger number in a file means a newer program."""

_EDGE = pa.struct([("src", pa.int32()), ("dst", pa.int32())])
_FAILURE = pa.struct(
    [
        ("agent", pa.int32()),
        ("mode", pa.string()),
        ("from_round", pa.int32()),
        ("extra", pa.string()),
    ]
)


@dataclass(frozen=True)
class Column:
    """One column: its name, its DuckDB type and the Arrow type that feeds it."""

    name: str
    sql: str
    arrow: pa.DataType


def _c(name: str, sql: str) -> Column:
    return Column(name, sql, _ARROW[sql])


_ARROW: dict[str, pa.DataType] = {
    "INTEGER": pa.int32(),
    "BIGINT": pa.int64(),
    "DOUBLE": pa.float64(),
    "BOOLEAN": pa.bool_(),
    "VARCHAR": pa.string(),
    "JSON": pa.string(),
    "TIMESTAMP": pa.timestamp("us"),
    "INTEGER[]": pa.list_(pa.int32()),
    "INTEGER[][]": pa.list_(pa.list_(pa.int32())),
    "DOUBLE[]": pa.list_(pa.float64()),
    "DOUBLE[][]": pa.list_(pa.list_(pa.float64())),
    "VARCHAR[]": pa.list_(pa.string()),
    "STRUCT(src INTEGER, dst INTEGER)[]": pa.list_(_EDGE),
    "STRUCT(agent INTEGER, mode VARCHAR, from_round INTEGER, extra VARCHAR)[]": pa.list_(_FAILURE),
}
EDGES_SQL = "STRUCT(src INTEGER, dst INTEGER)[]"
"""Type of the edge-list columns of ``rounds`` (``edges``, ``dropped_edges``)."""
_FAILURES = "STRUCT(agent INTEGER, mode VARCHAR, from_round INTEGER, extra VARCHAR)[]"

_KEY = [_c("run_id", "VARCHAR"), _c("episode", "INTEGER")]

TABLES: dict[str, list[Column]] = {
    "runs": [
        _c("id", "VARCHAR"),
        _c("kind", "VARCHAR"),
        _c("config", "JSON"),
        _c("backend", "VARCHAR"),
        _c("model", "VARCHAR"),
        _c("policy", "VARCHAR"),
        _c("benchmark", "VARCHAR"),
        _c("seed", "BIGINT"),
        _c("status", "VARCHAR"),
        _c("started_at", "TIMESTAMP"),
        _c("ended_at", "TIMESTAMP"),
        _c("pid", "INTEGER"),
        _c("host", "VARCHAR"),
        _c("checkpoint", "VARCHAR"),
        _c("checkpoint_episode", "INTEGER"),
        _c("last_episode", "INTEGER"),
        _c("message", "VARCHAR"),
    ],
    "episodes": [
        *_KEY,
        _c("task_id", "VARCHAR"),
        _c("benchmark", "VARCHAR"),
        _c("domain", "VARCHAR"),
        _c("difficulty", "INTEGER"),
        _c("question", "VARCHAR"),
        _c("ground_truth", "VARCHAR"),
        _c("team_answer", "VARCHAR"),
        _c("score", "DOUBLE"),
        _c("correct", "BOOLEAN"),
        _c("reward", "DOUBLE"),
        _c("prompt_tokens", "BIGINT"),
        _c("completion_tokens", "BIGINT"),
        _c("tokens", "BIGINT"),
        _c("n_agents", "INTEGER"),
        _c("n_rounds", "INTEGER"),
        _c("n_failed", "INTEGER"),
        _c("failures", _FAILURES),
        _c("roles", "VARCHAR[]"),
        _c("policy", "VARCHAR"),
        _c("seed", "BIGINT"),
        _c("backend", "VARCHAR"),
        _c("model", "VARCHAR"),
        _c("created_at", "TIMESTAMP"),
        _c("pass_through", "VARCHAR"),
    ],
    "rounds": [
        *_KEY,
        _c("round", "INTEGER"),
        _c("edges", EDGES_SQL),
        _c("dropped_edges", EDGES_SQL),
        _c("layers", "INTEGER[][]"),
        _c("q_tot", "DOUBLE"),
        _c("mixer_weights", "DOUBLE[][]"),
        _c("credit", "DOUBLE[]"),
    ],
    "agent_steps": [
        *_KEY,
        _c("round", "INTEGER"),
        _c("seq", "INTEGER"),
        _c("agent", "INTEGER"),
        _c("role", "VARCHAR"),
        _c("alive", "BOOLEAN"),
        _c("fault", "VARCHAR"),
        _c("action", "INTEGER"),
        _c("q_values", "DOUBLE[]"),
        _c("greedy", "BOOLEAN"),
        _c("epsilon", "DOUBLE"),
        _c("answer", "VARCHAR"),
        _c("confidence", "DOUBLE"),
        _c("correct", "BOOLEAN"),
        _c("text", "VARCHAR"),
        _c("prompt_tokens", "INTEGER"),
        _c("completion_tokens", "INTEGER"),
        _c("read_from", "INTEGER[]"),
        _c("agreement", "DOUBLE"),
        _c("verified", "BOOLEAN"),
    ],
    "messages": [
        *_KEY,
        _c("round", "INTEGER"),
        _c("seq", "INTEGER"),
        _c("src", "INTEGER"),
        _c("dst", "INTEGER"),
        _c("text", "VARCHAR"),
        _c("answer", "VARCHAR"),
        _c("confidence", "DOUBLE"),
        _c("tokens", "INTEGER"),
    ],
    "llm_calls": [
        *_KEY,
        _c("seq", "INTEGER"),
        _c("agent", "INTEGER"),
        _c("round", "INTEGER"),
        _c("prompt_hash", "VARCHAR"),
        _c("prompt_tokens", "INTEGER"),
        _c("completion_tokens", "INTEGER"),
        _c("usage_reported", "BOOLEAN"),
        _c("latency_s", "DOUBLE"),
        _c("retries", "INTEGER"),
        _c("cache_hit", "BOOLEAN"),
        _c("error", "VARCHAR"),
        _c("messages_hash", "VARCHAR"),
    ],
    "prompts": [
        _c("messages_hash", "VARCHAR"),
        _c("messages", "JSON"),
        _c("n_chars", "BIGINT"),
        _c("first_run_id", "VARCHAR"),
    ],
    "train_metrics": [
        _c("run_id", "VARCHAR"),
        _c("step", "BIGINT"),
        _c("episode", "INTEGER"),
        _c("loss", "DOUBLE"),
        _c("td_error", "DOUBLE"),
        _c("q_tot_mean", "DOUBLE"),
        _c("epsilon", "DOUBLE"),
        _c("reward_ma", "DOUBLE"),
        _c("accuracy_ma", "DOUBLE"),
        _c("tokens_ma", "DOUBLE"),
        _c("grad_norm", "DOUBLE"),
        _c("wall_time", "DOUBLE"),
    ],
}
"""Data tables in dependency order (``runs`` first)."""

EPISODE_TABLES = ("episodes", "rounds", "agent_steps", "messages", "llm_calls")
"""Tables keyed by ``(run_id, episode)``: what one logged episode fills."""

RUN_TABLES = (*EPISODE_TABLES, "train_metrics")
"""Tables that hold a ``run_id`` column (all but ``runs``)."""

ARROW_SCHEMAS: dict[str, pa.Schema] = {
    name: pa.schema([pa.field(c.name, c.arrow) for c in cols]) for name, cols in TABLES.items()
}


def _spool_type(t: pa.DataType) -> pa.DataType:
    # Spool lines carry timestamps as epoch microseconds (exact, and no parsing of text).
    return pa.int64() if pa.types.is_timestamp(t) else t


SPOOL_ROW_TYPES: dict[str, pa.StructType] = {
    name: pa.struct([pa.field(f.name, _spool_type(f.type)) for f in schema])
    for name, schema in ARROW_SCHEMAS.items()
}
"""One row of each table with timestamps as epoch microseconds, as a ``run`` spool event
spells the run's row (episode lines are columnar, see :mod:`core.store.spool`)."""

_INTERNAL_DDL = [
    "CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR)",
    # How far each spool segment has been ingested; updated in the same transaction as the rows.
    "CREATE TABLE spool_progress (file VARCHAR PRIMARY KEY, run_id VARCHAR, byte_offset BIGINT)",
]


_PRIMARY_KEYS = {"runs": "id", "prompts": "messages_hash"}
"""The only indexed tables: few rows each, looked up by key (episode tables are not indexed)."""


def _table_ddl(name: str) -> str:
    cols = ", ".join(f"{c.name} {c.sql}" for c in TABLES[name])
    key = f", PRIMARY KEY ({_PRIMARY_KEYS[name]})" if name in _PRIMARY_KEYS else ""
    return f"CREATE TABLE {name} ({cols}{key})"


_TABLES_SQL = "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database()"


def _add_prompts(cur: duckdb.DuckDBPyConnection) -> None:
    """1 -> 2: the exact prompts of real back-ends (calls logged before have none)."""
    cur.execute("ALTER TABLE llm_calls ADD COLUMN messages_hash VARCHAR")
    cur.execute(_table_ddl("prompts"))


def _add_pass_through(cur: duckdb.DuckDBPyConnection) -> None:
    """2 -> 3: why the decision agent made no call (episodes logged before: unknown, NULL)."""
    cur.execute("ALTER TABLE episodes ADD COLUMN pass_through VARCHAR")


MIGRATIONS: dict[int, Callable[[duckdb.DuckDBPyConnection], None]] = {
    1: _add_prompts,
    2: _add_pass_through,
}
"""``MIGRATIONS[v]`` upgrades a version-``v`` store to ``v + 1`` inside one transaction."""


def ensure_schema(cur: duckdb.DuckDBPyConnection, path: str) -> None:
    """Create the tables of an empty store, or migrate an older one, on a read-write cursor."""
    tables = {r[0] for r in cur.execute(_TABLES_SQL).fetchall()}
    if not tables:
        cur.execute("BEGIN")
        for ddl in _INTERNAL_DDL:
            cur.execute(ddl)
        for name in TABLES:
            cur.execute(_table_ddl(name))
        cur.execute("INSERT INTO meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)])
        cur.execute("COMMIT")
        return
    version = stored_version(cur, path, tables)
    while version < SCHEMA_VERSION:
        cur.execute("BEGIN")
        MIGRATIONS[version](cur)
        version += 1
        cur.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [str(version)])
        cur.execute("COMMIT")


def stored_version(
    cur: duckdb.DuckDBPyConnection, path: str, tables: set[str] | None = None
) -> int:
    """The store's schema version; UserError if it is newer than this program or not a store."""
    if tables is None:
        tables = {r[0] for r in cur.execute(_TABLES_SQL).fetchall()}
    if "meta" not in tables:
        raise UserError(f"{path} is a DuckDB database but not an Agent Q-Mix episode store.")
    row = cur.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    version = int(row[0]) if row else 0
    if version > SCHEMA_VERSION:
        raise UserError(
            f"{path} was written by a newer Agent Q-Mix (store schema {version}, this program "
            f"reads up to {SCHEMA_VERSION}); upgrade agentqmix to open it."
        )
    return version
