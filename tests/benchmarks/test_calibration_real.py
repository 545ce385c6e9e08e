"""``bench calibration-real`` on the recorded SmolLM2 store: per action and per policy, on
held-out tasks only, the calibrated society's error beside the stock preset's; runs of a
second store count; a missing store is one sentence."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

from tests.benchmarks.test_speed_benchmarks import bench
from tests.core.experiment.test_calibrate import RECORDED, run_ids


def test_calibration_error_per_action_on_held_out_real_episodes(tmp_path: Path) -> None:
    db = tmp_path / "real.duckdb"
    with gzip.open(RECORDED) as src, open(db, "wb") as dst:
        shutil.copyfileobj(src, dst)
    again = tmp_path / "again.duckdb"
    shutil.copyfile(db, again)
    proc = bench("calibration-real", "--db", str(db), "--db", str(again), "--draws", "2")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    n_runs = len(run_ids(db))
    assert out["runs"] == 2 * n_runs  # the second store's runs were logged into the copy
    assert len(run_ids(db)) == n_runs  # and the stores themselves are untouched
    split = out["split"]
    assert split["check_episodes"] > 0 and split["fit_episodes"] > 0
    assert out["by_policy"]["all episodes"]["n"] == split["check_episodes"]
    assert {"solo_process", "execute_verify"} <= set(out["by_action"])
    for row in out["by_action"].values():
        for key in ("err_acc", "err_tok", "stock_err_tok"):
            mean, lo, hi = row[key]
            assert lo <= mean <= hi
    mae = out["mean_abs_error_over_actions"]
    # The recording's completions are capped at 48 tokens; the stock preset writes ~880.
    assert mae["calibrated"]["tokens"] < mae["stock"]["tokens"]


def test_a_missing_store_is_one_sentence(tmp_path: Path) -> None:
    proc = bench("calibration-real", "--db", str(tmp_path / "none.duckdb"))
    assert proc.returncode == 2 and proc.stderr.strip() == (
        f"error: --db {tmp_path / 'none.duckdb'} does not exist."
    )
