"""How wrong the simulator is about a real model, per action and per fixed topology, on
real episodes the fit never saw — for the stock preset and for the calibrated society.

Calibrates on every team ``eval`` run played by a real back-end in the given stores
(``agentqmix calibrate``'s split by task hash: the society is fitted on the fit tasks'
episodes and each held-out episode is replayed ``--draws`` times), without touching the
stores (it works on a copy, into which the runs of every further ``--db`` are logged), and
prints per action (per call) and per policy: real and simulated accuracy and
tokens with 95 % intervals (bootstrap over tasks), the calibrated society's error
(simulated − real) and the stock preset's, and the mean absolute error over actions.

    python -m tests.core.backends.data.record_smollm /tmp/real.duckdb --benchmarks math
    agentqmix bench calibration-real --db /tmp/real.duckdb [--db MORE.duckdb] --json
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import Parser, float_in, int_in, run_main, user_errors
from core.errors import UserError


def real_runs(db: str) -> list[str]:
    """Every team ``eval`` run of ``db`` played by a back-end other than the simulator."""
    from core.store.db import read_session

    with read_session(db) as cur:
        rows = cur.execute(
            "SELECT id FROM runs WHERE kind = 'eval' AND backend <> 'sim' ORDER BY id"
        ).fetchall()
    return [r for (r,) in rows]


def _row(r: dict[str, Any]) -> dict[str, Any]:
    keep = ("real_acc", "sim_acc", "err_acc", "stock_err_acc")
    keep += ("real_tok", "sim_tok", "err_tok", "stock_err_tok")
    out: dict[str, Any] = {"n": r["n"], "tasks": r["tasks"]}
    for key in keep:
        out[key] = [round(float(v), 4 if key.endswith("acc") else 1) for v in r[key]]
    return out


def _mae(rows: list[dict[str, Any]], key: str) -> float:
    return round(float(np.mean([abs(r[key][0]) for r in rows])), 4)


def merged_copy(dbs: list[str], into: str) -> list[str]:
    """Copy the first store to ``into``, log every further store's real runs into it; the
    real runs of the copy."""
    from core.experiment.calibrate import load_runs
    from core.experiment.evaluate import log_run

    for db in dbs:
        if not Path(db).is_file():
            raise UserError(f"--db {db} does not exist.")
        if not real_runs(db):
            raise UserError(f"--db {db} holds no eval run of a real back-end.")
    shutil.copyfile(dbs[0], into)
    for db in dbs[1:]:
        for run in load_runs(db, real_runs(db)):
            log_run(into, "eval", run.opts, run.records[0].policy, run.opts.seed, run.records)
    return real_runs(into)


def measure(dbs: list[str], check_fraction: float, draws: int, seed: int) -> dict[str, Any]:
    from core.experiment.calibrate import CalibrateOptions, calibrate

    with tempfile.TemporaryDirectory(prefix="agentqmix-calib-bench-") as tmp:
        copy = str(Path(tmp) / "real.duckdb")
        runs = merged_copy(dbs, copy)
        options = CalibrateOptions(
            runs=tuple(runs), out=Path(tmp) / "society.json", check_fraction=check_fraction,
            draws=draws, seed=seed,
        )  # fmt: skip
        result = calibrate(options, db=copy, log=False)
    by_action = {r["group"]: _row(r) for r in result.by_action}
    by_policy = {r["group"]: _row(r) for r in result.by_topology}
    actions = list(by_action.values())
    return {
        "dbs": dbs,
        "runs": len(runs),
        "models": result.extra["models"],
        "split": result.split,
        "mean_abs_error_over_actions": {
            "calibrated": {"acc": _mae(actions, "err_acc"), "tokens": _mae(actions, "err_tok")},
            "stock": {
                "acc": _mae(actions, "stock_err_acc"),
                "tokens": _mae(actions, "stock_err_tok"),
            },
        },
        "by_action": by_action,
        "by_policy": by_policy,
        "fitted": {p.name: round(p.value, 4) for p in result.fit.params},
    }


def main(argv: list[str] | None = None) -> None:
    parser: argparse.ArgumentParser = Parser(
        prog="agentqmix bench calibration-real", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--db", action="append", required=True, help="store holding real eval runs (repeatable)"
    )
    parser.add_argument("--check-fraction", type=float_in(0.05, 0.95), default=0.3)
    parser.add_argument("--draws", type=int_in(1, 1000), default=20)
    parser.add_argument("--seed", type=int_in(0, 2**31), default=0)
    parser.add_argument("--json", action="store_true", help="(always JSON; for symmetry)")
    args = parser.parse_args(argv)
    with user_errors():
        run_main(measure(args.db, args.check_fraction, args.draws, args.seed))


if __name__ == "__main__":
    main()
