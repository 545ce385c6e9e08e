"""The team runtime: one episode of N agents on one task, round by round (docs/team.md).

Per round: the plan's actions (or explicit edges) induce the graph over the agents that are
live (not crashed / timed out) and active; the graph's layers run in topological order,
the agents of one layer concurrently (``asyncio.gather``); each agent reads the answers on
its in-edges (this round's :class:`Message` objects) and its own previous step (temporal
edge). After the last round the decision agent (agent ``-1``) reads the live agents' final
answers; the back-end scores the team answer and the reward is
``w_acc * score - w_tok * min(tokens / token_budget, 1)`` (:func:`reward`).

Rules worth knowing (docs/team.md):

* An inactive agent (``plan.active[i]`` False) makes no call and spends nothing; its
  step carries its previous answer forward so that the record stays rectangular.
* An idle agent — solo_process after round 0, healthy, holding an answer, with no in- or
  out-edge this round — keeps its answer without a call (``RuntimeConfig.idle = "keep"``,
  the default; ``"call"`` re-solves it alone as before). Its step has zero tokens, no
  LLM call is logged, and its next call remembers the turn that produced the answer.
* A timed-out agent's call is made without an inbox and then discarded: prompt tokens
  are spent, completion tokens are not.
* A message's ``tokens`` is the sender's completion tokens (its whole response is
  forwarded).
* The decision agent makes no call when only one final answer exists (it is passed
  through) and gives no answer when none exists. With ``RuntimeConfig.pass_through =
  "unanimous"`` (opt-in; a deviation from the paper) it also makes none when every final
  answer it would read is the same: it returns that answer (self-consistency's early
  stop). ``EpisodeRecord.pass_through`` says which rule spared the call.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from core.actions import Action, RoundGraph, induce_graph, resolve_edges
from core.backends.base import AgentTurn, Backend, DecisionTurn, PastTurn, TurnResult
from core.backends.society import DEFAULT_PRESET, get_preset
from core.records import DECISION_AGENT, AgentStep, EpisodeRecord, LLMCall, Message, RoundRecord
from core.tasks.base import Task
from core.tasks.scoring import score, scoring_blocks
from core.team.failures import SILENT_MODES, FailureSpec, fault_table
from core.team.plan import RoundPlan
from core.team.settings import check

T = TypeVar("T")

DEFAULT_ROLES = ("solver", "coder", "analyst", "verifier")
DEFAULT_ROUNDS = 3
DEFAULT_TOKEN_WEIGHT = 0.1
"""w_tok, as in the paper's code."""
TOKEN_PENALTIES = ("capped", "linear")
IDLE_RULES = ("keep", "call")
"""What an idle agent does (docs/team.md, "Idle agents"): ``keep`` its answer without a call,
or be ``call``-ed to re-solve alone (the behaviour before the rule existed)."""
PASS_THROUGH_RULES = ("off", "unanimous")
"""When the decision agent returns the team's answer without a call (docs/team.md, "Consensus
pass-through"): ``off`` — only when one final answer exists (the paper); ``unanimous`` — also
when every final answer it would read agrees."""
KEPT_TEXT = "(idle: kept its answer, no call)"
"""The text of an idle agent's step; its tokens are zero and no LLM call is logged."""


def _default_budget() -> float:
    return float(get_preset(DEFAULT_PRESET).token_budget)


