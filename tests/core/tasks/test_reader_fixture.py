"""The answer reader on its labelled fixture (issue 32): each reply reads as its label.

``data/reader_replies.jsonl`` holds 401 real SmolLM2-135M replies to the project's prompts
(``benchmarks/record_replies.py``: new ``eval --backend local`` episodes with the local
recipe, the calibration tests' recorded store, issue 18's recorded replies; maths: math
and gsm8k; multiple choice: mcq) and 7 hostile cases of issue 32, each labelled by reading
it: the answer it commits to (``reads_as``, null when none) and why (``reason``). The reader
may miss a committed answer (:data:`MISSES`: it reads nothing there, a lost recall); it
reads an answer that is not the label only where :data:`FALSE_READS` says.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.backends.prompts import parse_answer
from core.tasks.checkers import math_equal, read_answer
from tests.core.tasks.test_real_replies import task_of_row

FIXTURE = Path(__file__).with_name("data") / "reader_replies.jsonl"
ROWS = [json.loads(line) for line in FIXTURE.read_text(encoding="utf-8").splitlines()]

MISSES = {
    # dev half: a result stated without an answer marker
    "gsm8k-test-0664/smollm_replies-44/r0/solver",  # "Therefore, ... = 9 days"
    "gsm8k-test-0946/smollm_replies_heldout-12/r0/solver",  # "... = 64 / 2 = 32."
    "store/math-s0-000005/debate/r0/solver",  # "..., which will be ... = 87."
    "store/math-s0-000005/debate/r0/analyst",
    "store/math-s0-000005/debate/r0/verifier",
    "store/math-s0-000005/random/r1/solver",
    "store/math-s0-000005/random/r1/verifier",
    # held-out half (scored once, after the rules were fixed)
    "gsm8k-test-0940/smollm_replies_heldout-16/r0/solver",  # "Sure, 10."
    "gsm8k-test-0940/smollm_replies_heldout-17/r0/analyst",  # "which is 8 * 5 = 40 minutes"
    "gsm8k-test-1098/smollm_replies_heldout-23/r0/decision",  # "4x + 0.5 x 11 = 6x"
    "gsm8k-test-1300/random/r0/analyst",  # "answer is: 8." then "The final answer must be ..."
    "gsm8k-test-1300/random/r1/analyst",  # the same shape, 12
    "math-s0-000009/random/r0/verifier",  # the last "answer is: 6 (rounding" is cut off
    "math-s0-000009/random/r2/decision",  # "answer is: 34" then "a single final answer with"
    "math-s0-000024/star/r0/solver",  # "The answer to this puzzle is 2."
    "mcq-067/random/r2/decision",  # "The correct answer is indeed D."
    # two answers stated (a list number after "answer:", then the final answer): none
    "gsm8k-test-0161/smollm_replies_heldout-3/r0/decision",  # "answer:** **1. The final ... 50"
}
"""Replies that commit to an answer the reader does not read (it reads nothing)."""
FALSE_READS = {
    # held-out half: an answer stated, then contradicted by a number no marker states
    "store/math-s0-000028/debate/r1/analyst": "6",  # "The answer is 6:" ... "197 bags"
}
"""Replies the reader reads an answer from that is not the label, and what it reads
(benchmarks/RESULTS.md, issue 32: the held-out precision)."""


def test_the_fixture_is_real_labelled_and_split():
    recorded = [r for r in ROWS if r["source"] != "hostile"]
    assert len(recorded) >= 200
    # eval --backend local (the local recipe), the calibration store, issue 18's recorder
    assert {r["source"].split(":")[0] for r in recorded} == {"eval", "store", "issue18"}
    assert {r["benchmark"] for r in recorded} == {"math", "gsm8k", "mcq"}
    assert {r["split"] for r in recorded} == {"dev", "heldout"}
    assert len({r["id"] for r in ROWS}) == len(ROWS)
    for row in recorded:
        assert row["usage"]["completion_tokens"] > 0 and row["usage"]["prompt_tokens"] > 100
    for row in ROWS:
        assert "reads_as" in row and row["reason"].strip(), row["id"]
    # Replies of both kinds: answers to read and replies that commit to none.
    assert sum(r["reads_as"] is None for r in recorded) >= 20
    assert sum(r["reads_as"] is not None for r in recorded) >= 20
    assert set(MISSES) | set(FALSE_READS) <= {r["id"] for r in ROWS}


@pytest.mark.parametrize("row", ROWS, ids=[r["id"] for r in ROWS])
def test_the_reader_returns_the_label(row):
    task, label = task_of_row(row), row["reads_as"]
    got = read_answer(task, row["reply"])
    assert parse_answer(task, row["reply"]) == got  # what is stored is what is scored
    if row["id"] in FALSE_READS:
        assert got == FALSE_READS[row["id"]] and got != label
    elif row["id"] in MISSES:
        assert got is None and label is not None
    elif label is None or got is None:
        assert got is label, row["reason"]
    elif task.domain == "math":
        assert math_equal(got, label), row["reason"]
    else:
        assert got == label, row["reason"]
