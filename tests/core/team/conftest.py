"""Shared helpers: hand-built tasks and a real latency back-end for runtime tests."""

from __future__ import annotations

import asyncio
import time

import pytest

from core.backends.base import AgentTurn, DecisionTurn, TurnResult
from core.records import LLMCall
from core.tasks.base import Task


def make_task(i: int = 0, difficulty: int = 3, domain: str = "math") -> Task:
    if domain == "code":
        return Task(
            f"code-{i}",
            "hand",
            "code",
            f"def f{i}(x):\n    '''Return x plus {i}.'''\n",
            f"    return x + {i}\n",
            difficulty=difficulty,
        )
    if domain == "mcq":
        return Task(
            f"mcq-{i}",
            "hand",
            "mcq",
            f"Question {i}? (A) one (B) two (C) three (D) four",
            "B",
            difficulty=difficulty,
            choices=("one", "two", "three", "four"),
        )
    return Task(
        f"math-{i}",
        "hand",
        "math",
        f"Ava has {10 + i} apples and buys {i + 2} more. How many?",
        str(12 + 2 * i),
        difficulty=difficulty,
        distractors=(str(11 + 2 * i), str(10 + i)),
    )


class LatencyBackend:
    """A real back-end with wall-clock latency: every call sleeps, and its span is logged.

    Agent ``i`` answers ``str(i)`` with confidence 0.5; prompt tokens = 10 + 5 per message
    read; completion tokens = 7. The decision picks the lowest agent's answer.
    """

    name = "latency"
    model = "latency-test"
    answers_are_programs = False
    sandbox = "auto"

    def __init__(self, latency: float = 0.05):
        self.latency = latency
        self.spans: list[tuple[int, int, float, float]] = []
        self.turns: list[AgentTurn] = []

    async def agent_turn(self, turn: AgentTurn) -> TurnResult:
        start = time.perf_counter()
        await asyncio.sleep(self.latency)
        self.spans.append((turn.agent, turn.round, start, time.perf_counter()))
        self.turns.append(turn)
        call = LLMCall(
            turn.agent, turn.round, f"h{turn.agent}{turn.round}", 10 + 5 * len(turn.inbox), 7
        )
        return TurnResult(
            text=f"Answer: {turn.agent}", answer=str(turn.agent), confidence=0.5, call=call
        )

    async def decide(self, turn: DecisionTurn) -> TurnResult:
        await asyncio.sleep(self.latency)
        best = min(turn.finals, key=lambda s: s.agent)
        call = LLMCall(-1, turn.n_rounds, "hd", 20 + 7 * len(turn.finals), 3)
        return TurnResult(
            text=f"Answer: {best.answer}", answer=best.answer, confidence=0.9, call=call
        )

    async def aclose(self) -> None:
        return None


@pytest.fixture
def latency_backend() -> LatencyBackend:
    return LatencyBackend()