@dataclass
class RuntimeConfig:
    """How an episode is run and rewarded."""

    n_rounds: int = DEFAULT_ROUNDS
    """Communication rounds before the decision agent answers."""
    accuracy_weight: float = 1.0
    """w_acc in the reward."""
    token_weight: float = DEFAULT_TOKEN_WEIGHT
    """w_tok in the reward."""
    token_budget: float = field(default_factory=_default_budget)
    """Tokens at which the capped penalty saturates (the default preset's full-mesh mean)."""
    token_penalty: str = "capped"
    """``capped``: ``min(tokens / budget, 1)`` (the paper's); ``linear``: ``tokens / budget``."""
    idle: str = "keep"
    """An idle agent — solo_process after round 0, holding an answer, reading nothing and read
    by nobody this round — ``keep``s its answer without a call, or is ``call``-ed anyway."""
    pass_through: str = "off"
    """``unanimous``: the decision agent returns the final answers' common answer without a
    call when they all agree; ``off``: it is called whenever two or more answers exist."""

    def validate(self) -> None:
        """Numbers by the team settings' one rule (:mod:`core.team.settings`), so a config
        built in code is held to what the flags are."""
        check("rounds", self.n_rounds)
        for name in ("token_budget", "token_weight", "accuracy_weight"):
            check(name, getattr(self, name))
        if self.token_penalty not in TOKEN_PENALTIES:
            raise ValueError(
                f"token_penalty = {self.token_penalty!r} is not one of {TOKEN_PENALTIES}"
            )
        if self.idle not in IDLE_RULES:
            raise ValueError(f"idle = {self.idle!r} is not one of {IDLE_RULES}")
        if self.pass_through not in PASS_THROUGH_RULES:
            raise ValueError(
                f"pass_through = {self.pass_through!r} is not one of {PASS_THROUGH_RULES}"
            )


def garble(text: str, seed: int) -> str:
    """Unreadable output: the characters of ``text`` shuffled deterministically."""
    chars = list(text)
    random.Random(seed).shuffle(chars)
    return "".join(chars).replace(":", "#")


