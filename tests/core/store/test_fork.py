"""A process with the store open can fork (training forks its episode collector)."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

from core.store.engine import attached


def _use_a_store_of_its_own(path: str) -> None:
    with attached(Path(path), write=True, timeout=0) as cur:
        cur.execute("CREATE TABLE child (x INTEGER)")


def test_a_forked_child_neither_crashes_nor_shares_the_parents_engine(tmp_path: Path):
    with attached(tmp_path / "parent.duckdb", write=True, timeout=0) as cur:
        cur.execute("CREATE TABLE parent (x INTEGER)")
    child = multiprocessing.get_context("fork").Process(
        target=_use_a_store_of_its_own, args=(str(tmp_path / "child.duckdb"),)
    )
    child.start()
    child.join(60)
    assert child.exitcode == 0
    with attached(tmp_path / "child.duckdb", write=False, timeout=0) as cur:
        assert cur.execute("SELECT count(*) FROM child").fetchone() == (0,)
    with attached(tmp_path / "parent.duckdb", write=False, timeout=0) as cur:
        assert cur.execute("SELECT count(*) FROM parent").fetchone() == (0,)
