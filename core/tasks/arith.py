"""``arith``: short arithmetic word problems with small numbers, for small real models.

The generated ``math`` benchmark starts where a 135M-parameter model already fails (its
easiest level adds to a start of up to 20 and its levels climb to seven steps with
percentages); ``arith`` is the rung below, so that a small local model is right on some
tasks and wrong on others and a team has something to gain (benchmarks/RESULTS.md,
"Issue 35"). Every number is at most 20 and every answer at most 60:

=====  =====================================================  ==============================
level  problem                                                numbers
=====  =====================================================  ==============================
1      one addition ("has 4 ..., finds 3 more")               2..9 + 1..9
2      one subtraction ("has 12 ..., gives 5 away")           6..18 - 1..9, answer >= 1
3      one multiplication ("3 bags with 4 ... in each")       2..5 x 2..6
4      two steps: an addition then a subtraction, or the      2..12, steps of 1..9
       other way round
5      two steps: a multiplication, then an addition or a     2..5 x 2..6, then 1..9
       subtraction
=====  =====================================================  ==============================

Levels are drawn uniformly. Distractors are the answers of typical mistakes: the other
operation, a step skipped, a number read off the question, an off-by-one. Every
``get(i)`` is a pure function of ``(seed, i)``; the train/held-out split is the registry's
(a hash of the question text), as for every source.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from core.tasks.base import Task
from core.tasks.math import ITEMS, NAMES

LEVELS = (1, 2, 3, 4, 5)
"""Difficulty levels, easiest first."""


@dataclass(frozen=True)
class ArithConfig:
    """Settings of the ``arith`` benchmark."""

    seed: int = 0
    """Seed of the stream: ``get(i)`` depends on ``(seed, i)`` only."""
    size: int = 1000
    """Number of tasks the source reports (``len``)."""

    def validate(self) -> None:
        if self.size < 1:
            raise ValueError(f"size must be >= 1, got {self.size}")


@dataclass(frozen=True)
class Problem:
    """One generated problem before it becomes a :class:`Task`."""

    sentences: tuple[str, ...]
    answer: int
    mistakes: tuple[tuple[int, str], ...]
    """Wrong answers with the mistake that gives each, most typical first."""
    kinds: tuple[str, ...]
    """The operations, in order (``add``, ``sub``, ``mul``)."""


class ArithSource:
    """Seeded, indexable stream of small arithmetic word problems (``TaskSource``)."""

    name = "arith"

    def __init__(self, seed: int = 0, size: int = 1000) -> None:
        self.config = ArithConfig(seed, size)
        self.config.validate()

    def __len__(self) -> int:
        return self.config.size

    def get(self, index: int) -> Task:
        if not 0 <= index < self.config.size:
            raise IndexError(f"arith task index {index} outside 0..{self.config.size - 1}")
        rng = random.Random(f"arith|{self.config.seed}|{index}")
        level = rng.choice(LEVELS)
        task_id = f"arith-s{self.config.seed}-{index:06d}"
        return to_task(generate(rng, level), level, task_id, self.name)


def to_task(problem: Problem, level: int, task_id: str, benchmark: str = "arith") -> Task:
    distractors = _distinct(problem.answer, problem.mistakes)
    return Task(
        task_id=task_id,
        benchmark=benchmark,
        domain="math",
        question=" ".join(problem.sentences),
        answer=str(problem.answer),
        difficulty=level,
        distractors=tuple(str(v) for v, _ in distractors),
        meta={
            "steps": len(problem.kinds),
            "kinds": list(problem.kinds),
            "mistakes": [label for _, label in distractors],
        },
    )


# ----------------------------------------------------------------------------- generation


def generate(rng: random.Random, level: int) -> Problem:
    """One problem of ``level`` (1..5), drawn with ``rng``."""
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}, got {level}")
    name, pron = rng.choice(NAMES)
    items, item = rng.choice(ITEMS)
    who = _Who(name, pron, items, item)
    return {1: _one_add, 2: _one_sub, 3: _one_mul, 4: _two_add_sub, 5: _two_mul}[level](rng, who)


@dataclass(frozen=True)
class _Who:
    name: str
    pron: str
    items: str
    item: str

    def noun(self, n: int) -> str:
        """The item's name for ``n`` of them (singular for one)."""
        return self.item if n == 1 else self.items

    @property
    def subj(self) -> str:
        return self.pron.capitalize()

    @property
    def obj(self) -> str:
        return "her" if self.pron == "she" else "him"

    def ask(self) -> str:
        return f"How many {self.items} does {self.name} have now?"


def _add_text(rng: random.Random, w: _Who, n: int) -> str:
    return rng.choice(
        (
            f"{w.subj} finds {n} more {w.noun(n)}.",
            f"{w.subj} buys {n} more {w.noun(n)}.",
            f"A friend gives {w.obj} {n} more {w.noun(n)}.",
        )
    )


