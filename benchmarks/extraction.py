"""Our answer reader against PyPI ``math-verify``: how precise, how complete, and bounded?

Three parts, one JSON object:

* ``reader``: the labelled fixture ``tests/core/tasks/data/reader_replies.jsonl`` (real
  SmolLM2-135M replies recorded by ``benchmarks/record_replies.py`` plus the hostile cases
  of issue 32, each labelled by reading it: the answer it commits to, or none). Per
  reader, per domain (maths, mcq) and per half of the fixture (``dev``, ``heldout``):
  **precision** (of the replies a reader reads an answer from, the share whose answer is
  the committed one) and **recall** (of the replies that commit to an answer, the share
  read as that answer), with the counts and the ids of false reads and misses. Ours is
  :func:`core.tasks.checkers.read_answer`; math-verify's is ``parse`` with its default
  extraction on maths (a read is right when ``verify`` finds it equal to the label) and
  with the option letters as strings on multiple choice.
* ``recorded``: the real SmolLM2-135M replies of ``tests/core/tasks/data/smollm_replies.jsonl``
  (GSM8K), each labelled by hand with the answer a careful reader finds in it (or none).
  Per reader: how many replies it reads as the label says (``read_right``: the same value,
  or nothing when the label is nothing) and how many verdicts (right / wrong against the
  task's truth) agree with the label's verdict (``verdict_right``). Ours is
  :func:`core.tasks.checkers.read_answer` + :func:`math_equal`; math-verify's is
  ``parse`` + ``verify`` with its default extraction (LaTeX and plain expressions).
* ``hostile``: the answers the checker's tests bound (towers of powers, code), each judged
  against ``42`` in a fresh subprocess with a wall-clock limit and a 2 GB address-space
  limit, once on the main thread and once on a worker thread (the team runtime scores off
  the event loop's thread when scoring blocks; Streamlit runs pages off the main thread).
  math-verify bounds its work with ``signal.alarm``, which only the main thread may set: on
  a worker thread it refuses unless its timeouts are switched off (``None``), which is how
  it runs there. Per reader and thread: how many finished within the limit, the slowest,
  and how many were judged wrong (the right verdict).

    agentqmix bench extraction [--limit-s 20] [--part reader|recorded|hostile|all]
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common import Parser, float_in, run_main, user_errors
from core.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
REPLIES = ROOT / "tests" / "core" / "tasks" / "data" / "smollm_replies.jsonl"
FIXTURE = ROOT / "tests" / "core" / "tasks" / "data" / "reader_replies.jsonl"
HOSTILE = (
    "10^{10^{10^{10}}}",
    "99^99^99^99",
    "99^{99^{99}}",
    "10**10**10**10",
    "(99^99)^(99^99)",
    "x^{99^{99^{99}}}",
    "2^{99^{99}} - 2^{99^{99}}",
    "\\sqrt{10^{10^{10^{10}}}}",
    "2^{2^{2^{100}}}",
    "9**9**9**9",
    "__import__('os').system('echo hi')",
    "1" * 5000,
)
"""tests/core/tasks/test_checkers.py's towers and hostile strings."""
MEMORY_BYTES = 2 * 1024**3


def ours_read(task, text: str) -> str | None:
    from core.tasks.checkers import read_answer

    return read_answer(task, text)


def ours_equal(a: str | None, b: str) -> bool:
    from core.tasks.checkers import math_equal

    return math_equal(a, b)


def mv_equal(gold: str, text: str) -> bool:
    """math-verify's verdict on ``text`` against ``gold`` (its own extraction of both)."""
    from math_verify import parse, verify

    return bool(verify(parse(f"${gold}$"), parse(text)))


def mv_reads_nothing(text: str) -> bool:
    from math_verify import parse

    return not parse(text)


