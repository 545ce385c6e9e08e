"""Generated maths word problems with exact answers and five difficulty levels.

A problem is a chain of steps applied to one running quantity ("Ava has 12 shells.
Then she buys 3 boxes with 8 shells in each box. ..."). Difficulty is the number of
steps and the kinds of step it may use, so the text itself tells an easy problem from a
hard one (more sentences, more numbers, "then", "percent", "remaining", "dozen"):

=====  ======  =============  ============================================================
level  steps   start value    step kinds
=====  ======  =============  ============================================================
1      1       3..20          add, subtract
2      2       10..60         + boxes of equal size (multiply and add)
3      3       20..120        + dozens, doubling/tripling, equal shares; may end asking
                              for bags filled or dollars earned
4      4-5     60..400        + percent sold, a fraction of the remaining (at least one)
5      5-7     120..1500      all kinds; at least one percent and one fraction step
=====  ======  =============  ============================================================

Distractors replay the chain with a typical mistake: a skipped step, a wrong operation
(subtracting instead of adding, answering the part taken instead of the part left), a
unit slip (a dozen counted as one, dollars given in cents, a percentage taken as a count)
and an off-by-one. Every ``get(i)`` is a pure function of ``(seed, i)``.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

from core.tasks.base import Task

Op = Callable[[Fraction], Fraction]

NAMES = (
    ("Ava", "she"),
    ("Liam", "he"),
    ("Mia", "she"),
    ("Noah", "he"),
    ("Zara", "she"),
    ("Omar", "he"),
    ("Priya", "she"),
    ("Kenji", "he"),
    ("Lena", "she"),
    ("Mateo", "he"),
)
ITEMS = (
    ("apples", "apple"),
    ("marbles", "marble"),
    ("stickers", "sticker"),
    ("books", "book"),
    ("pencils", "pencil"),
    ("cookies", "cookie"),
    ("cards", "card"),
    ("stamps", "stamp"),
    ("shells", "shell"),
    ("eggs", "egg"),
)
CONNECTIVES = ("Then", "Next", "After that", "Later")
PERCENTS = (10, 20, 25, 30, 40, 50, 60, 75, 80)


@dataclass(frozen=True)
class Level:
    """What one difficulty level may generate."""

    steps: tuple[int, int]
    """Inclusive range of the number of steps."""
    start: tuple[int, int]
    """Inclusive range of the starting quantity."""
    operand: tuple[int, int]
    """Inclusive range of the numbers added, removed or per box."""
    kinds: tuple[str, ...]
    """Step kinds it may draw."""
    required: tuple[str, ...] = ()
    """Groups of kinds of which each must appear once ("percent|fraction" = either)."""
    final_prob: float = 0.0
    """Probability that the question ends with bags filled or dollars earned."""


LEVELS: dict[int, Level] = {
    1: Level((1, 1), (3, 20), (1, 9), ("add", "sub")),
    2: Level((2, 2), (10, 60), (2, 15), ("add", "sub", "groups")),
    3: Level(
        (3, 3), (20, 120), (3, 25), ("add", "sub", "groups", "dozen", "times", "share"), (), 0.4
    ),
    4: Level(
        (4, 5),
        (60, 400),
        (5, 60),
        ("add", "sub", "groups", "dozen", "times", "share", "percent", "fraction"),
        ("percent|fraction",),
        0.5,
    ),
    5: Level(
        (5, 7),
        (120, 1500),
        (10, 150),
        ("add", "sub", "groups", "dozen", "times", "share", "percent", "fraction"),
        ("percent", "fraction"),
        0.6,
    ),
}


@dataclass(frozen=True)
class MathConfig:
    """Settings of the generated maths benchmark."""

    seed: int = 0
    """Seed of the stream: ``get(i)`` depends on ``(seed, i)`` only."""
    size: int = 1000
    """Number of tasks the source reports (``len``)."""
    difficulty_weights: tuple[float, ...] = (1.0, 1.0, 1.0, 1.0, 1.0)
    """Relative frequency of levels 1..5; the default is uniform."""

    def validate(self) -> None:
        if self.size < 1:
            raise ValueError(f"size must be >= 1, got {self.size}")
        if len(self.difficulty_weights) != 5:
            raise ValueError(
                f"difficulty_weights needs 5 entries (levels 1..5), got {self.difficulty_weights}"
            )
        if any(w < 0 for w in self.difficulty_weights) or sum(self.difficulty_weights) <= 0:
            raise ValueError(
                f"difficulty_weights must be >= 0 with a positive sum, got {self.difficulty_weights}"
            )


@dataclass(frozen=True)
class Step:
    """One sentence of a problem and what it does to the running quantity."""

    kind: str
    text: str
    apply: Op
    wrong: Op | None = None
    """The same step with the typical wrong operation."""
    slip: Op | None = None
    """The same step with a unit slip."""


class MathSource:
    """Seeded, indexable stream of generated word problems (``TaskSource``)."""

    name = "math"

    def __init__(
        self,
        seed: int = 0,
        size: int = 1000,
        difficulty_weights: tuple[float, ...] = (1.0, 1.0, 1.0, 1.0, 1.0),
    ) -> None:
        self.config = MathConfig(seed, size, tuple(difficulty_weights))
        self.config.validate()

    def __len__(self) -> int:
        return self.config.size

    def get(self, index: int) -> Task:
        if not 0 <= index < self.config.size:
            raise IndexError(f"math task index {index} outside 0..{self.config.size - 1}")
        rng = random.Random(f"math|{self.config.seed}|{index}")
        level = rng.choices(range(1, 6), weights=self.config.difficulty_weights)[0]
        return generate_problem(
            rng, level, task_id=f"math-s{self.config.seed}-{index:06d}", benchmark=self.name
        )


# ----------------------------------------------------------------------------- generation


def generate_problem(rng: random.Random, level: int, task_id: str, benchmark: str = "math") -> Task:
    """One problem of the given level (1..5), drawn with ``rng``."""
    spec = LEVELS[level]
    name, pron = rng.choice(NAMES)
    items, item = rng.choice(ITEMS)
    start = rng.randint(*spec.start)
    n_steps = rng.randint(*spec.steps)
    with_final = rng.random() < spec.final_prob
    n_chain = n_steps - 1 if with_final else n_steps
    steps, value = _build_chain(rng, spec, n_chain, Fraction(start), pron, items)
    if with_final:
        final = _make_final(rng, value, name, pron, items, item)
        steps.append(final)
        value = final.apply(value)
        question_tail = final.text
    else:
        when = "now" if level <= 2 else "at the end"
        question_tail = f"How many {items} does {name} have {when}?"

    answer = value
    assert answer.denominator == 1 and answer >= 0, (task_id, answer)
    opening = "has" if level <= 2 else rng.choice(("has", "starts with", "begins the day with"))
    sentences = [f"{name} {opening} {start} {items}."]
    chain = steps[:-1] if with_final else steps
    for k, step in enumerate(chain):
        text = step.text
        if k > 0 or level >= 3:
            lead = "Finally," if k == len(chain) - 1 and k > 0 else f"{rng.choice(CONNECTIVES)},"
            text = f"{lead} {text[0].lower()}{text[1:]}"
        sentences.append(text)
    sentences.append(question_tail)

    distractors = _distractors(rng, Fraction(start), steps, answer)
    return Task(
        task_id=task_id,
        benchmark=benchmark,
        domain="math",
        question=" ".join(sentences),
        answer=str(answer.numerator),
        difficulty=level,
        distractors=tuple(str(d) for d, _ in distractors),
        meta={
            "steps": len(steps),
            "kinds": [s.kind for s in steps],
            "mistakes": [label for _, label in distractors],
        },
    )


def _build_chain(
    rng: random.Random, spec: Level, n: int, start: Fraction, pron: str, items: str
) -> tuple[list[Step], Fraction]:
    """``n`` steps from ``start`` that hold the level's required kinds, and their result.

    A percent or fraction step is only possible on a value it divides evenly; a chain
    that had to replace a required step is drawn again (same ``rng``, so deterministic).
    """
    for _ in range(100):
        steps: list[Step] = []
        value = start
        for kind in _plan_kinds(rng, spec, n):
            step = _make_step(rng, kind, value, spec, pron, items)
            if step is None:  # not feasible on this value: fall back to an addition
                step = _make_step(rng, "add", value, spec, pron, items)
            assert step is not None
            steps.append(step)
            value = step.apply(value)
        kinds = {step.kind for step in steps}
        if all(kinds & set(group.split("|")) for group in spec.required):
            return steps, value
    raise RuntimeError(f"no chain with {spec.required} after 100 draws")  # a bug in LEVELS


def _plan_kinds(rng: random.Random, spec: Level, n: int) -> list[str]:
    """Step kinds for a chain of ``n`` steps, with the level's required kinds placed."""
    kinds = [rng.choice(spec.kinds) for _ in range(n)]
    slots = list(range(n))
    rng.shuffle(slots)
    for group, slot in zip(spec.required, slots, strict=False):
        options = group.split("|")
        if not any(k in options for k in kinds):
            kinds[slot] = rng.choice(options)
    return kinds


