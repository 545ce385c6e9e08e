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
