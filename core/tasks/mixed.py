"""``mixed``: generated maths, the shipped multiple-choice set and HumanEval, interleaved.

Tasks come in blocks of ten: 5 maths, 3 multiple choice, 2 code (the default
``MixedConfig.per_block``), in an order shuffled per block from the seed. So every prefix
of ten tasks has exactly those proportions, and the domains are interleaved rather than
in runs. The k-th task of a domain in the whole stream is that domain's source task
``k mod len(source)``, so a domain repeats only after its source is used up.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from core.tasks.base import Task, TaskSource
from core.tasks.code import CodeSource
from core.tasks.math import MathSource
from core.tasks.mcq import MCQSource


@dataclass(frozen=True)
class MixedConfig:
    """Settings of the interleaved benchmark."""

    seed: int = 0
    """Seed of the block order and of the underlying sources."""
    size: int = 1000
    """Number of tasks the source reports (``len``)."""
    per_block: tuple[tuple[str, int], ...] = (("math", 5), ("mcq", 3), ("code", 2))
    """How many tasks of each domain every block holds, in order of the block."""

    def validate(self) -> None:
        if self.size < 1:
            raise ValueError(f"size must be >= 1, got {self.size}")
        names = [name for name, _ in self.per_block]
        if not set(names) <= {"math", "mcq", "code"} or len(set(names)) != len(names):
            raise ValueError(f"per_block domains must be distinct of math/mcq/code, got {names}")
        if any(count < 0 for _, count in self.per_block) or not sum(c for _, c in self.per_block):
            raise ValueError(f"per_block counts must be >= 0 with a positive sum: {self.per_block}")


class MixedSource:
    """Interleaved maths / mcq / code tasks (``TaskSource``)."""

    name = "mixed"

    def __init__(self, seed: int = 0, size: int = 1000, config: MixedConfig | None = None) -> None:
        self.config = config or MixedConfig(seed=seed, size=size)
        self.config.validate()
        seed = self.config.seed
        factories = {
            "math": lambda: MathSource(seed, size=self.config.size),  # never repeats
            "mcq": lambda: MCQSource(seed),
            "code": lambda: CodeSource(seed),
        }
        self.sources: dict[str, TaskSource] = {
            name: factories[name]() for name, count in self.config.per_block if count
        }
        self.block = [name for name, count in self.config.per_block for _ in range(count)]

    def __len__(self) -> int:
        return self.config.size

    def domain_at(self, index: int) -> tuple[str, int]:
        """The domain of task ``index`` and its position in that domain's stream."""
        block, slot = divmod(index, len(self.block))
        order = list(self.block)
        random.Random(f"mixed|{self.config.seed}|{block}").shuffle(order)
        domain = order[slot]
        within = order[:slot].count(domain)
        return domain, block * self.block.count(domain) + within

    def get(self, index: int) -> Task:
        if not 0 <= index < self.config.size:
            raise IndexError(f"mixed task index {index} outside 0..{self.config.size - 1}")
        domain, k = self.domain_at(index)
        source = self.sources[domain]
        return source.get(k % len(source))