def recorded(path: Path) -> dict:
    from core.tasks.registry import load_benchmark

    tasks = {}
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    rows = [r for r in rows if r["benchmark"] == "gsm8k"]
    source = load_benchmark("gsm8k")
    tasks = {source.get(i).task_id: source.get(i) for i in range(len(source))}
    counts = {
        name: {"read_right": 0, "verdict_right": 0, "seconds": 0.0}
        for name in ("ours", "math_verify")
    }
    misses: dict[str, list] = {"ours": [], "math_verify": []}
    for row in rows:
        task, label, text = tasks[row["task_id"]], row["reads_as"], row["reply"]
        truth_verdict = label is not None and ours_equal(label, task.answer)
        t0 = time.perf_counter()
        ours = ours_read(task, text)
        ours_read_right = ours is None if label is None else ours_equal(ours, label)
        ours_verdict = ours_equal(ours, task.answer)
        t1 = time.perf_counter()
        mv_read_right = mv_reads_nothing(text) if label is None else mv_equal(label, text)
        mv_verdict = mv_equal(task.answer, text)
        t2 = time.perf_counter()
        for name, read_right, verdict, seconds in (
            ("ours", ours_read_right, ours_verdict, t1 - t0),
            ("math_verify", mv_read_right, mv_verdict, t2 - t1),
        ):
            counts[name]["read_right"] += read_right
            counts[name]["verdict_right"] += verdict == truth_verdict
            counts[name]["seconds"] += seconds
            if not read_right:
                misses[name].append(f"{row['task_id']}/{row['role']}: label {label}")
    for name in counts:
        counts[name]["seconds"] = round(counts[name]["seconds"], 3)
        counts[name]["misread"] = misses[name]
    return {"replies": len(rows), **counts}


def fixture_tasks(rows: list[dict]) -> dict[tuple[str, str], object]:
    """The tasks the fixture's rows answer, by (benchmark, task_id)."""
    from core.tasks.registry import load_benchmark

    tasks = {}
    for bench in sorted({r["benchmark"] for r in rows}):
        source = load_benchmark(bench)
        for i in range(len(source)):
            task = source.get(i)
            tasks[(bench, task.task_id)] = task
    return tasks


def same_answer(task, got: str | None, label: str | None) -> bool:
    """Whether ``got`` (our reader's answer) is the label (``None`` is ``None``)."""
    from core.tasks.checkers import math_equal

    if label is None or got is None:
        return got is label
    return math_equal(got, label) if task.domain == "math" else got == label


def mv_reading(task, text: str, label: str | None) -> tuple[bool, bool]:
    """(math-verify reads an answer, that answer is ``label``)."""
    from math_verify import StringExtractionConfig, parse, verify

    if task.domain == "mcq":
        letters = tuple(chr(ord("A") + i) for i in range(len(task.choices) or 4))
        found = parse(text, extraction_config=[StringExtractionConfig(strings=letters)])
        got = str(found[-1]).upper() if found else None
        return got is not None, got is not None and got == label
    found = parse(text)
    return bool(found), bool(found) and label is not None and bool(
        verify(parse(f"${label}$"), found)
    )


def _rates(read: int, read_right: int, committed: int, committed_right: int) -> dict:
    return {
        "precision": round(read_right / read, 3) if read else None,
        "recall": round(committed_right / committed, 3) if committed else None,
        "read": read,
        "read_right": read_right,
        "committed": committed,
    }


