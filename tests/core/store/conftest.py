"""Shared helpers for the store tests: a producer subprocess that reports progress."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
WRITER = Path(__file__).with_name("writer_proc.py")


def spawn_writer(db: Path, episodes: int, *args: str) -> subprocess.Popen[str]:
    """Start ``writer_proc.py`` on ``db``; its stdout reports each logged episode."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, str(WRITER), str(db), str(episodes), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=env,
    )


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "store.duckdb"
