"""``jsonl:PATH`` loaders on small files of every layout, and every user mistake."""

from __future__ import annotations

import gzip
import json

import pytest

from core.errors import UserError
from core.tasks.checkers import check
from core.tasks.code import read_humaneval
from core.tasks.jsonl import JsonlSource, math_distractors
from core.tasks.registry import load_benchmark


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


GSM8K = [
    {
        "question": "Tom has 3 boxes of 400 pens and sells 166. How many are left?",
        "answer": "3 boxes hold 3*400=<<3*400=1200>>1200 pens.\n"
        "He has 1200-166=<<1200-166=1034>>1034 left.\n#### 1,034",
    },
    {
        "question": "Ann reads 5 pages a day for a week. How many pages?",
        "answer": "7*5=35\n#### 35",
    },
]


def test_gsm8k(tmp_path):
    source = JsonlSource(write(tmp_path / "gsm8k_test.jsonl", GSM8K), seed=0)
    assert source.layout == "gsm8k" and len(source) == 2
    task = next(t for t in source.tasks if t.task_id == "gsm8k-00001")
    assert (task.domain, task.benchmark, task.answer, task.difficulty) == (
        "math",
        "gsm8k",
        "1034",
        1,
    )
    assert len(set(task.distractors)) == 4 and "1034" not in task.distractors
    assert "4301" in task.distractors  # digit swap
    assert check(task, "So he has 1,034 pens left.\nAnswer: 1,034 pens") == 1.0
    assert check(task, task.distractors[0]) == 0.0


def test_math_layout(tmp_path):
    rows = [
        {
            "problem": "Compute $\\sin 30^\\circ \\cdot 1$.",
            "solution": "It is $\\boxed{\\frac{1}{2}}$.",
            "level": "Level 4",
            "type": "Precalculus",
        },
        {"problem": "What is $2+2$?", "solution": "$\\boxed{4}$", "level": "Level ?", "type": "x"},
    ]
    source = load_benchmark(f"jsonl:{write(tmp_path / 'math.jsonl', rows)}")
    task = next(t for t in source.tasks if t.task_id == "math-00001")
    assert (task.answer, task.difficulty, task.meta["type"]) == ("\\frac{1}{2}", 4, "Precalculus")
    assert check(task, "The answer is \\boxed{0.5}") == 1.0
    assert len(set(task.distractors)) == 4 and all(check(task, d) == 0.0 for d in task.distractors)
    other = next(t for t in source.tasks if t.task_id == "math-00002")
    assert other.difficulty == 3  # "Level ?" says nothing


def test_aime_layout_difficulty_from_name(tmp_path):
    rows = [{"id": "2025-I-1", "problem": "Find the sum ...", "answer": 70}]
    task = JsonlSource(write(tmp_path / "aime25.jsonl", rows)).get(0)
    assert (task.task_id, task.benchmark, task.answer, task.difficulty) == (
        "2025-I-1",
        "aime",
        "70",
        5,
    )
    plain = JsonlSource(write(tmp_path / "qa.jsonl", [{"question": "1+1?", "answer": "2"}])).get(0)
    assert (plain.task_id, plain.difficulty) == ("qa-00001", 3)
    explicit = [{"question": "1+1?", "answer": "2", "difficulty": 1}]
    assert JsonlSource(write(tmp_path / "aime_easy.jsonl", explicit)).get(0).difficulty == 1


def test_mmlu_pro_ten_options(tmp_path):
    options = [f"option number {i}" for i in range(9)] + ["the right one"]
    rows = [
        {
            "question_id": 70,
            "question": "Which is right?",
            "options": options,
            "answer": "J",
            "answer_index": 9,
            "category": "physics",
        },
        {"question": "Pick", "options": ["red", "blue", "green"], "answer_index": 1},
    ]
    source = JsonlSource(write(tmp_path / "mmlu_pro.jsonl", rows))
    task = next(t for t in source.tasks if t.task_id == "mmlu-pro-70")
    assert (task.domain, task.answer, len(task.choices), task.meta["subject"]) == (
        "mcq",
        "J",
        10,
        "physics",
    )
    assert "J) the right one" in task.question
    assert len(task.distractors) == 4 and "J" not in task.distractors
    assert check(task, "The answer is (J).") == 1.0
    assert check(task, "The answer is (A).") == 0.0
    small = next(t for t in source.tasks if t.task_id != "mmlu-pro-70")
    assert small.answer == "B" and set(small.distractors) == {"A", "C"}


