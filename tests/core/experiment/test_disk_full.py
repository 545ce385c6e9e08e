"""``agentqmix train`` when the disk fills up (issue 19 item 5).

A real full disk: a 24 MB tmpfs of its own (bubblewrap ``--size``), holding the store,
its spool and the checkpoint; a ballast file fills it mid-run (``disk_full_train.py``).
The run must stop cleanly (exit 2, one sentence that says what is kept and how to go on,
no traceback, the checkpoint kept), ``runs`` and ``sql`` must still read the store while
the disk is full, and once there is room ``train --resume`` must finish the run with
every episode stored exactly once. Skipped where bubblewrap cannot mount a tmpfs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.core.experiment import disk_full_train

REPO = Path(__file__).resolve().parents[3]


def _bwrap_tmpfs_works(tmp_path: Path) -> bool:
    if shutil.which("bwrap") is None:
        return False
    probe = tmp_path / "probe"
    probe.mkdir()
    cmd = ["bwrap", "--dev-bind", "/", "/", "--size", "1048576", "--tmpfs", str(probe), "true"]
    return subprocess.run(cmd, capture_output=True).returncode == 0


def test_train_on_a_disk_that_fills_up_stops_cleanly_and_resumes(tmp_path: Path) -> None:
    if not _bwrap_tmpfs_works(tmp_path):
        pytest.skip("bubblewrap cannot mount a size-limited tmpfs here")
    small = tmp_path / "small"
    small.mkdir()
    proc = subprocess.run(
        ["bwrap", "--dev-bind", "/", "/", "--size", str(24 * 1024 * 1024), "--tmpfs", str(small)]
        + [sys.executable, disk_full_train.__file__, str(small)],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PYTHONPATH": str(REPO), "AGENTQMIX_CACHE": str(tmp_path / "c")},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    err = report["train_err"]
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert report["train_code"] == 2 and "Traceback" not in err, err
    assert len(lines) == 1 and "No space left on device" in lines[0], err
    assert "are kept" in lines[0] and "agentqmix train --resume" in lines[0], err
    assert report["checkpoint_kept"]
    # Reads work while the disk is full.
    assert report["runs_code"] == 0, report["runs_err"]
    (run,) = report["runs"]
    assert run["status"] == "interrupted" and run["incomplete"] and run["episodes"] > 0
    assert report["sql_code"] == 0 and json.loads(report["sql"]) == [{"n": run["episodes"]}]
    # With room again the run finishes: every episode once.
    assert report["resume_code"] == 0, report["resume_err"]
    n = disk_full_train.EPISODES
    assert report["after"] == [{"n": n, "d": n, "m": n - 1}]
