"""The multiple-choice set written for this project (``data/mcq.jsonl``).

Each line: ``id``, ``subject`` (science, computer science, maths, logic, history),
``difficulty`` 1..5, ``question``, four ``options`` (A-D), the correct ``answer`` letter and
``distractors``, the wrong letters from most to least plausible.
"""

from __future__ import annotations

import random
from pathlib import Path

from core.tasks.base import Task
from core.tasks.files import read_jsonl

MCQ_PATH = Path(__file__).resolve().parents[2] / "data" / "mcq.jsonl"
"""Where the shipped set lives (``data/`` at the project root)."""

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def format_mcq(stem: str, options: tuple[str, ...] | list[str]) -> str:
    """The text an agent sees: the stem, one ``X) option`` line per option, the instruction."""
    lines = [stem.strip(), ""]
    lines += [f"{LETTERS[i]}) {text}" for i, text in enumerate(options)]
    lines += [
        "",
        f"Answer with the letter of the correct option ({LETTERS[0]}-{LETTERS[len(options) - 1]}).",
    ]
    return "\n".join(lines)


def mcq_task(row: dict, benchmark: str = "mcq") -> Task:
    """A task from one row of the shipped set's layout."""
    options = tuple(row["options"])
    return Task(
        task_id=row["id"],
        benchmark=benchmark,
        domain="mcq",
        question=format_mcq(row["question"], options),
        answer=row["answer"],
        difficulty=int(row["difficulty"]),
        choices=options,
        distractors=tuple(row["distractors"]),
        meta={"subject": row["subject"], "stem": row["question"]},
    )


class MCQSource:
    """The shipped multiple-choice set in a seeded order (``TaskSource``)."""

    name = "mcq"

    def __init__(self, seed: int = 0, path: Path = MCQ_PATH) -> None:
        self.seed = seed
        self.tasks = [mcq_task(row) for _, row in read_jsonl(Path(path))]
        random.Random(f"mcq|{seed}").shuffle(self.tasks)

    def __len__(self) -> int:
        return len(self.tasks)

    def get(self, index: int) -> Task:
        if not 0 <= index < len(self.tasks):
            raise IndexError(f"mcq task index {index} outside 0..{len(self.tasks) - 1}")
        return self.tasks[index]
