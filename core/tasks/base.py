"""What a task is, and where tasks come from (docs/team.md, Tasks)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from core.records import EpisodeRecord

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


_DEF = re.compile(r"(?m)^def\s+([A-Za-z_]\w*)\s*\(")


def task_of(record: EpisodeRecord) -> Task:
    """The task of a logged episode, from what its record holds (id, benchmark, domain,
    difficulty, question, ground truth): what the prompt builders and the synthetic society
    need to ask it again. The record keeps no options, distractors or tests.

    A code task's entry point is the last top-level ``def`` of its question (true of all
    164 HumanEval problems); a multiple-choice question already lists its options.
    """
    meta = {}
    if record.domain == "code" and (defs := _DEF.findall(record.question)):
        meta["entry_point"] = defs[-1]
    return Task(
        task_id=record.task_id,
        benchmark=record.benchmark,
        domain=record.domain,
        question=record.question,
        answer=record.ground_truth,
        difficulty=int(record.difficulty),
        meta=meta,
    )


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
