"""Makes the answer reader's labelled fixture from real SmolLM2-135M replies (issue 32).

The fixture, ``tests/core/tasks/data/reader_replies.jsonl``, gathers real replies of the
shipped model to the project's own prompts from three sources, one command each (rows of
the other sources, and the hand-written hostile items of issue 32, are kept):

    # the calibration tests' recorded store (math; 3 agents, 2 rounds, 48-token caps)
    PYTHONPATH=$PWD python -m benchmarks.record_replies \
        --from-store tests/core/backends/data/smollm_real.duckdb.gz
    # issue 18's recorded replies (gsm8k and mcq; round 0 and the decision agent)
    PYTHONPATH=$PWD python -m benchmarks.record_replies \
        --from-issue18 tests/core/tasks/data/smollm_replies.jsonl    # and ..._heldout.jsonl
    # new episodes: eval --backend local with the local recipe (math, gsm8k, mcq)
    PYTHONPATH=$PWD python -m benchmarks.record_replies [--db /tmp/reader_replies.duckdb]
    # a fresh held-out batch (issue 32, second round): other episodes, unseen tasks only
    PYTHONPATH=$PWD python -m benchmarks.record_replies --batch heldout-2 --db /tmp/h2.duckdb
    # the third (issue 32, third round): episodes 200-232, arith too
    PYTHONPATH=$PWD python -m benchmarks.record_replies --batch heldout-3 --db /tmp/h3.duckdb

The last two start the local model once (as the local recipe serves it), runs the episodes of
:data:`PLAN` through the real CLI (``eval --backend local --idle call --no-cache``: the
recipe's prompts, caps and conversation layout; every agent called every round, then the
decision agent) and reads every reply back from the DuckDB store the runs logged to,
rewriting the fixture after each run. A reply repeated word for word by the same role on
the same task is kept once. ``--batch heldout-2`` runs :data:`PLAN_HELDOUT_2` instead and
puts every reply in the split ``heldout-2`` (source ``eval:heldout-2``), dropping replies
to a task the fixture already holds: a held-out half read by no one before it was scored;
``--batch heldout-3`` likewise (:data:`PLAN_HELDOUT_3`, split ``heldout-3``).

One JSON line per reply, the design of ``smollm_replies.jsonl`` plus fields: ``id``,
``kind`` (agent | decision), ``benchmark``, ``task_id``, ``role``, ``action``, ``round``,
``max_tokens`` (the call's cap), ``reply``, ``usage``, ``at_cap`` (the reply used its whole
cap: cut off), ``split`` (``dev`` or ``heldout``, fixed by the task, :func:`split_of`: the
reader is changed while looking at ``dev`` only; ``heldout-2`` for the fresh batch),
``source``, and the label, written by
hand by reading the reply: ``reads_as`` (the answer it commits to, or null) and
``reason`` (one line). A rerun keeps the labels of replies whose text did not change and
leaves new ones null with an empty reason, for review.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import duckdb

from core.backends.local_backend import LOCAL_MAX_TOKENS
from core.backends.local_server import serve
from core.backends.registry import local_model_server
from core.team.options import TeamOptions

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "core" / "tasks" / "data" / "reader_replies.jsonl"
PLAN = (
    ("mcq", "random", 3, 0),
    ("mcq", "full", 3, 3),
    ("gsm8k", "random", 3, 0),
    ("gsm8k", "debate", 3, 3),
    ("math", "random", 3, 0),
    ("math", "star", 3, 3),
)
"""(benchmark, fixed policy, episodes, first held-out episode): ``random`` gives every
action (execute_verify's re-derivation included), the others the hub and debate prompts."""
PLAN_HELDOUT_2 = (
    ("math", "random", 6, 100),
    ("gsm8k", "random", 6, 100),
    ("mcq", "random", 3, 100),
    ("math", "debate", 4, 110),
    ("gsm8k", "star", 4, 110),
    ("mcq", "debate", 2, 110),
    ("math", "single", 3, 120),
    ("gsm8k", "single", 3, 120),
)
"""The fresh held-out batch (issue 32, after the first held-out half had been read):
episodes far from :data:`PLAN`'s, maths above all, each kind early (a slow machine may
stop it part-way); ``single`` adds replies of an agent alone."""
PLAN_HELDOUT_3 = (
    ("arith", "random", 5, 200),
    ("math", "random", 4, 200),
    ("gsm8k", "debate", 3, 210),  # all three tasks were in the fixture: nothing kept
    ("mcq", "random", 3, 200),
    ("arith", "single", 3, 220),
    ("gsm8k", "random", 2, 200),
    ("math", "star", 3, 210),
    ("gsm8k", "single", 2, 221),
    ("arith", "debate", 3, 210),
    ("mcq", "star", 2, 203),
    ("math", "single", 2, 220),
    ("math", "debate", 3, 230),
    ("arith", "star", 3, 230),
)
"""The third held-out batch (issue 32, to judge the reader change designed on the dev
half and the read held-out halves): episodes 200-232, which no earlier batch played, and
``arith`` (the easy maths family, whose replies commit to an answer more often) beside
math, gsm8k and mcq; each (benchmark, policy) once, as :func:`logged_episodes` counts;
every benchmark and policy early (a loaded machine gave ~8 tokens/s: it may be stopped
part-way). Episode ``i`` plays task ``i mod n`` of the eval split, which holds 23 gsm8k and
15 mcq tasks, most in the fixture already: their first episodes are where unseen ones are
(gsm8k 200, 201, 221, 222; mcq 202-204)."""
BATCHES = {"eval": PLAN, "heldout-2": PLAN_HELDOUT_2, "heldout-3": PLAN_HELDOUT_3}
ROUNDS = 2


def split_of(task_id: str) -> str:
    """``dev`` or ``heldout``, fixed by the task (replies to one task stay in one half)."""
    return "dev" if hashlib.sha256(task_id.encode()).digest()[0] % 2 == 0 else "heldout"


def run_episodes(db: Path, env: dict[str, str], plan: tuple = PLAN) -> Iterator[None]:
    """Runs ``plan``'s evaluations one by one into ``db``, yielding after each; one that
    ``db`` holds whole already (a rerun with the same ``--db``) is not run again."""
    for benchmark, policy, episodes, first in plan:
        if logged_episodes(db, benchmark, policy) >= episodes:
            continue
        cmd = [
            sys.executable, "-m", "core.cli", "eval", "--backend", "local",
            "--benchmark", benchmark, "--policy", policy, "--episodes", str(episodes),
            "--first", str(first), "--rounds", str(ROUNDS), "--idle", "call",
            "--no-cache", "--db", str(db), "--json",
        ]  # fmt: skip
        print(" ".join(cmd[2:]), file=sys.stderr, flush=True)
        subprocess.run(cmd, check=True, env=env, cwd=ROOT, stdout=subprocess.DEVNULL)
        yield


def logged_episodes(db: Path, benchmark: str, policy: str) -> int:
    """Episodes of ``benchmark`` played by ``policy`` that ``db`` holds (0 without ``db``)."""
    if not db.is_file():
        return 0
    with duckdb.connect(str(db), read_only=True) as con:
        sql = "SELECT count(*) FROM episodes e JOIN runs r ON r.id = e.run_id"
        sql += " WHERE e.benchmark = ? AND r.policy = ?"
        return con.execute(sql, [benchmark, policy]).fetchone()[0]


_STEPS = """
SELECT e.benchmark, e.domain, e.task_id, r.policy, r.config, s.round, s.agent, s.role,
       s.action, s.text, s.prompt_tokens, s.completion_tokens
FROM agent_steps s JOIN episodes e USING (run_id, episode) JOIN runs r ON r.id = s.run_id
WHERE s.completion_tokens > 0 AND s.text IS NOT NULL
ORDER BY e.benchmark, s.run_id, s.episode, s.round, s.seq
"""


def read_steps(
    db: Path, old: dict[tuple, dict], source: str = "eval", tag: str = "", split: str = ""
) -> list[dict]:
    """Every called reply of the logged episodes, as fixture rows (a reply whose text
    repeats an earlier one's for the same task and role is kept once); ``split``, when
    given, is every row's (else :func:`split_of` the task)."""
    with duckdb.connect(str(db), read_only=True) as con:
        steps = con.execute(_STEPS).fetchall()
    rows, seen, ids = [], set(), set()
    for (
        bench,
        domain,
        task_id,
        policy,
        config,
        rnd,
        agent,
        role,
        action,
        text,
        prompt,
        done,
    ) in steps:
        if (task_id, role, text) in seen:
            continue
        seen.add((task_id, role, text))
        kind = "decision" if agent < 0 else "agent"
        # A recording that set one cap for every call says so in its run config.
        cap = json.loads(config).get("recording", {}).get("max_tokens")
        cap = cap or LOCAL_MAX_TOKENS[(domain, kind)]
        label = old.get((bench, task_id, role, text), {})
        row_id = f"{tag}{task_id}/{policy}/r{rnd}/{role}"
        while row_id in ids:  # two episodes of one task and policy: ids stay unique
            row_id += "+"
        ids.add(row_id)
        rows.append(
            {
                "id": row_id, "kind": kind, "benchmark": bench, "task_id": task_id, "role": role,
                "action": action, "round": rnd, "max_tokens": cap, "reply": text,
                "usage": {"prompt_tokens": prompt, "completion_tokens": done},
                "at_cap": done >= cap, "split": split or split_of(task_id),
                "source": source, "reads_as": label.get("reads_as"),
                "reason": label.get("reason", ""),
            }
        )  # fmt: skip
    return rows


def from_store(path: Path, old: dict[tuple, dict]) -> list[dict]:
    """The replies logged in an existing store (``.duckdb`` or ``.duckdb.gz``)."""
    with tempfile.TemporaryDirectory() as tmp:
        db = path
        if path.suffix == ".gz":
            db = Path(tmp) / path.stem
            db.write_bytes(gzip.decompress(path.read_bytes()))
        return read_steps(db, old, source=f"store:{path.name}", tag="store/")


def from_issue18(path: Path, old: dict[tuple, dict]) -> list[dict]:
    """The replies of ``tests/core/tasks/data/record_smollm_replies.py`` (issue 18), in
    this fixture's schema (their old ``reads_as`` is dropped: every row is labelled anew)."""
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
        r = json.loads(line)
        label = old.get((r["benchmark"], r["task_id"], r["role"], r["reply"]), {})
        rows.append(
            {
                "id": f"{r['task_id']}/{path.stem}-{n}/r0/{r['role']}", "kind": r["kind"],
                "benchmark": r["benchmark"], "task_id": r["task_id"], "role": r["role"],
                "action": r["action"], "round": 0, "max_tokens": r["max_tokens"],
                "reply": r["reply"], "usage": r["usage"],
                "at_cap": r["finish_reason"] == "length", "split": split_of(r["task_id"]),
                "source": f"issue18:{path.name}", "reads_as": label.get("reads_as"),
                "reason": label.get("reason", ""),
            }
        )  # fmt: skip
    return rows


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--db", type=Path, help="DuckDB file to log to (default: a temporary one)")
    parser.add_argument(
        "--from-store", type=Path, help="read the replies of this store instead of recording"
    )
    parser.add_argument(
        "--from-issue18", type=Path, help="read this smollm_replies*.jsonl instead of recording"
    )
    parser.add_argument(
        "--batch", choices=tuple(BATCHES), default="eval", help="which episodes to record"
    )
    args = parser.parse_args()
    old: dict[tuple, dict] = {}
    rows: list[dict] = []
    if args.out.is_file():
        rows = [json.loads(line) for line in args.out.read_text(encoding="utf-8").splitlines()]
        old = {(r["benchmark"], r["task_id"], r["role"], r["reply"]): r for r in rows}
    if args.from_store:
        new = from_store(args.from_store, old)
    elif args.from_issue18:
        new = from_issue18(args.from_issue18, old)
    else:
        new = []
    if new:  # rows of other sources (the hand-written hostile items too) stay as they are
        write(args.out, [r for r in rows if r["source"] != new[0]["source"]] + new)
        return
    with tempfile.TemporaryDirectory() as tmp:
        db = args.db or Path(tmp) / "replies.duckdb"
        # The server eval's own options ask for (engine, slots), started once for all runs.
        server = serve(local_model_server(TeamOptions(backend="local")))
        env = {**os.environ, "PYTHONPATH": str(ROOT), **server.attach_env()}
        source = "eval" if args.batch == "eval" else f"eval:{args.batch}"
        kept = [r for r in rows if r["source"] != source]
        seen = {(r["benchmark"], r["task_id"]) for r in kept}
        try:  # written after each run: labelling can start
            for _ in run_episodes(db, env, BATCHES[args.batch]):
                write(args.out, kept + fresh_steps(db, old, args.batch, seen))
        finally:
            server.stop()


def fresh_steps(db: Path, old: dict[tuple, dict], batch: str, seen: set[tuple]) -> list[dict]:
    """The batch's rows: :data:`PLAN`'s as before; a later batch's on unseen tasks only."""
    if batch == "eval":
        return read_steps(db, old)
    rows = read_steps(db, old, source=f"eval:{batch}", tag=f"{batch}/", split=batch)
    return [r for r in rows if (r["benchmark"], r["task_id"]) not in seen]


def write(out: Path, rows: list[dict]) -> None:
    with out.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"wrote {len(rows)} replies to {out}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
