"""Accuracy of logged evaluation runs by benchmark, policy and difficulty, with Wilson
intervals: how far a real model gets on each set (issue 35's pilot).

Reads the evaluation runs of a store (``agentqmix eval ... --db PATH``; every one, or
those of ``--runs``) and prints, per run and per difficulty level and over all: the
episodes, how many were right, the accuracy with its 95 % Wilson interval, how many team
answers could not be read at all (no answer line the reader accepts), and the mean
prompt and completion tokens. Prints JSON.

    agentqmix eval --policy single --backend local --benchmark arith --episodes 100 --db pilot.duckdb
    agentqmix bench by-difficulty --db pilot.duckdb [--runs RUN_ID,RUN_ID]
"""

from __future__ import annotations

from typing import Any

from benchmarks.common import Parser, run_main, user_errors
from core.experiment.policies import wilson_interval
from core.store.db import read_session

QUERY = (
    "SELECT r.id AS run_id, r.policy, e.benchmark, r.backend, r.model, e.difficulty, "
    "count(*) AS n, sum(e.correct::INTEGER) AS correct, "
    "sum((e.team_answer IS NULL)::INTEGER) AS unread, "
    "avg(e.prompt_tokens) AS prompt_tokens, avg(e.completion_tokens) AS completion_tokens "
    "FROM episodes e JOIN runs r ON r.id = e.run_id WHERE r.kind = 'eval' {runs}"
    "GROUP BY GROUPING SETS ((r.id, r.policy, e.benchmark, r.backend, r.model, e.difficulty), "
    "(r.id, r.policy, e.benchmark, r.backend, r.model)) ORDER BY r.id, e.difficulty NULLS LAST"
)


def rows(db: str, runs: list[str] | None) -> list[dict[str, Any]]:
    """One row per (run, difficulty) and one per run (``difficulty`` = ``"all"``)."""
    where = f"AND r.id IN ({', '.join('?' * len(runs))}) " if runs else ""
    with read_session(db, create=False) as cur:
        table = cur.execute(QUERY.format(runs=where), runs or []).fetchall()
        names = [d[0] for d in cur.description]
    out = []
    for values in table:
        row = dict(zip(names, values, strict=True))
        n, correct = int(row["n"]), int(row["correct"])
        lo, hi = wilson_interval(correct / n, n)
        out.append(
            {
                **row,
                "difficulty": "all" if row["difficulty"] is None else int(row["difficulty"]),
                "n": n,
                "correct": correct,
                "unread": int(row["unread"]),
                "accuracy": round(correct / n, 4),
                "wilson95": [round(lo, 4), round(hi, 4)],
                "prompt_tokens": round(float(row["prompt_tokens"]), 1),
                "completion_tokens": round(float(row["completion_tokens"]), 1),
            }
        )
    return out


def main(argv: list[str] | None = None) -> None:
    parser = Parser(prog="agentqmix bench by-difficulty", description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", required=True, help="the store the evaluation runs logged to")
    parser.add_argument(
        "--runs", default="", help="comma-separated run ids (default: every eval run)"
    )
    args = parser.parse_args(argv)
    runs = [r.strip() for r in args.runs.split(",") if r.strip()] or None
    with user_errors():
        result = rows(args.db, runs)
    run_main({"db": args.db, "rows": result})


if __name__ == "__main__":
    main()
