"""The episode store: every episode, run and training metric in one DuckDB file.

Producers log through :class:`RunLogger` (never blocking on the database); the lab
reads through :mod:`core.store.queries`; the CLI's ``runs``/``sql``/``export``/``repair`` are in
:mod:`core.store.commands`. Design (live reading, crash safety): docs/store.md.
"""

from core.store.db import open_store, read_session, write_session
from core.store.engine import (
    DEFAULT_DB,
    ENV_VAR,
    StoreBusy,
    StoreDamaged,
    StoreReadOnly,
    StoreUnwritable,
    resolve_db,
)
from core.store.queries import (
    EpisodeFilter,
    LoadedEpisode,
    RunInfo,
    get_run,
    last_episode,
    load_episode,
    runs_to_resume,
)
from core.store.writer import LoggerConfig, RunLogger, redact_config

__all__ = [
    "DEFAULT_DB",
    "ENV_VAR",
    "EpisodeFilter",
    "LoadedEpisode",
    "LoggerConfig",
    "RunInfo",
    "RunLogger",
    "StoreBusy",
    "StoreDamaged",
    "StoreReadOnly",
    "StoreUnwritable",
    "get_run",
    "last_episode",
    "load_episode",
    "open_store",
    "read_session",
    "redact_config",
    "resolve_db",
    "runs_to_resume",
    "write_session",
]