def _sub_text(rng: random.Random, w: _Who, n: int) -> str:
    return rng.choice(
        (
            f"{w.subj} gives {n} {w.noun(n)} away.",
            f"{w.subj} loses {n} {w.noun(n)}.",
            f"{w.subj} uses {n} of the {w.items}.",
        )
    )


def _one_add(rng: random.Random, w: _Who) -> Problem:
    a, b = rng.randint(2, 9), rng.randint(1, 9)
    text = (f"{w.name} has {a} {w.items}.", _add_text(rng, w, b), w.ask())
    mistakes = ((a - b, "wrong-operation"), (a, "skipped-step"), (b, "number-copied"))
    return Problem(text, a + b, mistakes + _off_by_one(rng, a + b), ("add",))


def _one_sub(rng: random.Random, w: _Who) -> Problem:
    a = rng.randint(6, 18)
    b = rng.randint(1, min(9, a - 1))
    text = (f"{w.name} has {a} {w.items}.", _sub_text(rng, w, b), w.ask())
    mistakes = ((a + b, "wrong-operation"), (a, "skipped-step"), (b, "number-copied"))
    return Problem(text, a - b, mistakes + _off_by_one(rng, a - b), ("sub",))


def _groups(rng: random.Random, w: _Who) -> tuple[int, int, str]:
    k, m = rng.randint(2, 5), rng.randint(2, 6)
    box = rng.choice(("bags", "boxes", "jars"))
    return k, m, f"{w.name} has {k} {box} with {m} {w.items} in each."


def _one_mul(rng: random.Random, w: _Who) -> Problem:
    k, m, opening = _groups(rng, w)
    text = (opening, f"How many {w.items} does {w.name} have in all?")
    mistakes = ((k + m, "wrong-operation"), (m, "skipped-step"), (k, "number-copied"))
    return Problem(text, k * m, mistakes + _off_by_one(rng, k * m), ("mul",))


def _two_add_sub(rng: random.Random, w: _Who) -> Problem:
    a, b = rng.randint(2, 12), rng.randint(1, 9)
    if rng.random() < 0.5:
        c = rng.randint(1, min(9, a + b - 1))
        steps, kinds = (_add_text(rng, w, b), _sub_text(rng, w, c)), ("add", "sub")
        answer, mistakes = a + b - c, ((a + b, "skipped-step"), (a - c, "skipped-step"))
        mistakes += ((a + b + c, "wrong-operation"), (a - b - c, "wrong-operation"))
    else:
        c = rng.randint(1, 9)
        a = max(a, b + 1)  # never below one after the subtraction
        steps, kinds = (_sub_text(rng, w, b), _add_text(rng, w, c)), ("sub", "add")
        answer, mistakes = a - b + c, ((a - b, "skipped-step"), (a + c, "skipped-step"))
        mistakes += ((a + b + c, "wrong-operation"), (a - b - c, "wrong-operation"))
    text = (f"{w.name} has {a} {w.items}.", steps[0], f"Then {_lower(steps[1])}", w.ask())
    return Problem(text, answer, mistakes + _off_by_one(rng, answer), kinds)


def _two_mul(rng: random.Random, w: _Who) -> Problem:
    k, m, opening = _groups(rng, w)
    total = k * m
    if rng.random() < 0.5:
        c = rng.randint(1, 9)
        step, kinds, answer = _add_text(rng, w, c), ("mul", "add"), total + c
        mistakes = ((total, "skipped-step"), (k + m + c, "wrong-operation"), (total - c, "sign"))
    else:
        c = rng.randint(1, min(9, total - 1))
        step, kinds, answer = _sub_text(rng, w, c), ("mul", "sub"), total - c
        mistakes = ((total, "skipped-step"), (k + m - c, "wrong-operation"), (total + c, "sign"))
    text = (opening, f"Then {_lower(step)}", w.ask())
    return Problem(text, answer, mistakes + _off_by_one(rng, answer), kinds)


def _lower(sentence: str) -> str:
    return sentence[0].lower() + sentence[1:]


def _off_by_one(rng: random.Random, answer: int) -> tuple[tuple[int, str], ...]:
    sign = rng.choice((1, -1))
    return ((answer + sign, "off-by-one"), (answer - sign, "off-by-one"))


def _distinct(answer: int, mistakes: tuple[tuple[int, str], ...]) -> list[tuple[int, str]]:
    """Up to four wrong answers (whole, not negative, not the answer), first of each kept."""
    out: list[tuple[int, str]] = []
    seen = {answer}
    for value, label in mistakes:
        if value >= 0 and value not in seen:
            seen.add(value)
            out.append((value, label))
        if len(out) == 4:
            break
    return out
