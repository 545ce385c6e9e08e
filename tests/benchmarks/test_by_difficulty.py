"""``agentqmix bench by-difficulty``: accuracy by run and difficulty from a store, counted
again here from the episodes themselves."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from benchmarks.by_difficulty import main, rows
from core.experiment.policies import wilson_interval
from tests.core.test_cli_team import query, run_json


def test_rows_count_each_level_and_the_whole_run(tmp_path: Path, capsys) -> None:
    db = tmp_path / "e.duckdb"
    run = run_json(
        "eval", "--policy", "single", "--benchmark", "arith", "--episodes", "12", "--db", str(db),
        "--json",
    )  # fmt: skip
    assert run["episodes"] == 12
    episodes = query(db, "SELECT difficulty, correct, team_answer FROM episodes")
    right, seen = Counter(), Counter(e["difficulty"] for e in episodes)
    for e in episodes:
        right[e["difficulty"]] += bool(e["correct"])
    table = rows(str(db), None)
    by_level = {r["difficulty"]: r for r in table}
    assert set(by_level) == {*seen, "all"}
    for level, n in seen.items():
        assert (by_level[level]["n"], by_level[level]["correct"]) == (n, right[level])
    whole = by_level["all"]
    assert whole["n"] == 12 and whole["correct"] == sum(right.values())
    lo, hi = wilson_interval(whole["correct"] / 12, 12)
    assert whole["wilson95"] == [round(lo, 4), round(hi, 4)]
    assert whole["unread"] == sum(e["team_answer"] is None for e in episodes)
    assert rows(str(db), ["no-such-run"]) == []


def test_a_missing_store_is_one_sentence(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["--db", str(tmp_path / "none.duckdb")])
    assert stop.value.code == 2
    assert "No episode store" in capsys.readouterr().err
