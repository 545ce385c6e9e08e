"""A tiny task family where the right graph is known: an expert and three followers.

:class:`ExpertBackend` is a real back-end of the team runtime (the protocol of
:mod:`core.backends.base`), deterministic and instant. Agent 0, the expert, always answers
right. Any other agent answers a shared wrong answer unless it reads the expert's answer
(this round, or the last one along a temporal edge), which it then adopts; reading anyone
else changes nothing. The decision agent answers wrong as soon as one final answer is
wrong. Every message read costs prompt tokens. So the team is right exactly when every
follower that answers reads the expert, and the best graph is the three edges out of the
expert (0 -> 1, 0 -> 2, 0 -> 3) and nothing else: every other edge only costs tokens, and
an edge into the expert can make the runtime's cycle rule drop one of the good ones.
"""

from __future__ import annotations

from core.backends.base import AgentTurn, DecisionTurn, TurnResult
from core.records import LLMCall
from core.team.env import TeamEnv
from core.team.options import TeamOptions

WRONG = "wrong"
GOOD = {(0, 1), (0, 2), (0, 3)}
"""The right graph's edges."""


class ExpertBackend:
    name = "expert"
    model = "expert-family"
    answers_are_programs = False
    synchronous = True
    sandbox = "auto"  # never used: it answers with labels, not programs

    async def agent_turn(self, turn: AgentTurn) -> TurnResult:
        read = [m for m in (*turn.inbox, *turn.earlier) if m.answer is not None]
        if turn.agent == 0:
            answer = turn.task.answer
        else:
            expert = [m.answer for m in read if m.src == 0]
            answer = expert[0] if expert else WRONG
        call = LLMCall(
            turn.agent, turn.round, f"e{turn.agent}{turn.round}", 10 + 10 * len(read), 10
        )
        return TurnResult(text=f"Answer: {answer}", answer=answer, confidence=0.5, call=call)

    async def decide(self, turn: DecisionTurn) -> TurnResult:
        answers = [s.answer for s in turn.finals]
        answer = WRONG if WRONG in answers else answers[0]
        call = LLMCall(-1, turn.n_rounds, "ed", 10, 10)
        return TurnResult(text=f"Answer: {answer}", answer=answer, confidence=0.5, call=call)

    async def aclose(self) -> None:
        return None


def expert_team(rounds: int = 1, seed: int = 0) -> TeamEnv:
    """The family on the ``math`` tasks' training split: 4 agents, a linear token penalty of
    1 per 200 tokens (a message read costs 0.05 of reward, a right answer 1)."""
    opts = TeamOptions(
        benchmark="math",
        rounds=rounds,
        token_weight=1.0,
        token_budget=200.0,
        token_penalty="linear",
        seed=seed,
    )
    return TeamEnv(opts, "train", backend=ExpertBackend())


class ToolBackend(ExpertBackend):
    """The with-tools family: only agent 0 holds the tool, and the decision agent returns
    agent 0's answer. Agent 0 answers right when it takes ``execute_verify`` (20 more
    tokens), wrong otherwise; any other agent adopts a right answer it reads (which changes
    nothing), and verifying costs it as much. The best plan: agent 0 verifies, nobody else
    does, no edge at all (every message read only costs tokens)."""

    name = "tool"

    async def agent_turn(self, turn: AgentTurn) -> TurnResult:
        from core.actions import Action

        read = [m for m in (*turn.inbox, *turn.earlier) if m.answer is not None]
        verifies = turn.action == Action.EXECUTE_VERIFY
        if turn.agent == 0 and verifies:
            answer = turn.task.answer
        else:
            right = [m.answer for m in read if m.answer == turn.task.answer]
            answer = right[0] if right else WRONG
        prompt = 10 + 10 * len(read) + 20 * verifies
        call = LLMCall(turn.agent, turn.round, f"t{turn.agent}{turn.round}", prompt, 10)
        return TurnResult(text=f"Answer: {answer}", answer=answer, confidence=0.5, call=call)

    async def decide(self, turn: DecisionTurn) -> TurnResult:
        answer = turn.finals[0].answer
        call = LLMCall(-1, turn.n_rounds, "td", 10, 10)
        return TurnResult(text=f"Answer: {answer}", answer=answer, confidence=0.5, call=call)


def tool_team(seed: int = 0) -> TeamEnv:
    """The with-tools family on the ``math`` tasks' training split (as :func:`expert_team`)."""
    opts = TeamOptions(
        benchmark="math",
        rounds=1,
        token_weight=1.0,
        token_budget=200.0,
        token_penalty="linear",
        seed=seed,
    )
    return TeamEnv(opts, "train", backend=ToolBackend())


class DomainExpertBackend(ExpertBackend):
    """The per-query family: which agent is the expert depends on the query — agent 0 on
    maths tasks, agent 3 on every other task (multiple choice, code). As in
    :class:`ExpertBackend` a follower is right only if it reads the expert, so the right
    graph is the three edges out of agent 0 for a maths query and the three out of agent 3
    for any other: a method that plays one graph for every query is wrong on one side."""

    name = "domain-expert"

    async def agent_turn(self, turn: AgentTurn) -> TurnResult:
        expert = DOMAIN_EXPERT.get(turn.task.domain, 3)
        read = [m for m in (*turn.inbox, *turn.earlier) if m.answer is not None]
        if turn.agent == expert:
            answer = turn.task.answer
        else:
            heard = [m.answer for m in read if m.src == expert]
            answer = heard[0] if heard else WRONG
        call = LLMCall(
            turn.agent, turn.round, f"d{turn.agent}{turn.round}", 10 + 10 * len(read), 10
        )
        return TurnResult(text=f"Answer: {answer}", answer=answer, confidence=0.5, call=call)


DOMAIN_EXPERT = {"math": 0}
"""The expert of each domain (3 for every domain not listed)."""


def domain_expert_team(seed: int = 0) -> TeamEnv:
    """The per-query family on the ``mixed`` tasks' training split (maths, multiple choice
    and code interleaved), otherwise as :func:`expert_team`."""
    opts = TeamOptions(
        benchmark="mixed",
        rounds=1,
        token_weight=1.0,
        token_budget=200.0,
        token_penalty="linear",
        seed=seed,
    )
    return TeamEnv(opts, "train", backend=DomainExpertBackend())
