"""Answer reading on real replies of SmolLM2-135M to the project's prompts (issue 18).

``data/smollm_replies.jsonl`` holds replies recorded from the local model by
``data/record_smollm_replies.py`` (GSM8K and the shipped multiple-choice set; round-0
agent turns and the decision agent), each labelled by hand with the answer a careful
reader finds in it (``reads_as``, null when the reply commits to none).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.backends.prompts import parse_answer
from core.tasks.checkers import math_equal, read_answer
from core.tasks.registry import load_benchmark

REPLIES = Path(__file__).with_name("data") / "smollm_replies.jsonl"
ROWS = [json.loads(line) for line in REPLIES.read_text(encoding="utf-8").splitlines()]
_TASKS: dict[tuple[str, str], object] = {}


def task_of_row(row: dict):
    """The task a recorded reply answered (its benchmark and task id), loaded once."""
    key = (row["benchmark"], row["task_id"])
    if key not in _TASKS:
        source = load_benchmark(row["benchmark"])
        for i in range(len(source)):
            task = source.get(i)
            _TASKS[(task.benchmark, task.task_id)] = task
    return _TASKS[key]


def _id(row: dict) -> str:
    return f"{row['task_id']}-{row['role']}"


def test_the_recording_is_real_and_labelled():
    assert {r["benchmark"] for r in ROWS} == {"gsm8k", "mcq"}
    assert {r["kind"] for r in ROWS} == {"agent", "decision"}
    for row in ROWS:
        usage = row["usage"]
        assert usage["completion_tokens"] > 0 and usage["prompt_tokens"] > 100, _id(row)
        assert "reads_as" in row and row["reply"].strip(), _id(row)
    # The recording has what the issue names: cut-off replies and replies without a
    # final-answer line, not only well-formed ones.
    assert any(r["finish_reason"] == "length" for r in ROWS)
    assert any("answer" not in r["reply"].lower() for r in ROWS)


KNOWN_MISREADS: dict[str, str | None] = {
    # Issue 32's reader reads an answer after a marker only. The five false reads this
    # list held before (a number in a rambling last sentence, JavaScript assigning an
    # ``answer``) now read nothing, as labelled; these two labelled replies do too:
    "gsm8k-test-0919-analyst": None,  # "The answer is 0.5% of the class's profit": a share
    "gsm8k-test-0664-solver": None,  # "Therefore, he will spend ... = 9 days": no marker
}
"""Replies the reading gets wrong against this file's labels, and what it reads instead.
Issue 32 labels the first of them "no answer" (tests/core/tasks/data/reader_replies.jsonl);
listed so that a change in what is read shows (benchmarks/RESULTS.md, answer reading)."""


def _reads_right(task, got: str | None, label: str | None) -> bool:
    if label is None or got is None:
        return got is label
    return math_equal(got, label) if task.domain == "math" else got == label


@pytest.mark.parametrize("row", ROWS, ids=_id)
def test_every_recorded_reply_reads_as_a_careful_reader_reads_it(row):
    task = task_of_row(row)
    got = read_answer(task, row["reply"])
    assert parse_answer(task, row["reply"]) == got  # what is stored is what is scored
    if _id(row) in KNOWN_MISREADS:
        assert got == KNOWN_MISREADS[_id(row)] and not _reads_right(task, got, row["reads_as"])
    else:
        assert _reads_right(task, got, row["reads_as"]), got


def test_what_the_first_real_episodes_could_not_read_is_read():
    # Issue 18 (a): "The answer is: 96", "#### 22", "The correct answer is 13." (option A)
    # and "Boron" (option C) all stored no answer; replies that only echo the options
    # must stay unreadable. Here, in real replies:
    readable = [r for r in ROWS if r["reads_as"] is not None and _id(r) not in KNOWN_MISREADS]
    assert sum(read_answer(task_of_row(r), r["reply"]) is not None for r in readable) == len(
        readable
    )
    echoes = [r for r in ROWS if r["benchmark"] == "mcq" and r["reads_as"] is None]
    assert len(echoes) >= 8 and all(read_answer(task_of_row(r), r["reply"]) is None for r in echoes)


def test_held_out_replies_read_as_measured():
    # Recorded and labelled after the reading was written (benchmarks/RESULTS.md): 17 of
    # 24 then; 19 with issue 32's reader, which reads after a marker only: it misses
    # "Sure, 10.", "... = 64 / 2 = 32.", "which is 8 * 5 = 40 minutes", "... = 6x" (an
    # expression in x after a calculation) and the "4" of a reply whose final answer is
    # "3-5" (issue 32 labels that one "no answer"). 18 since a reply that states two
    # different answers gives none (issue 32): "**Your answer:** **1. The final answer is
    # 50**" states 1 (a list number read after "answer:") and 50.
    path = REPLIES.with_name("smollm_replies_heldout.jsonl")
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    right = [
        _reads_right(task_of_row(r), read_answer(task_of_row(r), r["reply"]), r["reads_as"])
        for r in rows
    ]
    assert (sum(right), len(rows)) == (18, 24)
