"""What a test reads back of a run's logged episodes (one query, shared by the resume tests)."""

from __future__ import annotations

from pathlib import Path

from core.store.db import read_session


def logged_episodes(db: Path, run_id: str) -> list[tuple]:
    """``(episode, task_id, reward, created_at)`` of every logged episode of ``run_id``, in order."""
    with read_session(db) as cur:
        return cur.execute(
            "SELECT episode, task_id, reward, created_at FROM episodes WHERE run_id = ? "
            "ORDER BY episode",
            [run_id],
        ).fetchall()
