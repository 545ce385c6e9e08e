"""``agentqmix train`` on a disk that fills up, for test_disk_full.py (run inside bwrap).

    python disk_full_train.py DIR

DIR is a small tmpfs of its own. The real CLI trains with its store and checkpoint in
DIR; once it has logged some episodes the disk is filled (a ballast file written until
ENOSPC). Then, with the disk still full, ``runs`` and ``sql`` read the store; then the
ballast goes and ``train --resume`` finishes the run. Prints one JSON object.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

EPISODES = 150
HANG_GUARD_S = 300


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "core.cli", *args],
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
        stdin=subprocess.DEVNULL,
    )


def fill(path: Path) -> None:
    with open(path, "wb", buffering=0) as f:
        chunk = b"\0" * 65536
        while chunk:
            try:
                f.write(chunk)
            except OSError:
                chunk = chunk[: len(chunk) // 2]


def main() -> None:
    root = Path(sys.argv[1])
    db, out, ballast = root / "s.duckdb", root / "m.pt", root / "ballast"
    flags = ["--benchmark", "math", "--episodes", str(EPISODES), "--n-envs", "4"]
    flags += ["--hidden", "8", "--eval-episodes", "0", "--checkpoint-every-s", "0.5"]
    train = subprocess.Popen(
        [sys.executable, "-m", "core.cli", "train", *flags, "--db", str(db), "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    spool = root / "s.duckdb.spool"
    deadline = time.monotonic() + HANG_GUARD_S
    while time.monotonic() < deadline and train.poll() is None:
        logged = sum(p.read_bytes().count(b'{"t":"ep"') for p in spool.glob("*.jsonl"))
        if logged >= 40 and out.exists():
            break
        time.sleep(0.05)
    fill(ballast)
    _, err = train.communicate(timeout=HANG_GUARD_S)
    report: dict[str, object] = {"train_code": train.returncode, "train_err": err}
    report["checkpoint_kept"] = out.exists() and out.stat().st_size > 0
    runs = cli("runs", "--db", str(db), "--json")
    report["runs_code"], report["runs_err"] = runs.returncode, runs.stderr
    report["runs"] = json.loads(runs.stdout) if runs.returncode == 0 else None
    sql = cli("sql", "SELECT count(*) AS n FROM episodes", "--db", str(db), "--json")
    report["sql_code"], report["sql"] = sql.returncode, sql.stdout + sql.stderr
    os.unlink(ballast)
    if report["runs"]:
        run_id = report["runs"][0]["id"]
        resumed = cli("train", "--resume", run_id, "--db", str(db), "--json")
        report["resume_code"], report["resume_err"] = resumed.returncode, resumed.stderr
        report["files"] = {
            str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*") if p.is_file()
        }
        st = os.statvfs(root)
        report["free"] = st.f_bavail * st.f_frsize
        episodes = cli(
            "sql",
            f"SELECT count(*) AS n, count(DISTINCT episode) AS d, "
            f"max(episode) AS m FROM episodes WHERE run_id = '{run_id}'",
            "--db",
            str(db),
            "--json",
        )
        report["after"] = (
            json.loads(episodes.stdout) if episodes.returncode == 0 else episodes.stderr
        )
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
