"""``bench extraction`` compares our maths reading with math-verify on the recorded real
replies and names every reply each one misreads."""

from __future__ import annotations

import json

from tests.benchmarks.test_speed_benchmarks import bench
from tests.core.tasks.test_real_replies import KNOWN_MISREADS, ROWS


def test_recorded_part_counts_what_each_reader_gets_right():
    proc = bench("extraction", "--part", "recorded")
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)["recorded"]
    gsm8k = [r for r in ROWS if r["benchmark"] == "gsm8k"]
    assert out["replies"] == len(gsm8k)
    ours = out["ours"]
    missed = {m.split(":")[0].replace("/", "-") for m in ours["misread"]}
    assert missed == set(KNOWN_MISREADS)
    assert ours["read_right"] == len(gsm8k) - len(KNOWN_MISREADS)
    mv = out["math_verify"]
    assert mv["read_right"] == len(gsm8k) - len(mv["misread"])
    assert 0 <= mv["verdict_right"] <= len(gsm8k)


def test_a_bad_limit_is_one_sentence():
    proc = bench("extraction", "--limit-s", "0")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1


def test_reader_part_prints_precision_and_recall_per_reader_domain_and_half():
    from benchmarks.extraction import FIXTURE, fixture_tasks, same_answer
    from core.tasks.checkers import read_answer

    proc = bench("extraction", "--part", "reader")
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)["reader"]
    rows = [json.loads(line) for line in FIXTURE.read_text(encoding="utf-8").splitlines()]
    assert out["items"] == len(rows)
    tasks = fixture_tasks(rows)
    for domain in ("math", "mcq"):
        for half in ("dev", "heldout", "heldout-2", "heldout-3"):
            mine = [
                (read_answer(tasks[(r["benchmark"], r["task_id"])], r["reply"]), r)
                for r in rows
                if r["split"] == half and tasks[(r["benchmark"], r["task_id"])].domain == domain
            ]
            read = [(got, r) for got, r in mine if got is not None]
            right = [
                r
                for got, r in read
                if same_answer(tasks[(r["benchmark"], r["task_id"])], got, r["reads_as"])
            ]
            committed = [r for _, r in mine if r["reads_as"] is not None]
            ours = out["ours"][domain][half]
            assert (ours["read"], ours["read_right"], ours["committed"]) == (
                len(read),
                len(right),
                len(committed),
            )
            assert ours["precision"] == round(len(right) / len(read), 3)
            assert ours["false_reads"] == [r["id"] for got, r in read if r not in right]
            mv = out["math_verify"][domain][half]
            assert mv["committed"] == len(committed) and 0 <= mv["read_right"] <= mv["read"]


def test_a_missing_fixture_is_one_sentence():
    proc = bench("extraction", "--part", "reader", "--fixture", "/nonexistent.jsonl")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
