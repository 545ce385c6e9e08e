"""The answer reader on its labelled fixture (issue 32): each reply reads as its label.

``data/reader_replies.jsonl`` holds 603 real SmolLM2-135M replies to the project's prompts
(``benchmarks/record_replies.py``: new ``eval --backend local`` episodes with the local
recipe, the calibration tests' recorded store, issue 18's recorded replies; maths: math
and gsm8k; multiple choice: mcq; 202 of them a fresh held-out batch, ``heldout-2``) and 7
hostile cases of issue 32, and a third fresh batch, ``heldout-3`` (209 replies, arith too,
labelled before the reader was scored on it, then scored once), each labelled by reading
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
    # heldout-2 (a fresh batch on unseen tasks, scored once after the rule of two answers)
    "heldout-2/gsm8k-test-0821/random/r0/verifier",  # "The answer was 0.4937123." (past tense)
    "heldout-2/gsm8k-test-0727/random/r0/solver",  # a bare number, then an explanation
    "heldout-2/gsm8k-test-0552/random/r1/analyst",  # "The answer is 10, the answer is indeed 10"
    "heldout-2/gsm8k-test-0810/random/r0/coder",  # "... is: 4", then "Your answer: 1" lines
    "heldout-2/gsm8k-test-0810/random/r0/analyst",  # the same shape
    "heldout-2/gsm8k-test-0810/random/r0/verifier",  # a bare number, then a new question
    "heldout-2/gsm8k-test-0810/random/r1/coder",  # "... is: 201", then "Your answer: 1" lines
    "heldout-2/gsm8k-test-0810/random/r1/verifier",  # a bare number, then a new question
    "heldout-2/gsm8k-test-0563/star/r0/verifier",  # the last "Your answer is:" has no value
    "heldout-2/gsm8k-test-0563/star/r1/verifier",  # the same shape
    "heldout-2/gsm8k-test-0646/single/r0/solver",  # a bare number, then the question
    "heldout-2/math-s0-000537/random/r0/solver",  # "Answer: <final answer>" echoed after it
    "heldout-2/math-s0-000560/random/r0/verifier",  # a bare number, then a list of 2s
    "heldout-2/math-s0-000560/random/r1/verifier",  # the same shape
    "heldout-2/math-s0-000560/random/r2/decision",  # "answer is 393734989, no logical answer"
    "heldout-2/math-s0-000594/debate/r0/coder",  # "Omar has 14 + 3 = 17 now." (no marker)
    "heldout-2/math-s0-000594/debate/r0/analyst",  # "is: 3 + 1 = 4", then partners' answers
    "heldout-2/math-s0-000594/debate/r1/solver",  # "Therefore, Omar has 16 more books now."
    "heldout-2/math-s0-000594/debate/r1/coder",  # "Omar has 12 + 3 = 16 now." (no marker)
    "heldout-2/math-s0-000594/debate/r1/analyst",  # "is: 2 + 1 = 3", then partners' answers
    "heldout-2/math-s0-000603/debate/r0/coder",  # "The answer you're looking for is 23."
    "heldout-2/math-s0-000603/debate/r1/coder",  # the same shape, 22
    "heldout-2/mcq-085/random/r0/analyst",  # 'The answer to the question "Who ...?" is A)'
    "heldout-2/mcq-085/random/r2/decision",  # a bare "D", then the echoed instruction
    # heldout-2 once seen: reported speech reads as none ("You explain that the answer is")
    "heldout-2/math-s0-000546/random/r1/solver",
    # heldout-3 (a fresh batch on unseen tasks, scored once after the third pass's rules)
    "heldout-3/arith-s0-000060/random/r0/solver",  # 'The answer to the question ... is 50.'
    "heldout-3/arith-s0-000064/random/r1/coder",  # 'Her answer is 180' and 'The answer is 180.' repeated, cut o
    "heldout-3/arith-s0-000123/debate/r0/solver",  # 'The final answer is: 3 * 5 = 15', then 'This is incorrect.
    "heldout-3/arith-s0-000123/debate/r0/analyst",  # 'So, Noah now has 12 marbles.' (a result without a marker, t
    "heldout-3/arith-s0-000123/debate/r1/analyst",  # 'So, Noah now has 11 marbles.' (a result without a marker, t
    "heldout-3/arith-s0-000271/star/r0/coder",  # '8 - 4 = 4 more than ...', then '**Final answer: 8**' and 'L
    "heldout-3/arith-s0-000271/star/r1/solver",  # 'This is your final answer. The answer is 15.' repeated, cut
    "heldout-3/arith-s0-000271/star/r1/coder",  # 'You have a total of 4 * 2 + 8 = 16 books.' then 'This is yo
    "heldout-3/gsm8k-test-0440/random/r1/solver",  # 'The answer: 360' repeated; the last, 'The answer: 36', cut
    "heldout-3/gsm8k-test-0054/single/r0/solver",  # 'The answer is 22, but I'm not sure if it's correct' twice (
    "heldout-3/math-s0-000098/random/r0/analyst",  # opens with a bare 1, then boilerplate with empty 'The answer
    "heldout-3/math-s0-000098/random/r0/verifier",  # 'He has 7 pencils left.' (a result without a marker, the onl
    "heldout-3/math-s0-000136/star/r1/solver",  # the whole reply is 'A: 27' (A: for Answer:, as in its round-
    "heldout-3/math-s0-000139/star/r0/coder",  # steps ending 'In total, Omar earns 3*6 = 18 dollars.', then
    "heldout-3/math-s0-000139/star/r1/coder",  # steps ending 'In total, he earns 3*18 = 54 dollars.', then a
    "heldout-3/math-s0-000186/single/r0/solver",  # opens '100', 'Answer: 100', 'this is the final answer'
    "heldout-3/math-s0-000236/debate/r1/coder",  # '20 - 8 = 12 shells', 'The answer is 12', then '>>>' and the
}
"""Replies that commit to an answer the reader does not read (it reads nothing)."""
FALSE_READS = {
    # held-out half: an answer stated, then contradicted by a number no marker states
    "store/math-s0-000028/debate/r1/analyst": "6",  # "The answer is 6:" ... "197 bags"
    # heldout-3: scored once (benchmarks/RESULTS.md, issue 32, third pass)
    "heldout-3/arith-s0-000060/random/r0/coder": "100",  # 'Your first answer is: 100' beside edge cases 100
    "heldout-3/arith-s0-000064/random/r0/verifier": "180",  # echoes its role prompt and Agent 1's text (answer
    "heldout-3/gsm8k-test-0440/random/r0/verifier": "360",  # '<<<' then the coder's reply word for word (its 'T
    "heldout-3/math-s0-000139/star/r0/verifier": "100",  # '100: 321 12 321 ...' a run of the problem's numbe
    "heldout-3/math-s0-000139/star/r1/verifier": "100",  # '100: 321 321 ...' a run of the problem's number;
    "heldout-3/mcq-080/random/r0/coder": "A",  # 'D) Karl Marx', then 'The answer is A.': two choic
    "heldout-3/mcq-034/star/r0/solver": "C",  # 'C) selection sort', then 'indeed A', 'actually C'
    "heldout-3/mcq-034/star/r1/verifier": "A",  # 'A) Bubble sort': no option has that text
    "heldout-3/mcq-034/star/r2/decision": "B",  # a bare 'D', then 'The answer is B.': two choices
}
"""Replies the reader reads an answer from that is not the label, and what it reads
(benchmarks/RESULTS.md, issue 32: the held-out precision)."""


def test_the_fixture_is_real_labelled_and_split():
    recorded = [r for r in ROWS if r["source"] != "hostile"]
    assert len(recorded) >= 200
    # eval --backend local (the local recipe), the calibration store, issue 18's recorder
    assert {r["source"].split(":")[0] for r in recorded} == {"eval", "store", "issue18"}
    assert {r["benchmark"] for r in recorded} == {"math", "gsm8k", "mcq", "arith"}
    # dev: read while the rules changed; heldout: scored once, then read; heldout-2: a
    # fresh batch on unseen tasks, labelled before the reader was scored on it
    assert {r["split"] for r in recorded} == {"dev", "heldout", "heldout-2", "heldout-3"}
    assert len({r["id"] for r in ROWS}) == len(ROWS)
    for row in recorded:
        assert row["usage"]["completion_tokens"] > 0 and row["usage"]["prompt_tokens"] > 100
    for row in ROWS:
        assert "reads_as" in row and row["reason"].strip(), row["id"]
    # Replies of both kinds: answers to read and replies that commit to none.
    assert sum(r["reads_as"] is None for r in recorded) >= 20
    assert sum(r["reads_as"] is not None for r in recorded) >= 20
    assert set(MISSES) | set(FALSE_READS) <= {r["id"] for r in ROWS}


def test_the_third_batch_was_labelled_on_unseen_tasks():
    fresh = [r for r in ROWS if r["split"] == "heldout-3"]
    assert len(fresh) >= 200 and sum(r["reads_as"] is not None for r in fresh) >= 60
    assert all(r["source"] == "eval:heldout-3" and r["reason"].strip() for r in fresh)
    seen = {(r["benchmark"], r["task_id"]) for r in ROWS if r["split"] != "heldout-3"}
    assert not seen & {(r["benchmark"], r["task_id"]) for r in fresh}
    assert len({r["id"] for r in ROWS}) == len(ROWS)


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
