"""What a task is, and where tasks come from (docs/team.md, Tasks)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

DOMAINS = ("math", "code", "mcq")


@dataclass(frozen=True)
class Task:
    """One question with its ground truth and the means to score an answer.

    Attributes:
        task_id: stable id, unique within its benchmark (e.g. ``math-000017``, ``HumanEval/3``).
        benchmark: the benchmark it came from (``math``, ``code``, ``mcq``, ``gsm8k``, ...).
        domain: ``math`` | ``code`` | ``mcq``: decides the checker and the answer format.
        question: the full text an agent is given.
        answer: ground truth (a number / expression, an option letter, or for code the
            canonical solution body).
        difficulty: 1 (easy) .. 5 (hardest); loaders that know nothing say 3.
        choices: option texts for MCQ, in letter order.
        distractors: plausible wrong answers (the synthetic society draws wrong answers
            from these so that wrong majorities happen).
        meta: domain extras, e.g. ``{"prompt", "test", "entry_point"}`` for code.
    """

    task_id: str
    benchmark: str
    domain: str
    question: str
    answer: str
    difficulty: int = 3
    choices: tuple[str, ...] = ()
    distractors: tuple[str, ...] = ()
    meta: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)


class TaskSource(Protocol):
    """A seeded, indexable stream of tasks: ``get(i)`` is the same task for the same seed."""

    name: str

    def __len__(self) -> int: ...

    def get(self, index: int) -> Task: ...


Checker = Callable[[Task, str], float]


class TaskList:
    """A fixed list of tasks as a :class:`TaskSource` (benchmarks, the lab, tests)."""

    def __init__(self, tasks: list[Task], name: str = "tasks"):
        self.tasks, self.name = list(tasks), name

    def __len__(self) -> int:
        return len(self.tasks)

    def get(self, index: int) -> Task:
        return self.tasks[index]
