"""Permission cases as an unprivileged user (issue 19 item 10): one sentence, exit 2, nothing lost.

Every case runs the real ``agentqmix`` command (:func:`core.cli.main`) as a user the file
modes bind (:mod:`tests.unprivileged`: uid 65534, or root without capabilities where that
user cannot reach the interpreter), all in one process so PyTorch is imported once. A
refusal must be exactly one line on stderr and exit code 2, before any work, with every
file of the tree (the stores, their folders' listings) as it was. Reading a store this
user cannot write is not refused: ``runs`` and ``sql`` answer from it, and ``lab`` opens
it read-only, saying so in one line.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from core.store.synthetic import synthetic_episode
from core.store.writer import LoggerConfig, RunLogger
from tests.unprivileged import remove_tree, run_cases, shared_tree, unprivileged_prefix

WHO = unprivileged_prefix()
pytestmark = pytest.mark.skipif(
    WHO is None, reason="running as root without setpriv: no way to drop the right to write"
)

TRAIN = ["train", "--benchmark", "math", "--episodes", "1", "--n-envs", "1", "--hidden", "8",
         "--eval-episodes", "0"]  # fmt: skip
EVAL = ["eval", "--benchmark", "math", "--policy", "full", "--episodes", "1"]
SWEEP = ["sweep", "--benchmark", "math", "--token-weights", "0", "--seeds", "0", "--episodes",
         "1", "--eval-episodes", "1", "--no-log"]  # fmt: skip
OPENAI = ["--backend", "openai", "--model", "m", "--base-url", "http://127.0.0.1:9/v1"]

# The tree (under a folder every user can enter): ``w`` the user may write (HOME, cwd);
# ``ro`` an empty folder it may not; ``shared`` a store it may read, not write (file 0o444
# in a 0o555 folder, as an analyst gets a colleague's); ``locked`` a store it may not read
# (0o000); ``rofolder`` a store file it may write in a folder it may not (no room for the
# write-ahead log).
W = "w"
CASES: dict[str, tuple[list[str], str]] = {
    # name: (argv with {top} for the tree, what must happen: "refused" or "reads")
    "train --db in a folder it cannot write": (TRAIN + ["--db", "{top}/ro/new.duckdb", "--out", "{top}/w/m.pt"], "refused"),
    "eval --db in a folder it cannot write": (EVAL + ["--db", "{top}/rofolder/store.duckdb"], "refused"),
    "eval --db a file it cannot read": (EVAL + ["--db", "{top}/locked/store.duckdb"], "refused"),
    "runs --db a file it cannot read": (["runs", "--db", "{top}/locked/store.duckdb"], "refused"),
    "eval --db a store it can read, not write": (EVAL + ["--db", "{top}/shared/store.duckdb"], "refused"),
    "train --out in a folder it cannot write": (TRAIN + ["--no-log", "--out", "{top}/ro/m.pt"], "refused"),
    "eval --cache-dir it cannot write": (EVAL + ["--no-log", *OPENAI, "--cache-dir", "{top}/ro/cache"], "refused"),
    "sweep --out in a folder it cannot write": (SWEEP + ["--out", "{top}/ro/sweep"], "refused"),
    "lab --db a new store in a folder it cannot write": (["lab", "--db", "{top}/ro/new.duckdb"], "refused"),
    "lab --db a file it cannot read": (["lab", "--db", "{top}/locked/store.duckdb"], "refused"),
    "runs on a store it can read, not write": (["runs", "--json", "--db", "{top}/shared/store.duckdb"], "reads"),
    "sql on a store it can read, not write": (["sql", "SELECT count(*) AS n FROM episodes", "--db", "{top}/shared/store.duckdb"], "reads"),
    "lab --db a store it can read, not write": (["lab", "--db", "{top}/shared/store.duckdb"], "reads"),
}  # fmt: skip


def _seed(db: Path) -> str:
    with RunLogger(db, "eval", {}, settings=LoggerConfig(background=False)) as logger:
        logger.log_episodes([synthetic_episode(k) for k in range(3)])
        return logger.run_id


@pytest.fixture(scope="module")
def results() -> Any:
    top = shared_tree()
    try:
        (top / W).mkdir(mode=0o777)
        (top / W).chmod(0o777)  # the umask may have taken some of it
        (top / "ro").mkdir()
        (top / "shared").mkdir()
        run_id = _seed(top / "shared" / "store.duckdb")
        shutil.rmtree(top / "shared" / "store.duckdb.spool")
        for name, mode in (("locked", 0o000), ("rofolder", 0o666)):
            (top / name).mkdir()
            shutil.copy(top / "shared" / "store.duckdb", top / name / "store.duckdb")
            (top / name / "store.duckdb").chmod(mode)
        (top / "shared" / "store.duckdb").chmod(0o444)
        for folder in ("ro", "shared", "rofolder"):
            (top / folder).chmod(0o555)
        (top / "locked").chmod(0o755)
        cases = {
            name: [arg.replace("{top}", str(top)) for arg in argv]
            for name, (argv, _) in CASES.items()
        }
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(top / W),
               "AGENTQMIX_CACHE": str(top / W / "cache"), "AGENTQMIX_LAB_DEMO": "0"}  # fmt: skip
        yield run_id, run_cases(cases, top, W, env, timeout=600), top
    finally:
        remove_tree(top)


@pytest.mark.parametrize("name", list(CASES))
def test_permission_case(name: str, results: Any) -> None:
    run_id, got, top = results
    case = got[name]
    err = case["stderr"]
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert case["changed"] == [], f"{name} changed {case['changed']} ({WHO[0]})"
    if CASES[name][1] == "refused":
        assert case["code"] == 2, case
        assert len(lines) == 1 and lines[0].startswith("error: "), err
        assert any(w in lines[0] for w in ("cannot be written", "cannot write", "cannot create",
                                           "cannot be read")), lines  # fmt: skip
        return
    if name.startswith("runs"):
        assert case["code"] == 0 and lines == [], case
        assert [r["id"] for r in json.loads(case["stdout"])] == [run_id]
    elif name.startswith("sql"):
        assert case["code"] == 0 and lines == [], case
        assert "3" in case["stdout"].split(), case["stdout"]
    else:  # lab: one line saying read-only, then it becomes the launcher on that store
        assert case["code"] == "exec", case
        assert len(lines) == 1 and "read-only" in lines[0], err
        assert case["became"][case["became"].index("--db") + 1] == f"{top}/shared/store.duckdb"
