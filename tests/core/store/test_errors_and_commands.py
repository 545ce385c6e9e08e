"""Bad database files give one-sentence UserErrors; runs/sql/export/delete work."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from core.errors import UserError
from core.store import RunLogger, get_run, open_store, resolve_db
from core.store.commands import delete_run, export_run, print_table, runs, sql
from core.store.queries import count_episodes, list_runs
from core.store.schema import SCHEMA_VERSION
from core.store.synthetic import synthetic_episode


def _one_sentence(err: pytest.ExceptionInfo[UserError]) -> str:
    text = str(err.value)
    assert "\n" not in text and text.endswith(".")
    return text


def test_newer_schema_version_is_refused(db: Path) -> None:
    open_store(db)
    con = duckdb.connect(str(db))
    con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [str(SCHEMA_VERSION + 1)])
    con.close()
    with pytest.raises(UserError) as err:
        list_runs(db)
    assert "newer" in _one_sentence(err)
    with pytest.raises(UserError):
        RunLogger(db, "train")


def test_not_a_database(tmp_path: Path) -> None:
    bad = tmp_path / "notes.duckdb"
    bad.write_text("these are my notes, not a database\n" * 10)
    with pytest.raises(UserError) as err:
        open_store(bad)
    assert "not a DuckDB database" in _one_sentence(err)
    with pytest.raises(UserError):
        list_runs(bad)
    foreign = tmp_path / "other.duckdb"
    con = duckdb.connect(str(foreign))
    con.execute("CREATE TABLE t (x INTEGER)")
    con.close()
    with pytest.raises(UserError) as err:
        list_runs(foreign)
    assert "not an Agent Q-Mix episode store" in _one_sentence(err)
    with pytest.raises(UserError):
        open_store(tmp_path)
    with pytest.raises(UserError):
        runs(tmp_path / "missing.duckdb")


def test_default_path_and_env_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AGENTQMIX_DB", raising=False)
    assert resolve_db(None) == tmp_path / "agentqmix.duckdb"
    monkeypatch.setenv("AGENTQMIX_DB", str(tmp_path / "x.duckdb"))
    assert resolve_db(None) == tmp_path / "x.duckdb"
    assert resolve_db("y.duckdb") == tmp_path / "y.duckdb"


def _two_runs(db: Path) -> tuple[str, str]:
    with RunLogger(db, "train", {"lr": 0.1}, policy="qmix") as a:
        a.log_episodes(synthetic_episode(i) for i in range(6))
        a.log_metrics([{"step": 0, "episode": 5, "loss": 0.5}])
    with RunLogger(db, "eval", policy="star") as b:
        b.log_episodes(synthetic_episode(i) for i in range(3))
    return a.run_id, b.run_id


def test_runs_sql_export_delete(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = _two_runs(db)
    table = runs(db)
    recs = {r["id"]: r for r in table.records()}
    assert recs[a]["episodes"] == 6 and recs[b]["episodes"] == 3
    assert recs[a]["accuracy"] == pytest.approx(
        sum(synthetic_episode(i).score for i in range(6)) / 6
    )
    assert recs[a]["status"] == "finished"
    # The reward's token options travel in config["team"]; runs shows them (None when absent).
    assert recs[a]["token_weight"] is None and recs[b]["token_penalty"] is None
    with RunLogger(db, "eval", {"team": {"token_weight": 0.3, "token_penalty": "linear"}}) as c:
        c.log_episodes([synthetic_episode(0)])
    team_run = {r["id"]: r for r in runs(db).records()}[c.run_id]
    assert (team_run["token_weight"], team_run["token_penalty"]) == (0.3, "linear")
    # A team run stored before the idle rule existed called every agent: it reads as "call".
    assert team_run["idle"] == "call" and recs[a]["idle"] is None
    with RunLogger(db, "eval", {"team": {"idle": "keep"}}) as keeper:
        keeper.log_episodes([synthetic_episode(1)])
    assert {r["id"]: r for r in runs(db).records()}[keeper.run_id]["idle"] == "keep"
    assert delete_run(keeper.run_id, db)["episodes"] == 1
    assert delete_run(c.run_id, db)["episodes"] == 1
    print_table(table, as_json=True)
    assert {r["id"] for r in json.loads(capsys.readouterr().out)} == {a, b}
    print_table(table, title="runs", width=250)
    assert a in capsys.readouterr().out

    res = sql(
        "SELECT run_id, count(*) AS n FROM agent_steps WHERE agent = -1 GROUP BY 1 ORDER BY 2", db
    )
    assert res.columns == ["run_id", "n"] and res.rows == [[b, 3], [a, 6]]
    for bad in (
        "DELETE FROM runs",
        "DROP TABLE episodes",
        "SELECT 1; SELECT 2",
        "COPY runs TO 'x.csv'",
        "SELEC nonsense",
        "SELECT * FROM no_such_table",
    ):
        with pytest.raises(UserError):
            sql(bad, db)
    assert count_episodes(db) == 9

    counts = export_run(a, tmp_path / "out", db)
    assert counts["episodes"] == 6 and counts["agent_steps"] == 6 * 13 and counts["runs"] == 1
    steps = pq.read_table(tmp_path / "out" / "agent_steps.parquet")
    assert set(steps.column("run_id").to_pylist()) == {a}
    assert pq.read_table(tmp_path / "out" / "train_metrics.parquet").num_rows == 1
    with pytest.raises(UserError):
        export_run("nope", tmp_path / "out2", db)

    deleted = delete_run(a, db)
    assert deleted["episodes"] == 6
    assert get_run(db, a) is None and count_episodes(db) == 3
    assert sql(
        "SELECT count(*) FROM agent_steps WHERE run_id = ?".replace("?", f"'{a}'"), db
    ).rows == [[0]]
    with pytest.raises(UserError):
        delete_run(a, db)


def test_delete_refuses_a_live_run(db: Path) -> None:
    logger = RunLogger(db, "train")
    logger.log_episode(synthetic_episode(0))
    with pytest.raises(UserError, match="still running"):
        delete_run(logger.run_id, db)
    logger.close()
    delete_run(logger.run_id, db)