def _make_step(
    rng: random.Random, kind: str, x: Fraction, spec: Level, pron: str, items: str
) -> Step | None:
    lo, hi = spec.operand
    subj = pron.capitalize()
    if kind == "add":
        n = rng.randint(lo, hi)
        text = rng.choice(
            (f"{subj} buys {n} more {items}.", f"{subj} finds {n} more {items}.")
            + (f"A friend gives {'her' if pron == 'she' else 'him'} {n} {items}.",)
        )
        return Step(kind, text, lambda v: v + n, wrong=lambda v: v - n)
    if kind == "sub":
        if x <= 1:
            return None
        n = rng.randint(1, min(hi, int(x) - 1))
        text = rng.choice(
            (f"{subj} gives {n} {items} to a friend.", f"{subj} loses {n} {items}.")
            + (f"{subj} uses {n} of the {items}.",)
        )
        return Step(kind, text, lambda v: v - n, wrong=lambda v: v + n)
    if kind == "groups":
        k, m = rng.randint(2, 6), rng.randint(max(2, lo // 2), max(3, hi // 2))
        text = f"{subj} buys {k} boxes with {m} {items} in each box."
        return Step(
            kind, text, lambda v: v + k * m, wrong=lambda v: v + k + m, slip=lambda v: v + m
        )
    if kind == "dozen":
        k = rng.randint(2, 5)
        text = f"{subj} buys {k} dozen {items}."
        return Step(
            kind, text, lambda v: v + 12 * k, wrong=lambda v: v + 10 * k, slip=lambda v: v + k
        )
    if kind == "times":
        f = rng.choice((2, 3))
        word = {2: "doubles", 3: "triples"}[f]
        text = f"The number of {items} {pron} has {word}."
        return Step(kind, text, lambda v: v * f, wrong=lambda v: v + f)
    if kind == "share":
        ks = [k for k in range(2, 7) if x % k == 0 and x // k >= 2]
        if not ks:
            return None
        k = rng.choice(ks)
        text = f"{subj} splits the {items} into {k} equal piles and keeps only one pile."
        return Step(kind, text, lambda v: v / k, wrong=lambda v: v - k, slip=lambda v: v - v / k)
    if kind == "percent":
        ps = [p for p in PERCENTS if (x * p) % 100 == 0]
        if not ps:
            return None
        p = rng.choice(ps)
        text = f"{subj} sells {p} percent of the {items}."
        return Step(
            kind,
            text,
            lambda v: v - v * p / 100,
            wrong=lambda v: v * p / 100,
            slip=lambda v: v - p,
        )
    if kind == "fraction":
        options = [(a, b) for b in (2, 3, 4, 5, 6) for a in range(1, b) if x % b == 0]
        options = [(a, b) for a, b in options if Fraction(a, b).denominator == b]
        if not options:
            return None
        a, b = rng.choice(options)
        text = f"{subj} gives away {a}/{b} of the remaining {items}."
        return Step(kind, text, lambda v: v - v * a / b, wrong=lambda v: v * a / b)
    raise ValueError(f"unknown step kind {kind!r}")


def _make_final(
    rng: random.Random, x: Fraction, name: str, pron: str, items: str, item: str
) -> Step:
    """A closing question that transforms the quantity once more: bags filled or dollars."""
    ks = [k for k in range(2, 13) if x % k == 0 and x // k >= 2]
    if ks and rng.random() < 0.5:
        k = rng.choice(ks)
        text = (
            f"{name} packs all the remaining {items} into bags of {k}. "
            f"How many bags does {pron} fill?"
        )
        return Step("pack", text, lambda v: v / k, wrong=lambda v: v * k, slip=lambda v: v - k)
    p = rng.randint(2, 9)
    text = (
        f"{name} sells every remaining {item} for ${p}. How many dollars does {pron} earn in total?"
    )
    return Step("price", text, lambda v: v * p, wrong=lambda v: v + p, slip=lambda v: v * p * 100)


def _replay(start: Fraction, steps: list[Step], swap: int = -1, with_op: str = "") -> Fraction:
    """The chain's result with step ``swap`` skipped (``with_op=""``) or replaced by its
    ``wrong`` / ``slip`` variant."""
    value = start
    for k, step in enumerate(steps):
        if k != swap:
            value = step.apply(value)
        elif with_op:
            value = getattr(step, with_op)(value)
    return value


def _distractors(
    rng: random.Random, start: Fraction, steps: list[Step], answer: Fraction
) -> list[tuple[int, str]]:
    """3-4 wrong whole numbers from typical mistakes, most typical first, with labels."""
    idx = list(range(len(steps)))
    rng.shuffle(idx)
    ordered: list[tuple[Fraction, str]] = []
    wrongs = [k for k in idx if steps[k].wrong is not None]
    slips = [k for k in idx if steps[k].slip is not None]
    sign = rng.choice((1, -1))
    # One of each mistake first, then the rest of each as fall-backs.
    ordered.append((_replay(start, steps, idx[0]), "skipped-step"))
    ordered += [(_replay(start, steps, k, "wrong"), "wrong-operation") for k in wrongs[:1]]
    ordered += [(_replay(start, steps, k, "slip"), "unit-slip") for k in slips[:1]]
    ordered.append((answer + sign, "off-by-one"))
    ordered += [(_replay(start, steps, k), "skipped-step") for k in idx[1:]]
    ordered += [(_replay(start, steps, k, "wrong"), "wrong-operation") for k in wrongs[1:]]
    ordered += [(_replay(start, steps, k, "slip"), "unit-slip") for k in slips[1:]]
    ordered += [(answer - sign, "off-by-one"), (answer * 2, "doubled"), (answer + 10, "slip-10")]
    out: list[tuple[int, str]] = []
    seen = {answer}
    for value, label in ordered:
        if value.denominator == 1 and value >= 0 and value not in seen:
            seen.add(value)
            out.append((int(value), label))
        if len(out) == 4:
            break
    return out
