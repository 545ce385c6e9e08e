"""``jsonl:PATH``: task files on the user's disk, layout detected from the first line.

=============  ===============================================================  ======
layout         fields                                                           domain
=============  ===============================================================  ======
``humaneval``  task_id, prompt, canonical_solution, test, entry_point           code
``mmlu-pro``   question, options (2-10, letters A..J), answer letter and/or      mcq
               answer_index, optional category, question_id
``math``       problem, solution with ``\\boxed{}`` (or an ``answer`` field),    math
               optional level ("Level 3"), type
``gsm8k``      question, answer whose final answer follows ``####``             math
``aime``       problem or question, answer, optional id                         math
=============  ===============================================================  ======

Difficulty: MATH's level; GSM8K by the number of reasoning lines (2 -> 1 .. 6+ -> 5);
AIME-like files an explicit ``difficulty``/``level`` field, else 5 when the file name
names a competition (aime, hmmt, olymp, amc, beyond), else 3; MMLU-Pro 3; HumanEval as the
``code`` benchmark. Maths distractors are derived from the answer (±1, ×2, a digit
swap, ...) so that the synthetic society can run on any file. A ``.jsonl.gz`` file is
read the same way. Mistakes in the file raise ``UserError`` naming the file and line.
"""

from __future__ import annotations

import random
import re
from fractions import Fraction
from pathlib import Path

from core.errors import UserError
from core.tasks.base import Task
from core.tasks.checkers import extract_boxed, normalize_answer, parse_number
from core.tasks.code import humaneval_task
from core.tasks.files import read_jsonl
from core.tasks.mcq import LETTERS, format_mcq

LAYOUTS = ("humaneval", "mmlu-pro", "math", "gsm8k", "aime")
_COMPETITION = re.compile(r"aime|hmmt|olymp|amc|beyond", re.IGNORECASE)


class _RowError(Exception):
    """A record that does not fit its layout; the loader adds file and line."""


def detect_layout(row: dict) -> str | None:
    """Which of :data:`LAYOUTS` a record has, or ``None``."""
    keys = set(row)
    if {"task_id", "prompt", "canonical_solution", "test", "entry_point"} <= keys:
        return "humaneval"
    if {"question", "options"} <= keys and keys & {"answer", "answer_index"}:
        return "mmlu-pro"
    if {"problem", "solution"} <= keys:
        return "math"
    if {"question", "answer"} <= keys and "####" in str(row["answer"]):
        return "gsm8k"
    if keys & {"problem", "question"} and "answer" in keys:
        return "aime"
    return None


class JsonlSource:
    """Tasks from one JSONL file, in a seeded order (``TaskSource``)."""

    def __init__(self, path: str | Path, seed: int = 0) -> None:
        self.path = Path(path).expanduser()
        self.name = f"jsonl:{path}"
        rows = read_jsonl(self.path)
        self.layout = detect_layout(rows[0][1])
        if self.layout is None:
            keys = ", ".join(sorted(rows[0][1])) or "none"
            raise UserError(
                f"{self.path}, line {rows[0][0]} has an unknown layout (keys: {keys}); expected "
                "the fields of GSM8K, MATH, AIME, MMLU-Pro or HumanEval."
            )
        self.tasks: list[Task] = []
        for number, row in rows:
            try:
                self.tasks.append(_convert(self.layout, row, number, self.path))
            except _RowError as err:
                raise UserError(f"{self.path}, line {number}: {err}") from err
        random.Random(f"jsonl|{seed}").shuffle(self.tasks)

    def __len__(self) -> int:
        return len(self.tasks)

    def get(self, index: int) -> Task:
        if not 0 <= index < len(self.tasks):
            raise IndexError(f"task index {index} outside 0..{len(self.tasks) - 1}")
        return self.tasks[index]


def _convert(layout: str, row: dict, number: int, path: Path) -> Task:
    if detect_layout(row) != layout and not (layout == "aime" and detect_layout(row) == "gsm8k"):
        raise _RowError(f"does not have the {layout} fields of the first line.")
    if layout == "humaneval":
        fields = ("task_id", "prompt", "canonical_solution", "test", "entry_point")
        bad = [k for k in fields if not isinstance(row[k], str) or not row[k].strip()]
        if bad:
            raise _RowError(f"{', '.join(bad)} must be non-empty text.")
        if not row["entry_point"].isidentifier():
            raise _RowError(f"entry_point {row['entry_point']!r} is not a Python name.")
        return humaneval_task(row, benchmark="humaneval")
    if layout == "mmlu-pro":
        return _mmlu_pro(row, number)
    if layout == "math":
        return _math(row, number)
    if layout == "gsm8k":
        return _gsm8k(row, number)
    return _aime(row, number, path)


def _text(row: dict, key: str) -> str:
    value = row.get(key)
    if (
        not isinstance(value, str | int | float)
        or isinstance(value, bool)
        or not str(value).strip()
    ):
        raise _RowError(f"field {key!r} is empty or not text.")
    return str(value).strip()


def _math_task(task_id: str, benchmark: str, question: str, answer: str, level: int, meta: dict):
    answer = normalize_answer(answer)
    if not answer:
        raise _RowError("the answer is empty.")
    return Task(
        task_id=task_id,
        benchmark=benchmark,
        domain="math",
        question=question,
        answer=answer,
        difficulty=level,
        distractors=math_distractors(answer),
        meta=meta,
    )


def _gsm8k(row: dict, number: int) -> Task:
    solution = _text(row, "answer")
    final = solution.rsplit("####", 1)[1]
    meta = {"solution": solution, "line": number}
    level = gsm8k_difficulty(solution)
    return _math_task(f"gsm8k-{number:05d}", "gsm8k", _text(row, "question"), final, level, meta)