class TeamEpisode:
    """One episode in progress; ``play_round`` R times, then ``finish``."""

    def __init__(
        self,
        task: Task,
        roles: Sequence[str],
        backend: Backend,
        *,
        config: RuntimeConfig | None = None,
        failures: Sequence[FailureSpec] = (),
        seed: int = 0,
        policy_name: str = "",
    ):
        self.config = config or RuntimeConfig()
        self.config.validate()
        self.task = task
        self.roles = list(roles)
        self.n_agents = len(self.roles)
        if self.n_agents < 1:
            raise ValueError("a team needs at least one agent")
        self.backend = backend
        self.failures = list(failures)
        self.seed = seed
        self.faults = fault_table(self.failures, self.n_agents, self.config.n_rounds)
        self.rounds: list[RoundRecord] = []
        self.graphs: list[RoundGraph] = []
        self.calls: list[LLMCall] = []
        self.last: list[AgentStep | None] = [None] * self.n_agents
        """Each agent's step in the last played round."""
        self._producing: list[AgentStep | None] = [None] * self.n_agents
        self._held = [False] * self.n_agents
        """Which agents held an answer after the last round (one a temporal edge can carry)."""
        self._memory: list[AgentStep | None] = [None] * self.n_agents
        """What each agent remembers as its previous turn: its last step that was not kept by
        the idle rule (a kept step only carries that answer forward)."""
        self._history: list[list[PastTurn]] = [[] for _ in range(self.n_agents)]
        """Each agent's earlier turns that answered (``AgentTurn.history``)."""
        self.record: EpisodeRecord | None = None
        self.policy_name = policy_name
        # A back-end that never waits is played call after call (see run_sync).
        self.synchronous = bool(getattr(backend, "synchronous", False))
        self.serial = bool(getattr(backend, "serial", False))

    # -- state the observation builder reads --------------------------------------------

    @property
    def round_index(self) -> int:
        """The round to be played next (``n_rounds`` once all are played)."""
        return len(self.rounds)

    @property
    def done(self) -> bool:
        return len(self.rounds) >= self.config.n_rounds

    def fault_at(self, agent: int, round_index: int) -> str | None:
        if round_index >= self.config.n_rounds:
            round_index = self.config.n_rounds - 1
        return self.faults[round_index][agent]

    def silent_at(self, round_index: int) -> list[bool]:
        """Which agents are crashed or timed out in ``round_index``."""
        return [self.fault_at(i, round_index) in SILENT_MODES for i in range(self.n_agents)]

    @property
    def tokens(self) -> int:
        return sum(c.prompt_tokens + c.completion_tokens for c in self.calls)

    def agent_tokens(self) -> list[int]:
        totals = [0] * self.n_agents
        for r in self.rounds:
            for s in r.steps:
                totals[s.agent] += s.tokens
        return totals

    async def _gather(self, jobs: list) -> list[AgentStep]:
        """One layer's calls: concurrent on the event loop, or one after the other in agent
        order when the back-end never waits or its server decodes one call at a time (a
        stable order keeps the server's cached prompt prefix useful). The steps are the same
        either way: every call draws from its own seeded RNG, and the record sorts what
        arrives in any order."""
        if self.synchronous or self.serial or len(jobs) == 1:
            return [await job for job in jobs]
        return list(await asyncio.gather(*jobs))

    # -- one round -----------------------------------------------------------------------

    async def play_round(self, plan: RoundPlan) -> RoundRecord:
        """Run one round of ``plan`` and return its record."""
        if self.done:
            raise RuntimeError(f"all {self.config.n_rounds} rounds were already played")
        r, n = self.round_index, self.n_agents
        if len(plan.actions) != n:
            raise ValueError(f"plan has {len(plan.actions)} actions for {n} agents")
        faults = self.faults[r]
        active = plan.active if plan.active is not None else [True] * n
        runs = [faults[i] not in SILENT_MODES and bool(active[i]) for i in range(n)]
        confidence = None if r == 0 else [s.confidence if s else 0.0 for s in self.last]
        if plan.edges is None:
            graph = induce_graph(plan.actions, runs, confidence)
        else:
            graph = resolve_edges(plan.edges, plan.actions, runs)
        edges = graph.edges  # a tensor-to-list conversion: do it once per round
        sources: list[list[int]] = [[] for _ in range(n)]
        speaks = [False] * n
        for src, dst in edges:
            sources[dst].append(src)
            speaks[src] = True
        sources = [sorted(x) for x in sources]
        earlier = self._earlier(plan, r, runs)

        steps: list[AgentStep | None] = [None] * n
        messages: list[Message] = []
        timed_out = [i for i in range(n) if faults[i] == "timeout" and active[i]]
        kept = (
            self._idle_agents(r, plan, sources, speaks, earlier)
            if self.config.idle == "keep"
            else ()
        )
        for i in kept:
            steps[i] = self._keep(i, r, plan)
        for k, layer in enumerate(graph.layers):
            jobs = [
                self._agent(i, r, plan, sources[i], steps, messages, earlier[i])
                for i in layer
                if steps[i] is None
            ]
            if k == 0:
                jobs += [self._timeout(i, r, plan) for i in timed_out]
            done = await self._gather(jobs)
            for step in done:
                steps[step.agent] = step
        if not graph.layers and timed_out:
            for step in await self._gather([self._timeout(i, r, plan) for i in timed_out]):
                steps[step.agent] = step
        for i in range(n):
            if steps[i] is None:
                steps[i] = self._idle(i, r, plan, faults[i])
            self._fill_policy_view(steps[i], plan)
        record = RoundRecord(
            round=r,
            edges=edges,
            dropped_edges=list(graph.dropped),
            layers=[list(layer) for layer in graph.layers],
            steps=list(steps),
            messages=sorted(messages, key=lambda m: (m.dst, m.src)),
            q_tot=plan.q_tot,
            mixer_weights=plan.mixer_weights,
            credit=plan.credit,
        )
        self.rounds.append(record)
        self.graphs.append(graph)
        self.last = list(steps)
        for i in set(range(n)).difference(kept):
            self._memory[i] = steps[i]
        # Who holds an answer it produced or kept this round: what a temporal edge carries next.
        self._held = [
            steps[i].answer is not None and (i in kept or steps[i].text != "") for i in range(n)
        ]
        return record

    def _earlier(self, plan: RoundPlan, r: int, runs: list[bool]) -> list[list[Message]]:
        """Per agent, the messages its temporal in-edges carry this round: the answer each
        source held after the previous round (the step that produced it), in source order.
        A source that is silent this round (failed agents send nothing), or held no answer
        after the last one (inactive, crashed, garbled), sends nothing; one that is merely
        inactive this round still does (its answer is history). A reader that does not run
        reads nothing."""
        n = self.n_agents
        out: list[list[Message]] = [[] for _ in range(n)]
        if r == 0 or not plan.temporal:
            return out
        silent = self.silent_at(r)
        for src, dst in sorted({(int(s), int(d)) for s, d in plan.temporal}):
            if src == dst or not runs[dst] or silent[src] or not self._held[src]:
                continue
            step = self._producing[src]
            out[dst].append(
                Message(
                    src=src,
                    dst=dst,
                    round=r,
                    text=step.text,
                    answer=step.answer,
                    confidence=step.confidence,
                    tokens=step.completion_tokens,
                )
            )
        return out

    async def _agent(
        self,
        i: int,
        r: int,
        plan: RoundPlan,
        sources: list[int],
        steps: list,
        messages: list,
        earlier: list[Message],
    ) -> AgentStep:
        inbox = []
        for j in sources:
            src = steps[j]
            msg = Message(
                src=j,
                dst=i,
                round=r,
                text=src.text,
                answer=src.answer,
                confidence=src.confidence,
                tokens=src.completion_tokens,
            )
            inbox.append(msg)
            messages.append(msg)
        messages.extend(earlier)
        fault = self.faults[r][i]
        turn = AgentTurn(
            task=self.task,
            agent=i,
            role=self.roles[i],
            round=r,
            n_rounds=self.config.n_rounds,
            action=Action(plan.actions[i]),
            previous=self._memory[i],
            inbox=inbox,
            earlier=list(earlier),
            fault="byzantine" if fault == "byzantine" else None,
            episode_seed=self.seed,
            history=list(self._history[i]),
        )
        result = await self.backend.agent_turn(turn)
        self.calls.append(result.call)
        step = AgentStep(
            agent=i,
            role=self.roles[i],
            round=r,
            action=int(plan.actions[i]),
            fault=fault,
            answer=result.answer,
            confidence=float(result.confidence),
            text=result.text,
            prompt_tokens=result.call.prompt_tokens,
            completion_tokens=result.call.completion_tokens,
            read_from=sorted({*sources, *(m.src for m in earlier)}),
            verified=result.verified,
        )
        if result.failed:
            step.fault, step.answer, step.confidence = "call_error", None, 0.0
        elif fault == "garbled":
            step.text = garble(result.text, self.seed * 7919 + r * 31 + i)
            step.answer, step.confidence = None, 0.0
        step.correct = None if step.answer is None else await self._score(step.answer) >= 1.0
        read = [m.answer for m in (*inbox, *earlier) if m.answer is not None]
        if read and step.answer is not None:
            step.agreement = sum(a == step.answer for a in read) / len(read)
        if step.answer is not None:
            self._producing[i] = step
        if not result.failed:
            self._history[i].append(
                PastTurn(
                    replace(turn, history=[]),
                    step.text,
                    step.prompt_tokens + step.completion_tokens,
                )
            )
        return step

    def _idle_agents(
        self,
        r: int,
        plan: RoundPlan,
        sources: list[list[int]],
        speaks: list[bool],
        earlier: list[list[Message]],
    ) -> list[int]:
        """Agents with nothing to do this round: solo_process after round 0, healthy, holding
        a readable answer, reading nothing (this round or along a temporal edge) and read by
        nobody this round. A call would only re-solve the task alone with the same memory, so
        the idle rule keeps their answer instead."""
        if r == 0:
            return []
        faults = self.faults[r]
        return [
            i
            for i in range(self.n_agents)
            if plan.actions[i] == Action.SOLO_PROCESS
            and faults[i] is None
            and not sources[i]
            and not earlier[i]
            and not speaks[i]
            and self.last[i] is not None
            and self.last[i].answer is not None
            and (plan.active is None or bool(plan.active[i]))
        ]

    def _keep(self, i: int, r: int, plan: RoundPlan) -> AgentStep:
        """An idle agent's step: its last answer kept, no call, no tokens."""
        prev = self.last[i]
        return AgentStep(
            agent=i,
            role=self.roles[i],
            round=r,
            action=int(plan.actions[i]),
            answer=prev.answer,
            confidence=prev.confidence,
            correct=prev.correct,
            text=KEPT_TEXT,
        )

    async def _timeout(self, i: int, r: int, plan: RoundPlan) -> AgentStep:
        turn = AgentTurn(
            task=self.task,
            agent=i,
            role=self.roles[i],
            round=r,
            n_rounds=self.config.n_rounds,
            action=Action(plan.actions[i]),
            previous=self._memory[i],
            episode_seed=self.seed,
        )
        result: TurnResult = await self.backend.agent_turn(turn)
        call = LLMCall(
            agent=i,
            round=r,
            prompt_hash=result.call.prompt_hash,
            prompt_tokens=result.call.prompt_tokens,
            completion_tokens=0,
            usage_reported=result.call.usage_reported,
            latency_s=result.call.latency_s,
            retries=result.call.retries,
            error="timeout",
            prompt=result.call.prompt,
        )
        self.calls.append(call)
        return AgentStep(
            agent=i,
            role=self.roles[i],
            round=r,
            action=int(plan.actions[i]),
            alive=False,
            fault="timeout",
            prompt_tokens=call.prompt_tokens,
        )

    def _idle(self, i: int, r: int, plan: RoundPlan, fault: str | None) -> AgentStep:
        """A crashed agent (nothing), or an inactive one (its previous answer carried)."""
        if fault == "crash":
            return AgentStep(
                agent=i,
                role=self.roles[i],
                round=r,
                action=int(plan.actions[i]),
                alive=False,
                fault="crash",
            )
        prev = self.last[i]
        return AgentStep(
            agent=i,
            role=self.roles[i],
            round=r,
            action=int(plan.actions[i]),
            alive=fault not in SILENT_MODES,
            fault=fault,
            answer=prev.answer if prev else None,
            confidence=prev.confidence if prev else 0.0,
            correct=prev.correct if prev else None,
        )

    async def _score(self, answer: str) -> float:
        """Score through the tasks' one entry point, off the event loop when it runs code."""
        run_code = self.backend.answers_are_programs
        if scoring_blocks(self.task, run_code) and not self.synchronous:
            return await asyncio.to_thread(score, self.task, answer, run_code, self.backend.sandbox)
        return score(self.task, answer, run_code, self.backend.sandbox)

    @staticmethod
    def _fill_policy_view(step: AgentStep, plan: RoundPlan) -> None:
        i = step.agent
        if plan.q_values is not None:
            step.q_values = [float(q) for q in plan.q_values[i]]
        if plan.greedy is not None:
            step.greedy = bool(plan.greedy[i])
        if plan.epsilon is not None:
            step.epsilon = float(plan.epsilon)

    # -- the decision ---------------------------------------------------------------------

    def finals(self) -> list[AgentStep]:
        """The steps that produced the live agents' final answers (in agent order)."""
        last_round = self.config.n_rounds - 1
        out = []
        for i in range(self.n_agents):
            step = self._producing[i]
            if step is None or self.faults[last_round][i] in SILENT_MODES:
                continue
            if self.last[i] is not None and self.last[i].answer is None:
                continue  # garbled or failed in its last round: nothing readable
            out.append(step)
        return out

    async def finish(self) -> EpisodeRecord:
        """Play the decision agent, score the team answer and return the episode record."""
        if not self.done:
            raise RuntimeError(
                f"finish() after {len(self.rounds)} of {self.config.n_rounds} rounds"
            )
        if self.record is not None:
            return self.record
        finals = self.finals()
        decision = AgentStep(
            agent=DECISION_AGENT,
            role="decision",
            round=self.config.n_rounds,
            action=int(Action.AGGREGATE_REFINE),
            read_from=[s.agent for s in finals],
        )
        passed = self._pass_through(finals)
        if passed == "single":
            only = finals[0]
            decision.answer, decision.confidence = only.answer, only.confidence
            decision.text = (
                f"[decision] Only agent {only.agent} answered; its answer is passed through."
            )
        elif passed == "unanimous":
            decision.answer = finals[0].answer
            decision.confidence = sum(s.confidence for s in finals) / len(finals)
            decision.text = (
                f"[decision] All {len(finals)} final answers agree; the answer is passed "
                "through without a call (--pass-through unanimous)."
            )
        elif finals:
            turn = DecisionTurn(
                task=self.task, finals=finals, episode_seed=self.seed, n_rounds=self.config.n_rounds
            )
            result = await self.backend.decide(turn)
            self.calls.append(result.call)
            decision.text = result.text
            decision.prompt_tokens = result.call.prompt_tokens
            decision.completion_tokens = result.call.completion_tokens
            if result.failed:
                decision.fault = "call_error"
            else:
                decision.answer, decision.confidence = result.answer, float(result.confidence)
        else:
            decision.text = "[decision] No agent has a readable answer."
        team_score = await self._score(decision.answer) if decision.answer is not None else 0.0
        decision.correct = None if decision.answer is None else team_score >= 1.0
        if decision.answer is not None:
            read = [s.answer for s in finals]
            decision.agreement = sum(a == decision.answer for a in read) / len(read)
        # Concurrent calls finish in any order; records must not depend on it.
        self.calls.sort(key=lambda c: (c.round, c.agent))
        task = self.task
        record = EpisodeRecord(
            task_id=task.task_id,
            benchmark=task.benchmark,
            domain=task.domain,
            difficulty=task.difficulty,
            question=task.question,
            ground_truth=task.answer,
            roles=list(self.roles),
            policy=self.policy_name,
            seed=self.seed,
            rounds=self.rounds,
            decision=decision,
            team_answer=decision.answer,
            score=float(team_score),
            failures=[f.to_dict() for f in self.failures],
            calls=list(self.calls),
            backend=self.backend.name,
            model=self.backend.model,
            pass_through=passed,
        )
        record.reward = reward(record.score, record.tokens, self.config)
        self.record = record
        return record

    def _pass_through(self, finals: list[AgentStep]) -> str | None:
        """Why the decision agent makes no call: ``single`` (one final answer), ``unanimous``
        (the opt-in rule, every final answer the same) or None (it is called, or no answer
        exists)."""
        if len(finals) == 1:
            return "single"
        answers = {s.answer for s in finals}
        unanimous = len(answers) == 1 and None not in answers  # text without an answer: read it
        if unanimous and self.config.pass_through == "unanimous":
            return "unanimous"
        return None


def reward(score: float, tokens: int, config: RuntimeConfig) -> float:
    """``w_acc * score - w_tok * penalty``, penalty = ``min(tokens / budget, 1)`` (capped, the
    paper's) or ``tokens / budget`` (linear, for trade-off research); docs/team.md."""
    penalty = tokens / config.token_budget
    if config.token_penalty == "capped":
        penalty = min(penalty, 1.0)
    return config.accuracy_weight * score - config.token_weight * penalty


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that never suspends (an episode on a synchronous back-end) to its end
    without an event loop: the loop's scheduling costs more than the society's calls."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise RuntimeError("a coroutine of a synchronous back-end waited; it needs an event loop")


@dataclass
class EpisodeJob:
    """One episode to run: a task, its seed and its failures."""

    task: Task
    seed: int
    failures: list[FailureSpec] = field(default_factory=list)
