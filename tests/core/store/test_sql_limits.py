"""``agentqmix sql`` bounds what one statement costs: its time and the rows it prints.

* A statement that would run for hours, through the real CLI in a subprocess: ``--timeout``
  stops it (exit 2, one sentence) and so does Ctrl-C (SIGINT, exit 130, one line), both
  through DuckDB's interrupt of the running query.
* A result with more rows than ``--max-rows`` prints the first ones, table or JSON, and
  says on stderr that it was cut; a result of endless rows is not run to its end.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.cli import main
from core.store import RunLogger
from core.store.commands import SQL_MAX_ROWS, SQL_TIMEOUT_S
from core.store.synthetic import synthetic_episode

REPO = Path(__file__).resolve().parents[3]
HANG_GUARD_S = 900.0
"""Only against a hang: the statements below stop long before it, or never (a loaded
machine can take minutes to start Python and reach the statement)."""
ENDLESS = "SELECT count(*) FROM range(10000000000000)"
"""10^13 rows to count: hours of work on any machine."""
QUERY_CPU_S = 0.2
"""CPU time outside the main thread that shows the statement is running: before it the
process runs Python in its main thread and DuckDB's threads idle; the statement runs in a
thread of its own (so that the main thread can take Ctrl-C). Were it run in the main
thread, this mark would never be reached and the test fails when the process ends."""
STEPS = 4 * 13
"""agent_steps rows of the store below: 4 episodes, 13 steps each."""


@pytest.fixture
def store(tmp_path: Path) -> Path:
    db = tmp_path / "store.duckdb"
    with RunLogger(db, "train", {"lr": 0.1}, policy="qmix") as log:
        log.log_episodes(synthetic_episode(i) for i in range(4))
    return db


def _cli(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "core.cli", "sql", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        # A background job inherits SIGINT ignored, and Python then never turns it into
        # KeyboardInterrupt: give the child the disposition an interactive run has.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def _cpu_outside_main_thread(pid: int) -> float:
    """Seconds of CPU the threads of ``pid`` other than its main one have used."""
    ticks = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        if task.name == str(pid):
            continue
        try:
            fields = (task / "stat").read_text().rpartition(")")[2].split()
        except (FileNotFoundError, ProcessLookupError):
            continue  # a thread that just ended
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def test_timeout_stops_a_never_ending_query(store: Path) -> None:
    proc = _cli(ENDLESS, "--timeout", "1", "--db", str(store))
    out, err = proc.communicate(timeout=HANG_GUARD_S)
    assert proc.returncode == 2, err
    assert out == "" and "Traceback" not in err
    assert err.strip() == (
        "error: the query ran longer than 1 s and was stopped; raise --timeout or narrow it."
    )


def test_ctrl_c_stops_a_running_query(store: Path) -> None:
    # The timeout is far off (but short of the hang guard): a statement that ignored
    # Ctrl-C would end by it, exit 2, not 130.
    proc = _cli(ENDLESS, "--timeout", "600", "--db", str(store))
    try:
        while _cpu_outside_main_thread(proc.pid) < QUERY_CPU_S:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=HANG_GUARD_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert out == "" and err.strip() == "interrupted: the query was stopped."


def _sql(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["sql", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_max_rows_cuts_tables_and_json_and_says_so(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = ["--db", str(store)]
    steps = "SELECT episode, round, seq, agent FROM agent_steps ORDER BY ALL"
    # No cap on either (a timeout beyond what Python can wait for is waited for that long).
    code, out, err = _sql(capsys, steps, *db, "--json", "--max-rows", "0", "--timeout", "1e300")
    everything = json.loads(out)
    assert code == 0 and len(everything) == STEPS and err == ""

    notice = "showing the first {} rows; the result has more: raise --max-rows (0 = no cap) "
    notice += "or page with LIMIT/OFFSET."
    for cap, cut in ((10, True), (STEPS - 1, True), (STEPS, False), (STEPS + 1, False)):
        code, out, err = _sql(capsys, steps, *db, "--json", "--max-rows", str(cap))
        assert code == 0 and json.loads(out) == everything[:cap]
        assert err.strip() == (notice.format(cap) if cut else ""), cap

    code, out, err = _sql(capsys, steps, *db, "--max-rows", "3")
    assert code == 0 and err.strip() == notice.format(3)
    body = [line for line in out.splitlines() if line.startswith("│")]
    assert len(body) == 3  # the rows (the header is drawn with ┃)

    # The default cap, on 10^13 rows: only the first ones are fetched, so the statement
    # ends at once (run to its end, it would end by the timeout instead: exit 2).
    endless = "SELECT range AS i FROM range(10000000000000)"
    code, out, err = _sql(capsys, endless, *db, "--json")
    assert code == 0, err
    assert [r["i"] for r in json.loads(out)] == list(range(SQL_MAX_ROWS))
    assert err.strip() == notice.format(SQL_MAX_ROWS)


@pytest.mark.parametrize(
    ("flags", "sentence"),
    [
        (["--timeout", "0"], "--timeout must be a finite number of seconds > 0, not 0."),
        (["--timeout", "-1"], "--timeout must be a finite number of seconds > 0, not -1."),
        (["--timeout", "nan"], "--timeout must be a finite number of seconds > 0, not nan."),
        (["--timeout", "inf"], "--timeout must be a finite number of seconds > 0, not inf."),
        (["--max-rows", "-1"], "--max-rows must be >= 0 (0 = no cap), not -1."),
    ],
)
def test_bad_limits_are_one_sentence(
    store: Path, capsys: pytest.CaptureFixture[str], flags: list[str], sentence: str
) -> None:
    code, out, err = _sql(capsys, "SELECT 1", "--db", str(store), *flags)
    assert code == 2 and out == "" and err.strip() == f"error: {sentence}"


def test_help_states_the_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sql", "--help"]) == 0
    text = re.sub(r"[\s│]+", " ", capsys.readouterr().out)
    assert f"(default {SQL_TIMEOUT_S:g}; Ctrl-C stops it too)" in text
    assert f"(default {SQL_MAX_ROWS}; 0 = no cap)" in text