def gsm8k_difficulty(solution: str) -> int:
    """1..5 from the number of reasoning lines of a GSM8K solution (2 -> 1 .. 6+ -> 5)."""
    reasoning = solution.rsplit("####", 1)[0]
    steps = sum(1 for line in reasoning.splitlines() if line.strip())
    return min(5, max(1, steps - 1))


def _math(row: dict, number: int) -> Task:
    solution = _text(row, "solution")
    answer = (
        _text(row, "answer") if row.get("answer") not in (None, "") else extract_boxed(solution)
    )
    if answer is None:
        raise _RowError("the solution has no \\boxed{} answer and there is no 'answer' field.")
    match = re.search(r"\d", str(row.get("level", "")))
    level = int(match.group()) if match and 1 <= int(match.group()) <= 5 else 3
    task_id = str(row.get("unique_id") or row.get("id") or f"math-{number:05d}")
    meta = {"solution": solution, "type": row.get("type", ""), "line": number}
    return _math_task(task_id, "math", _text(row, "problem"), answer, level, meta)


def _aime(row: dict, number: int, path: Path) -> Task:
    question = _text(row, "problem" if "problem" in row else "question")
    answer = _text(row, "answer")
    explicit = re.fullmatch(r"\D*([1-5])", str(row.get("difficulty", row.get("level", ""))))
    level = int(explicit.group(1)) if explicit else 5 if _COMPETITION.search(path.name) else 3
    task_id = str(row.get("id") or row.get("ID") or f"{path.stem.split('.')[0]}-{number:05d}")
    return _math_task(task_id, "aime", question, answer, level, {"line": number})


def _mmlu_pro(row: dict, number: int) -> Task:
    options = row["options"]
    if not isinstance(options, list) or not 2 <= len(options) <= 10:
        raise _RowError("'options' must be a list of 2 to 10 option texts.")
    if not all(isinstance(o, str | int | float) and not isinstance(o, bool) for o in options):
        raise _RowError("'options' must hold option texts.")
    options = tuple(str(o) for o in options)
    letter = row.get("answer")
    if letter is not None and not isinstance(letter, str):
        raise _RowError(f"answer {letter!r} is not a letter.")
    letter = (letter or "").strip().upper()
    index = row.get("answer_index")
    if not letter and index is None:
        raise _RowError("the answer is empty (give an answer letter or an answer_index).")
    if letter and (len(letter) != 1 or letter not in LETTERS[: len(options)]):
        raise _RowError(
            f"answer {letter!r} is not one of the letters A-{LETTERS[len(options) - 1]}."
        )
    if index is not None:
        if not is_index(index) or not 0 <= index < len(options):
            raise _RowError(f"answer_index {index!r} is not an option index.")
        if letter and LETTERS[index] != letter:
            raise _RowError(f"answer {letter!r} and answer_index {index} disagree.")
        letter = LETTERS[index]
    correct = LETTERS.index(letter)
    qid = row.get("question_id", f"{number:05d}")
    return Task(
        task_id=f"mmlu-pro-{qid}",
        benchmark="mmlu-pro",
        domain="mcq",
        question=format_mcq(_text(row, "question"), options),
        answer=letter,
        difficulty=3,
        choices=options,
        distractors=_plausible_letters(options, correct),
        meta={"subject": str(row.get("category", "")), "stem": row["question"], "line": number},
    )


def is_index(value: object) -> bool:
    """An int that is not a bool (JSON ``true`` is not option 1)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _plausible_letters(options: tuple[str, ...], correct: int) -> tuple[str, ...]:
    """Up to 4 wrong letters, the options most like the correct one first (shared words,
    then similar length): a near miss is the likelier mistake."""
    words = set(options[correct].lower().split())

    def likeness(i: int) -> tuple[float, float, int]:
        other = set(options[i].lower().split())
        jaccard = len(words & other) / max(1, len(words | other))
        return (-jaccard, abs(len(options[i]) - len(options[correct])), i)

    wrong = sorted((i for i in range(len(options)) if i != correct), key=likeness)
    return tuple(LETTERS[i] for i in wrong[:4])


def math_distractors(answer: str) -> tuple[str, ...]:
    """Four plausible wrong answers derived from a maths answer, deterministically."""
    value = parse_number(answer)
    if value is None:  # symbolic: sign error, factor of two, stray +1, half
        return (
            answer[1:] if answer.startswith("-") else f"-{answer}",
            f"2({answer})",
            f"{answer}+1",
            f"({answer})/2",
        )
    if value.denominator == 1:
        n = value.numerator
        swapped = int(str(abs(n))[::-1]) * (1 if n >= 0 else -1)
        pool = [n + 1, n - 1, 2 * n, swapped, n + 10, n // 2, -n, n + 2]
        if n >= 0:
            pool = [c for c in pool if c >= 0]
        out = list(dict.fromkeys(c for c in pool if c != n))
        return tuple(str(c) for c in out[:4])
    pool = [value + 1, value * 2, 1 / value if value else value + 2, value - 1, value / 2]
    out = list(dict.fromkeys(c for c in pool if c != value))
    return tuple(_like(answer, c) for c in out[:4])


def _like(answer: str, value: Fraction) -> str:
    """``value`` written the way ``answer`` is (decimal, ``a/b`` or ``\\frac{a}{b}``)."""
    if "." in answer:
        return f"{float(value):g}"
    sign = "-" if value < 0 else ""
    p, q = abs(value.numerator), value.denominator
    if q == 1:
        return f"{sign}{p}"
    return f"{sign}\\frac{{{p}}}{{{q}}}" if "frac" in answer else f"{sign}{p}/{q}"
