"""Answer extraction and equivalence on the strings models really write."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from core.tasks.base import Task
from core.tasks.checkers import (
    check,
    eval_expr,
    extract_boxed,
    extract_choice,
    extract_math_answer,
    latex_to_expr,
    math_equal,
    parse_number,
)

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"So \boxed{\frac{1}{\sqrt{2}}}.", r"\frac{1}{\sqrt{2}}"),
        # Two different answers stated: none is committed to, a correction included.
        (r"First \boxed{3}, corrected: \boxed{\frac{7}{2}}", None),
        (r"\boxed{\frac{7}{2}}, that is \boxed{3.5}", "3.5"),
        (r"So \boxed{x^{2}+1}, nested braces kept.", "x^{2}+1"),
        (r"\boxed{\{1, 2\}} and \boxed{x^{2}+1}", None),  # two answers
        ("Answer: 1,234.", "1234"),
        # No marker, no answer (issue 32: a number in reasoning is no commitment).
        ("We have 5 apples, then 7, so 12 in total.", None),
        ("The final answer is -17", "-17"),
        ("Step 1: 6*7 = 42\n#### 42", "42"),
        ("#### 1,234,567", "1234567"),
        ("The answer is $3/4$.", "3/4"),
        (r"The answer is \(\frac{3}{4}\).", r"\frac{3}{4}"),
        ("Answer: -\\frac{5}{2}", "-\\frac{5}{2}"),
        ("I first thought answer: 5, but the answer is 6.", None),
        ("The answer is 6.\nFinal answer: 7", None),
        ("The answer is 942.\nA correct answer would have been 100", None),
        ("The answer was 12 before, and the answer is 12.", "12"),
        ("The answer is: 42\nThe final answer is $42.", "42"),
        # Issue 32, third pass: the shapes of heldout-2's false reads, written anew.
        ("The answer is 2.5, 4.", None),  # two values in one clause
        ("The answer is 12 or 13.", None),
        ("The answer is 1,250 apples.", "1250"),  # a thousands separator is one value
        ("The answer is 12, because 3*4 = 12.", "12"),
        ("Your answer:\n1. 91 + 40 = 131\n2. 190 + 40 = 230", None),  # a list, not 1
        ("Answer: 1. 91 + 40 = 131\n2. 190 + 40 = 230", None),
        ("The answer is 1. Then we check it: 1*3 = 3.", "1"),  # no list goes on
        ("The answer is: 1/2\nTimes 2 you get 1, which is indeed the answer.", None),
        ("The answer is 12. So 12 is the correct answer.", "12"),
        ("She explains that the answer is 5 * 2 = 10 apples.", None),  # reported speech
        ("You say that the answer is 9, but the answer is 8.", "8"),
        ("Final answer: 7. The answer must be a number.", "7"),  # no value: no contradiction
        ("So answer = 7. Check: 7*2 = 14", "7"),
        ("Total cost: $1,250.50", None),
        ("$1,250.50", "1250.50"),
        ("Answer: 12 apples", "12"),
        ("The final answer is 25%.", "25%"),
        ("x = 5", "5"),
        ("Answer: 3 + 4 = 7", "7"),
        ("The answer is 42 because 6*7 = 42 and 41 < 42.", "42"),
        ("It drops to -3.5 degrees", None),
        ("The answer is 0.5% of the profit.", None),
        ("The answer is 30 + $2 = 32 (only 4 kids).", "32"),
        ("Solution: 70 (9 days old)", "70"),
        ("The final answer is\n<<<", None),
        ("The final answer is:\n82.50 (rounded)", "82.50"),
        ("the final answer is 50 x", None),
        ("The answer is 19 + 40*((Number of friends) / 2)", None),
        ("Each box contains 5*6 = 30 apples", None),
        ("Agent 1 (solver; answer: 32)", None),
        ("let answer = (208765438 / 1.99);", None),
        ("no numbers at all", None),
        ("", None),
    ],
)
def test_extract_math_answer(text, expected):
    assert extract_math_answer(text) == expected


def test_boxed_cut_off_or_absent():
    assert extract_boxed(r"\boxed{\frac{1}{2}") is None
    assert extract_boxed("no box") is None
    assert extract_boxed(r"\fbox{4}") == "4"


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("1/2", "0.5"),
        (r"\frac{1}{2}", "0.5"),
        (r"\dfrac{3}{4}", "0.75"),
        ("-\\frac34", "-0.75"),
        ("25%", "0.25"),
        ("25%", "25"),
        ("1,000", "1000"),
        ("0.3333333", "1/3"),
        ("2\\sqrt{2}", "\\sqrt{8}"),
        ("1/\\sqrt{2}", "\\frac{\\sqrt{2}}{2}"),
        ("x+1", "1+x"),
        ("2^{10}", "1024"),
        ("\\pi/2", "\\frac{\\pi}{2}"),
        ("12 apples", "12"),
        ("$5.00", "5"),
    ],
)
def test_equal(a, b):
    assert math_equal(a, b)
    assert math_equal(b, a)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("3", "4"),
        ("0.5", "0.51"),
        ("-5", "5"),
        ("x+1", "x+2"),
        ("\\sqrt{2}", "1.41"),
        (None, "3"),
        ("", "3"),
    ],
)
def test_not_equal(a, b):
    assert not math_equal(a, b)


@pytest.mark.parametrize(
    "hostile",
    ["__import__('os').system('echo hi')", "9**9**9**9", "2^{2^{2^{100}}}", "exec(1)", "1" * 40],
)
def test_hostile_expressions_are_never_evaluated(hostile):
    assert latex_to_expr(hostile) is None
    assert not math_equal(hostile, "1")


def test_parse_number():
    assert parse_number("1,234") == 1234
    assert parse_number("-3/4") == parse_number("-\\frac{3}{4}") == parse_number("-0.75")
    assert parse_number("5/0") is None
    assert parse_number("abc") is None


@pytest.mark.parametrize(
    ("text", "letter"),
    [
        ("(B)", "B"),
        ("Answer: B", "B"),
        ("the answer is b", "B"),
        ("the answer is d.", "D"),
        ("**C**", "C"),
        ("D", "D"),
        ("B.", "B"),
        ("A) Paris", "A"),
        ("Answer: **C**", "C"),
        ("The correct option is D because the others fail.", "D"),
        ("I think (A) is wrong; the answer is (C).", "C"),
        ("\\boxed{B}", "B"),
        ("Final answer: (A)", "A"),
        ("Because both are big, the answer is B", "B"),
        # No letter, or letters only inside words / as the article "a".
        ("There is a big cat and a dog.", None),
        ("Because of this, the answer is a prime number.", None),
        ("ABCD", None),
        ("I cannot decide.", None),
        # Ambiguous.
        ("The answer is A or B", None),
        ("Both (A) and (C) look right", None),
        ("**A** or **B**", None),
        # Out of range for four options.
        ("Answer: E", None),
        # Two answer phrases, two letters (issue 32, third pass).
        ("Your answer is C. ink\n\nYour answer is D. bread", None),
        ("The answer is C.\nYes, the answer is C.", "C"),
    ],
)
def test_extract_choice(text, letter):
    assert extract_choice(text) == letter


def test_extract_choice_with_ten_options():
    assert extract_choice("The answer is (J).", n_options=10) == "J"
    assert extract_choice("The answer is (J).", n_options=4) is None


def _task(domain: str, answer: str, choices: tuple[str, ...] = ()) -> Task:
    return Task("t-1", "unit", domain, "q?", answer, choices=choices)


def test_check_dispatches_on_domain():
    maths = _task("math", "12")
    assert check(maths, "so there are \\boxed{12} apples") == 1.0
    assert check(maths, "Answer: 13") == 0.0
    mcq = _task("mcq", "C", ("a", "b", "c", "d"))
    assert check(mcq, "The answer is (C).") == 1.0
    assert check(mcq, "The answer is (B).") == 0.0
    with pytest.raises(ValueError, match="domain"):
        check(_task("poetry", "x"), "x")


def test_check_runs_code_in_the_sandbox():
    from core.tasks.code import CodeSource

    task = next(t for t in CodeSource().tasks if t.task_id == "HumanEval/0")
    right = "```python\n" + task.meta["prompt"] + task.answer + "```"
    wrong = "```python\n" + task.meta["prompt"] + "    return False\n```"
    assert check(task, right) == 1.0
    assert check(task, wrong) == 0.0


TOWERS = [
    "10^{10^{10^{10}}}",
    "99^99^99^99",
    "99^{99^{99}}",
    "10**10**10**10",
    "(99^99)^(99^99)",
    "x^{99^{99^{99}}}",
    "2^{99^{99}} - 2^{99^{99}}",
    "\\sqrt{10^{10^{10^{10}}}}",
]
"""Answers whose value has more digits than any memory holds, each written the way the
extraction keeps it (before the fix each one hung ``math_equal`` for good)."""


def test_towers_of_powers_are_wrong_without_being_computed(tmp_path):
    # Hang guard only (pytest-timeout is not installed): a subprocess with a generous limit.
    script = (
        "import json, sys\n"
        "from core.tasks.base import Task\n"
        "from core.tasks.checkers import check, math_equal\n"
        "towers = json.loads(sys.argv[1])\n"
        "task = Task('t', 'unit', 'math', 'q?', '42')\n"
        "out = [math_equal(t, '42') for t in towers]\n"
        "out += [check(task, f'So the final answer is {t}') for t in towers]\n"
        "out += [check(task, f'Answer: \\\\boxed{{{t}}}') for t in towers]\n"
        "print(json.dumps(out))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, json.dumps(TOWERS)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [False] * len(TOWERS) + [0.0] * (2 * len(TOWERS))


@pytest.mark.parametrize("tower", TOWERS)
def test_towers_are_refused_by_the_evaluator(tower):
    src = latex_to_expr(tower)
    assert src is None or eval_expr(src, {"x": 1.5}) is None


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("2^{100}", str(2**100)),  # a 31-digit truth: compared exactly, not as an expression
        ("2^{1000}", str(2**1000)),
        ("(x+1)^2", "x^2+2x+1"),
        ("\\sqrt{-1}", "I"),
        ("(-8)^{1/3}", "1+\\sqrt{3}I"),  # principal cube root
        ("10^{-300}", "0"),
        ("1" + "0" * 400, "1" + "0" * 400 + ".0"),
        ("1" * 5000, "1" * 5000),
    ],
    ids=lambda v: v if len(v) < 40 else f"{len(v)}-chars",
)
def test_large_but_finite_values_still_compare(a, b):
    assert math_equal(a, b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("1" + "0" * 400, "42"),  # a float conversion overflows here
        ("1" * 5000, "42"),  # int() refuses more than 4,300 digits
        ("1" * 5000, "1" * 4999),
        ("x+y", "2x"),
        ("x", "3"),
        ("1/0", "1"),
        ("0^{-1}", "1"),
        ("10^{9999}", "1"),
        ("2^{1000}", str(2**1000 + 2**990)),
    ],
    ids=lambda v: v if len(v) < 40 else f"{len(v)}-chars",
)
def test_overflow_and_undefined_values_are_wrong_not_errors(a, b):
    assert not math_equal(a, b)


def test_eval_expr_bounds_and_implicit_multiplication():
    assert eval_expr("2sqrt(2)") == eval_expr("sqrt(8)")
    assert eval_expr("(1)(2)3") == 6 and eval_expr("2pi") == eval_expr("2 * pi")
    assert eval_expr("10**9999") is not None and eval_expr("10**10001") is None
    assert eval_expr("9**9**9") is None and eval_expr("1/0") is None
    assert eval_expr("3x", {"x": 2.0}) == 6
    assert eval_expr("x") is None  # a symbol without a value


# ------------------------------------------------- what small real models write (issue 18)

OPTIONS = ("13", "14", "Boron", "Carbon dioxide")


@pytest.mark.parametrize(
    ("text", "letter"),
    [
        ("The correct answer is 13.", "A"),  # option A named by its text
        ("Boron", "C"),
        ("boron.", "C"),
        ("**Carbon dioxide**", "D"),
        ("Let me think about the elements.\nBoron", "C"),  # on its last line
        ("The answer is: Carbon dioxide\nConfidence: 70", "D"),
        ("The answer is 14 because 14 > 13.", "B"),
        # An echoed option list names nothing, whatever its layout.
        ("A) 13\nB) 14\nC) Boron\nD) Carbon dioxide", None),
        ("A. 13\nB. 14\nC. Boron\nD. Carbon dioxide\n\nConfidence: 90", None),
        ("Which one?\n(A) 13\n(B) 14\n(C) Boron\n(D) Carbon dioxide", None),
        # ... but a choice after it still counts.
        ("A) 13\nB) 14\nC) Boron\nD) Carbon dioxide\nAnswer: C", "C"),
        ("A) 13\nB) 14\nC) Boron\nD) Carbon dioxide\n\nBoron", "C"),
        ("Boron or Carbon dioxide", None),
        ("13 / 14", None),
        # Shapes SmolLM2-135M writes (tests/core/tasks/data/smollm_replies.jsonl).
        ("C) Boron", "C"),
        ("The answer to this problem is D.", "D"),
        ("I will not provide the answer to this question.\n\n*C) Boron", "C"),
        ("A) 14", None),  # letter A, option B's text: it contradicts itself
        ("The answer is C) 13", None),
        ("C) 13\nThis is the correct option.", None),
        ("A) 14\nB) Boron", None),  # a made-up list is no choice either
        ("A) 13\nB) 14\nC) Boron", None),  # an echo cut short
        ("Carbon", None),  # not an option's text
    ],
)
def test_extract_choice_reads_options_named_by_their_text(text, letter):
    assert extract_choice(text, 4, OPTIONS) == letter


def test_option_texts_need_the_options():
    assert extract_choice("Boron") is None  # no option texts given: a word is not a letter


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The answer is: 96", "96"),
        ("#### 22", "22"),
        ("She had 5 left and sold 13, so 18.\nConfidence: 90", None),
        ("18\nConfidence: 90", "18"),
        ("Answer: 18\nConfidence: 85%", "18"),
        ("**Confidence: 80**", None),
        # Restating the problem does not make its last number the answer, nor does a
        # statement without a marker (issue 32).
        (
            "Melanie started with 18 cleaners. If Melanie has 5 vacuum cleaners left, how "
            "many did she start with?",
            None,
        ),
        ("He buys 90 more books.", None),
    ],
)
def test_extract_math_answer_from_small_model_replies(text, expected):
    question = "If Melanie has 5 vacuum cleaners left, how many did she start with?"
    assert extract_math_answer(text, question) == expected


def test_read_answer_is_what_check_scores():
    from core.tasks.checkers import read_answer

    mcq = _task("mcq", "C", OPTIONS)
    assert read_answer(mcq, "Boron") == "C" and check(mcq, "Boron") == 1.0
    assert check(mcq, "A) 13\nB) 14\nC) Boron\nD) Carbon dioxide") == 0.0
    maths = _task("math", "96")
    assert read_answer(maths, "The answer is: 96") == "96" and check(maths, "#### 96") == 1.0
    with pytest.raises(ValueError, match="code"):
        read_answer(_task("code", "x"), "x")
