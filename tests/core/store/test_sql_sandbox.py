"""``agentqmix sql`` reads the store and nothing else: DuckDB refuses every escape.

Through the real entry point (``core.cli.main``, in process), on real DuckDB files. Each
escape must end in exit code 2 with one line on stderr and leave every file as it was.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import duckdb
import pytest

from core.cli import main
from core.store import RunLogger
from core.store.synthetic import synthetic_episode
from core.store.writer import LoggerConfig

NEVER = LoggerConfig(ingest_every_s=1e9)
SECRET = "sk-test-do-not-print-0123456789abcdef"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _files(root: Path) -> dict[str, str]:
    """Every file under ``root`` with its content hash."""
    return {str(p.relative_to(root)): _digest(p) for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def store(tmp_path: Path) -> Path:
    db = tmp_path / "store.duckdb"
    with RunLogger(db, "train", {"lr": 0.1}, policy="qmix") as log:
        log.log_episodes(synthetic_episode(i) for i in range(4))
    # What an escape would aim at: another database, and a folder IMPORT DATABASE would run.
    victim = tmp_path / "victim.duckdb"
    con = duckdb.connect(str(victim))
    con.execute("CREATE TABLE precious AS SELECT range AS x FROM range(10)")
    con.close()
    dump = tmp_path / "dump"
    dump.mkdir()
    (dump / "schema.sql").write_text(
        f"ATTACH '{victim}' AS victim; DELETE FROM victim.precious; "
        f"COPY (SELECT 1) TO '{tmp_path / 'imported.csv'}';\n"
    )
    (dump / "load.sql").write_text("")
    (tmp_path / "notes.csv").write_text("a,b\n1,2\n")
    return db


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


ESCAPES = [
    # The reported ones: COPY over the database file behind EXPLAIN ANALYZE, with and
    # without DuckDB's temporary file (the store's own paths stay allowed by
    # enable_external_access = false alone; only the disabled file system stops this one).
    "EXPLAIN ANALYZE COPY episodes TO '{db}'",
    "EXPLAIN ANALYZE COPY episodes TO '{db}' (USE_TMP_FILE false)",
    "COPY runs TO '{db}' (FORMAT csv, USE_TMP_FILE false)",
    "COPY runs TO '{db}.wal' (USE_TMP_FILE false)",
    "COPY runs TO '{tmp}/out.csv'",
    "IMPORT DATABASE '{tmp}/dump'",
    "EXPORT DATABASE '{tmp}/exported'",
    "SELECT * FROM read_text('/proc/self/environ')",
    "SELECT content::VARCHAR FROM read_blob('/proc/self/environ')",
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM read_csv('{tmp}/notes.csv')",
    "SELECT * FROM read_blob('{db}')",
    "SELECT * FROM glob('{tmp}/*')",
    "SELECT * FROM glob('/root/*')",
    "ATTACH '{tmp}/victim.duckdb' AS victim",
    "ATTACH '{tmp}/new.duckdb' AS fresh",
    "INSTALL httpfs",
    "LOAD httpfs",
    "SET enable_external_access = true",
    "SET lock_configuration = false",
    "SET threads = 1",
    "RESET disabled_filesystems",
    "PRAGMA threads = 1",
    "DELETE FROM episodes",
    "DROP TABLE runs",
    "CREATE TABLE kept AS SELECT 1",
    "UPDATE runs SET status = 'failed'",
    "SELECT 1; SELECT 2",
    "SELECT 1; COPY runs TO '{tmp}/out.csv'",
    "",
]


@pytest.mark.parametrize("statement", ESCAPES)
def test_escapes_are_refused_and_change_nothing(
    store: Path,
    statement: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tmp = store.parent
    monkeypatch.chdir(tmp)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    before = _files(tmp)
    code, out, err = _run(["sql", statement.format(db=store, tmp=tmp), "--db", str(store)], capsys)
    assert code == 2, (out, err)
    assert "Traceback" not in err and SECRET not in out + err
    assert err.strip().startswith("error:") and len(err.strip().splitlines()) == 1, err
    assert _files(tmp) == before


def test_multiple_statements_get_one_sentence(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _run(["sql", "SELECT 1; SELECT 2", "--db", str(store)], capsys)
    assert code == 2 and "exactly one statement; got 2" in err


def test_invalid_utf8_is_one_sentence(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # What Python makes of a command-line argument with bytes that are not UTF-8.
    query = b"SELECT '\xff\xfe' AS x".decode("utf-8", "surrogateescape")
    code, _, err = _run(["sql", query, "--db", str(store)], capsys)
    assert code == 2 and "not valid UTF-8" in err and len(err.strip().splitlines()) == 1


def test_selects_still_work_and_see_the_spool_tail(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A live run that has not been ingested: its rows exist only in the spool.
    live = RunLogger(store, "eval", policy="star", settings=NEVER)
    live.log_episodes(synthetic_episode(i) for i in range(3))
    try:
        code, out, err = _run(
            [
                "sql",
                "SELECT r.id, r.status, count(DISTINCT e.episode) AS episodes, "
                "count(s.agent) AS steps FROM runs r JOIN episodes e ON e.run_id = r.id "
                "JOIN agent_steps s ON s.run_id = e.run_id AND s.episode = e.episode "
                "GROUP BY ALL ORDER BY episodes",
                "--db",
                str(store),
                "--json",
            ],
            capsys,
        )
        assert code == 0, err
        rows = json.loads(out)
        assert [(r["status"], r["episodes"], r["steps"]) for r in rows] == [
            ("running", 3, 3 * 13),
            ("finished", 4, 4 * 13),
        ]
        assert rows[0]["id"] == live.run_id
        for query, expected in [
            ("SHOW TABLES", None),
            ("EXPLAIN SELECT * FROM episodes", None),
            ("DESCRIBE episodes", None),
            ("WITH t AS (SELECT reward FROM episodes) SELECT count(*) AS n FROM t", [{"n": 7}]),
        ]:
            code, out, err = _run(["sql", query, "--db", str(store), "--json"], capsys)
            assert code == 0, (query, err)
            if expected is not None:
                assert json.loads(out) == expected
    finally:
        live.close()
    # The locked-down session was private: the process's own engine still reads and writes.
    code, out, _ = _run(
        ["sql", "SELECT count(*) AS n FROM episodes", "--db", str(store), "--json"], capsys
    )
    assert code == 0 and json.loads(out) == [{"n": 7}]
