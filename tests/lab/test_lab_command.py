"""``agentqmix lab``: a bad ``--db`` ends in one sentence and exit 2, before any server starts."""

from __future__ import annotations

import pytest

from core.cli import main


@pytest.mark.parametrize("case", ["missing folder", "directory", "corrupt file", "truncated"])
def test_bad_database_exits_2_with_one_line(tmp_path, capsys, case):
    if case == "missing folder":
        db = tmp_path / "nowhere" / "lab.duckdb"
    elif case == "directory":
        db = tmp_path / "a-folder.duckdb"
        db.mkdir()
    elif case == "corrupt file":
        db = tmp_path / "notes.duckdb"
        db.write_text("these are my notes, not a database\n" * 20)
    else:  # a DuckDB header followed by garbage
        db = tmp_path / "cut.duckdb"
        db.write_bytes(b"\0" * 8 + b"DUCK" + b"\x07" * 5000)
    # A free port: the command must fail on the database, not on the port.
    assert main(["lab", "--db", str(db), "--port", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0, err
    assert str(db) in err and "Traceback" not in err