def test_distractors_rank_similar_options_first(tmp_path):
    rows = [
        {
            "question": "Capital of Australia?",
            "options": ["Sydney", "the city of Canberra", "Paris", "the city of Melbourne"],
            "answer": "B",
        }
    ]
    assert JsonlSource(write(tmp_path / "m.jsonl", rows)).get(0).distractors[0] == "D"


def test_humaneval_layout(tmp_path):
    records = read_humaneval()[:3]
    path = tmp_path / "he.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in records)
    source = JsonlSource(path)
    assert len(source) == 3
    task = next(t for t in source.tasks if t.task_id == "HumanEval/0")
    assert task.domain == "code" and task.meta["entry_point"] == "has_close_elements"
    assert task.answer == records[0]["canonical_solution"]


def test_math_distractors_for_every_kind_of_answer():
    assert math_distractors("12") == ("13", "11", "24", "21")
    assert math_distractors("0") == ("1", "10", "2")
    assert "-7" not in math_distractors("7")  # no sign flips for non-negative answers
    assert len(set(math_distractors("-5"))) == 4
    assert all("frac" in d for d in math_distractors("\\frac{3}{4}"))
    assert math_distractors("2.5") == ("3.5", "5", "0.4", "1.5")
    symbolic = math_distractors("\\sqrt{3}")
    assert len(set(symbolic)) == 4 and "\\sqrt{3}" not in symbolic


# --------------------------------------------------------------------------- mistakes


def test_missing_file(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        load_benchmark(f"jsonl:{tmp_path / 'nope.jsonl'}")


def test_empty_file(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_text("\n  \n")
    with pytest.raises(UserError, match="is empty"):
        JsonlSource(path)


def test_bad_json_names_the_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(GSM8K[0]) + "\n\n{not json\n")
    with pytest.raises(UserError, match=r"line 3 is not valid JSON"):
        JsonlSource(path)


def test_line_that_is_not_an_object(tmp_path):
    path = tmp_path / "list.jsonl"
    path.write_text("[1, 2]\n")
    with pytest.raises(UserError, match="line 1 is not a JSON object"):
        JsonlSource(path)


def test_unknown_layout_lists_keys(tmp_path):
    with pytest.raises(UserError, match=r"unknown layout \(keys: foo, text\)"):
        JsonlSource(write(tmp_path / "x.jsonl", [{"text": "hi", "foo": 1}]))


def test_row_that_breaks_the_layout_names_the_line(tmp_path):
    rows = [GSM8K[0], {"question": "no final answer", "answer": "just text"}]
    with pytest.raises(UserError, match="line 2: does not have the gsm8k fields"):
        JsonlSource(write(tmp_path / "g.jsonl", rows))


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"question": "q", "options": ["a", "b"], "answer": "C"}, "not one of the letters A-B"),
        ({"question": "q", "options": ["a", "b"], "answer": "A", "answer_index": 1}, "disagree"),
        ({"question": "q", "options": ["a"], "answer": "A"}, "list of 2 to 10"),
        ({"problem": "p", "solution": "no box here"}, "no \\\\boxed"),
        ({"question": "", "answer": "3"}, "'question' is empty"),
    ],
)
def test_bad_records(tmp_path, row, message):
    with pytest.raises(UserError, match=message):
        JsonlSource(write(tmp_path / "r.jsonl", [row]))


def test_not_utf8(tmp_path):
    path = tmp_path / "bin.jsonl"
    path.write_bytes(b"\xff\xfe\x00garbage\n")
    with pytest.raises(UserError, match="not a UTF-8 JSONL file"):
        JsonlSource(path)