def reader_part(path: Path) -> dict:
    """Precision and recall of both readers on the labelled fixture, per domain and half."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    tasks = fixture_tasks(rows)
    tallies: dict[tuple[str, str, str], dict] = {}
    for row in rows:
        task, label, text = tasks[(row["benchmark"], row["task_id"])], row["reads_as"], row["reply"]
        ours = ours_read(task, text)
        readings = {
            "ours": (ours is not None, ours is not None and same_answer(task, ours, label)),
            "math_verify": mv_reading(task, text, label),
        }
        for name, (has_read, right) in readings.items():
            for half in (row["split"], "all"):
                t = tallies.setdefault(
                    (name, task.domain, half),
                    {"read": 0, "read_right": 0, "committed": 0, "hit": 0, "false": [], "miss": []},
                )
                t["read"] += has_read
                t["read_right"] += right
                t["committed"] += label is not None
                t["hit"] += label is not None and right
                if has_read and not right:
                    t["false"].append(row["id"])
                elif label is not None and not right and half != "all":
                    t["miss"].append(row["id"])
    out: dict = {"items": len(rows), "fixture": path.name}
    for (name, domain, half), t in sorted(tallies.items()):
        entry = _rates(t["read"], t["read_right"], t["committed"], t["hit"])
        if half != "all":
            entry |= {"false_reads": t["false"], "misses": t["miss"]}
        out.setdefault(name, {}).setdefault(domain, {})[half] = entry
    return out


_JUDGE = """
import json, resource, sys, threading, time
resource.setrlimit(resource.RLIMIT_AS, ({mem}, {mem}))
reader, where, answer = sys.argv[1], sys.argv[2], sys.argv[3]
def judge():
    if reader == "ours":
        from core.tasks.checkers import math_equal
        return math_equal(answer, "42")
    from math_verify import parse, verify
    t = None if where == "thread" else 5
    return verify(parse("$42$", parsing_timeout=t), parse("$" + answer + "$", parsing_timeout=t),
                  timeout_seconds=t)
out = {{}}
def run():
    t0 = time.perf_counter()
    try:
        out["equal"] = bool(judge())
    except BaseException as err:  # MemoryError under the limit, math-verify's own refusals
        out["error"] = type(err).__name__
    finally:
        out["seconds"] = time.perf_counter() - t0
if where == "main":
    run()
else:
    worker = threading.Thread(target=run)
    worker.start()
    worker.join()
print(json.dumps(out))
"""


def judge_once(reader: str, where: str, answer: str, limit_s: float) -> dict:
    script = _JUDGE.format(mem=MEMORY_BYTES)
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, "-c", script, reader, where, answer],
            capture_output=True,
            text=True,
            timeout=limit_s,
            cwd=ROOT,
        )
    except subprocess.TimeoutExpired:
        return {"finished": False, "seconds": round(time.perf_counter() - t0, 2)}
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        return {"finished": False, "crashed": proc.stderr.strip().splitlines()[-1:]}
    result = json.loads(lines[-1])
    return {
        "finished": "equal" in result,
        "equal": result.get("equal"),
        "error": result.get("error"),
        "seconds": round(result["seconds"], 3),
    }


def hostile(limit_s: float) -> dict:
    out: dict = {}
    for reader in ("ours", "math_verify"):
        for where in ("main", "thread"):
            runs = [judge_once(reader, where, answer, limit_s) for answer in HOSTILE]
            done = [r for r in runs if r["finished"]]
            out[f"{reader}/{where}"] = {
                "finished": len(done),
                "judged_wrong": sum(r["equal"] is False for r in done),
                "slowest_s": max((r["seconds"] for r in done), default=None),
                "unfinished": [
                    a[:30] for a, r in zip(HOSTILE, runs, strict=True) if not r["finished"]
                ],
            }
    return {"answers": len(HOSTILE), "limit_s": limit_s, "memory_gb": MEMORY_BYTES / 1024**3, **out}


def main() -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--limit-s",
        type=float_in(1, 600),
        default=20.0,
        help="wall-clock limit per hostile answer (seconds)",
    )
    parser.add_argument("--replies", type=Path, default=REPLIES)
    parser.add_argument("--fixture", type=Path, default=FIXTURE)
    parser.add_argument("--part", choices=("reader", "recorded", "hostile", "all"), default="all")
    args = parser.parse_args()
    try:
        import math_verify  # noqa: F401
    except ImportError:
        parser.error("this benchmark compares with math-verify: pip install math-verify")
    result = {}
    if args.part in ("reader", "all"):
        with user_errors():
            if not args.fixture.is_file():
                raise UserError(f"--fixture {args.fixture} is not a file.")
            result["reader"] = reader_part(args.fixture)
    if args.part in ("recorded", "all"):
        result["recorded"] = recorded(args.replies)
    if args.part in ("hostile", "all"):
        result["hostile"] = hostile(args.limit_s)
    result["load_average"] = [round(x, 2) for x in __import__("os").getloadavg()]
    run_main(result)


if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    main()
