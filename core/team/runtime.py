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
from typing import Any, TypeVar, cast

from core.actions import Action, RoundGraph, induce_graph, resolve_edges
from core.backends.base import AgentTurn, Backend, DecisionTurn, PastTurn, TurnResult
from core.backends.society import DEFAULT_PRESET, get_preset
from core.records import DECISION_AGENT, AgentStep, EpisodeRecord, LLMCall, Message, RoundRecord
from core.tasks.base import Task
from core.tasks.scoring import score, scoring_blocks
from core.team.failures import SILENT_MODES, FailureSpec, fault_table
from core.team.plan import RoundPlan
from core.team.settings import check, check_choice

T = TypeVar("T")

DEFAULT_ROLES = ("solver", "coder", "analyst", "verifier")
DEFAULT_ROUNDS = 3
DEFAULT_TOKEN_WEIGHT = 0.1
"""w_tok, as in the paper's code."""
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
        for name in ("token_penalty", "idle", "pass_through"):
            check_choice(name, getattr(self, name))


def garble(text: str, seed: int) -> str:
    """Unreadable output: the characters of ``text`` shuffled deterministically."""
    chars = list(text)
    random.Random(seed).shuffle(chars)
    return "".join(chars).replace(":", "#")


def _message(step: AgentStep, src: int, dst: int, round_index: int) -> Message:
    """``src``'s answer as ``dst`` reads it in ``round_index``: the whole response of the step
    that produced it (the message's tokens are that step's completion tokens)."""
    return Message(
        src=src,
        dst=dst,
        round=round_index,
        text=step.text,
        answer=step.answer,
        confidence=step.confidence,
        tokens=step.completion_tokens,
    )


@dataclass
class _Round:
    """One round being played: the plan, the graph it induced, who reads whom, and the steps
    and messages so far (filled layer by layer)."""

    index: int
    """The round's index, from 0."""
    plan: RoundPlan
    """What the policy chose: actions, and any explicit, temporal or inactive parts."""
    faults: list[str | None]
    """``(N,)`` the failure mode active this round per agent (None: healthy)."""
    active: list[bool]
    """``(N,)`` which agents the plan lets take part (all when it says nothing)."""
    graph: RoundGraph
    """The graph the plan induced over the agents that run, in topological layers."""
    edges: list[tuple[int, int]]
    """The graph's ``(src, dst)`` edges as a list (converted once per round)."""
    sources: list[list[int]]
    """``(N, *)`` per agent, the agents it reads along this round's in-edges, ascending."""
    speaks: list[bool]
    """``(N,)`` whether some agent reads this agent this round."""
    earlier: list[list[Message]]
    """``(N, *)`` per agent, what its temporal in-edges carry (:meth:`TeamEpisode._earlier`)."""
    steps: list[AgentStep | None]
    """``(N,)`` each agent's step once played (None until then)."""
    messages: list[Message] = field(default_factory=list)
    """Every message read this round, in the order read (the record sorts them)."""


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
        """The step that produced each agent's latest answer (what a temporal edge carries)."""
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
        for played in self.rounds:
            for step in played.steps:
                totals[step.agent] += step.tokens
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
        """Run one round of ``plan`` and return its record: the graph first, then the idle
        agents kept, the layers played, the silent and inactive agents filled in."""
        if self.done:
            raise RuntimeError(f"all {self.config.n_rounds} rounds were already played")
        if len(plan.actions) != self.n_agents:
            raise ValueError(f"plan has {len(plan.actions)} actions for {self.n_agents} agents")
        rnd = self._open_round(plan)
        kept = self._idle_agents(rnd) if self.config.idle == "keep" else []
        for agent in kept:
            rnd.steps[agent] = self._keep(agent, rnd)
        await self._play_layers(rnd)
        for agent in range(self.n_agents):
            if rnd.steps[agent] is None:
                rnd.steps[agent] = self._idle(agent, rnd)
            self._fill_policy_view(rnd.steps[agent], plan)
        return self._close_round(rnd, kept)

    def _open_round(self, plan: RoundPlan) -> _Round:
        """The round's graph over the agents that run (live and active), and who reads whom."""
        round_index, n = self.round_index, self.n_agents
        faults = self.faults[round_index]
        active = plan.active if plan.active is not None else [True] * n
        runs = [faults[i] not in SILENT_MODES and bool(active[i]) for i in range(n)]
        confidence = None if round_index == 0 else [s.confidence if s else 0.0 for s in self.last]
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
        return _Round(
            index=round_index,
            plan=plan,
            faults=faults,
            active=active,
            graph=graph,
            edges=edges,
            sources=[sorted(readers) for readers in sources],
            speaks=speaks,
            earlier=self._earlier(plan, round_index, runs),
            steps=[None] * n,
        )

    async def _play_layers(self, rnd: _Round) -> None:
        """The graph's layers in topological order, the agents of one layer at once; the
        timed-out agents make their (discarded) calls beside the first layer."""
        timed_out = [
            agent
            for agent in range(self.n_agents)
            if rnd.faults[agent] == "timeout" and rnd.active[agent]
        ]
        for depth, layer in enumerate(rnd.graph.layers):
            jobs = [self._agent(agent, rnd) for agent in layer if rnd.steps[agent] is None]
            if depth == 0:
                jobs += [self._timeout(agent, rnd) for agent in timed_out]
            for step in await self._gather(jobs):
                rnd.steps[step.agent] = step
        if not rnd.graph.layers and timed_out:
            for step in await self._gather([self._timeout(agent, rnd) for agent in timed_out]):
                rnd.steps[step.agent] = step

    def _close_round(self, rnd: _Round, kept: Sequence[int]) -> RoundRecord:
        """The round's record, kept; what the next round remembers and can read."""
        steps = cast(list[AgentStep], rnd.steps)  # play_round filled every agent's step
        plan = rnd.plan
        record = RoundRecord(
            round=rnd.index,
            edges=rnd.edges,
            dropped_edges=list(rnd.graph.dropped),
            layers=[list(layer) for layer in rnd.graph.layers],
            steps=list(steps),
            messages=sorted(rnd.messages, key=lambda m: (m.dst, m.src)),
            q_tot=plan.q_tot,
            mixer_weights=plan.mixer_weights,
            credit=plan.credit,
        )
        self.rounds.append(record)
        self.graphs.append(rnd.graph)
        self.last = list(steps)
        for agent in set(range(self.n_agents)).difference(kept):
            self._memory[agent] = steps[agent]
        # Who holds an answer it produced or kept this round: what a temporal edge carries next.
        self._held = [
            step.answer is not None and (step.agent in kept or step.text != "") for step in steps
        ]
        return record

    def _earlier(self, plan: RoundPlan, round_index: int, runs: list[bool]) -> list[list[Message]]:
        """Per agent, the messages its temporal in-edges carry this round: the answer each
        source held after the previous round (the step that produced it), in source order.
        A source that is silent this round (failed agents send nothing), or held no answer
        after the last one (inactive, crashed, garbled), sends nothing; one that is merely
        inactive this round still does (its answer is history). A reader that does not run
        reads nothing."""
        out: list[list[Message]] = [[] for _ in range(self.n_agents)]
        if round_index == 0 or not plan.temporal:
            return out
        silent = self.silent_at(round_index)
        for src, dst in sorted({(int(s), int(d)) for s, d in plan.temporal}):
            if src == dst or not runs[dst] or silent[src] or not self._held[src]:
                continue
            out[dst].append(_message(self._producing[src], src, dst, round_index))
        return out

    def _turn(self, agent: int, rnd: _Round, **seen: Any) -> AgentTurn:
        """What ``agent`` is shown this round; ``seen``: what it reads (inbox, earlier), its
        injected fault and its history, when it reads any."""
        return AgentTurn(
            task=self.task,
            agent=agent,
            role=self.roles[agent],
            round=rnd.index,
            n_rounds=self.config.n_rounds,
            action=Action(rnd.plan.actions[agent]),
            previous=self._memory[agent],
            episode_seed=self.seed,
            **seen,
        )

    def _step(self, agent: int, rnd: _Round, **played: Any) -> AgentStep:
        """``agent``'s step this round; ``played``: what it did, beyond who and which action."""
        return AgentStep(
            agent=agent,
            role=self.roles[agent],
            round=rnd.index,
            action=int(rnd.plan.actions[agent]),
            **played,
        )

    async def _agent(self, agent: int, rnd: _Round) -> AgentStep:
        """``agent``'s call this round: it reads its in-edges and temporal messages, answers,
        and its answer is scored against the task and the answers it read."""
        inbox = [_message(rnd.steps[src], src, agent, rnd.index) for src in rnd.sources[agent]]
        earlier = rnd.earlier[agent]
        rnd.messages.extend(inbox)
        rnd.messages.extend(earlier)
        fault = rnd.faults[agent]
        turn = self._turn(
            agent,
            rnd,
            inbox=inbox,
            earlier=list(earlier),
            fault="byzantine" if fault == "byzantine" else None,
            history=list(self._history[agent]),
        )
        result = await self.backend.agent_turn(turn)
        self.calls.append(result.call)
        step = self._step(
            agent,
            rnd,
            fault=fault,
            answer=result.answer,
            confidence=float(result.confidence),
            text=result.text,
            prompt_tokens=result.call.prompt_tokens,
            completion_tokens=result.call.completion_tokens,
            read_from=sorted({*rnd.sources[agent], *(m.src for m in earlier)}),
            verified=result.verified,
        )
        if result.failed:
            step.fault, step.answer, step.confidence = "call_error", None, 0.0
        elif fault == "garbled":
            step.text = garble(result.text, self.seed * 7919 + rnd.index * 31 + agent)
            step.answer, step.confidence = None, 0.0
        await self._judge(step, [*inbox, *earlier])
        self._remember(turn, step, result.failed)
        return step

    async def _judge(self, step: AgentStep, read: Sequence[Message]) -> None:
        """Whether the step's answer is right, and how far it agrees with the answers read."""
        step.correct = None if step.answer is None else await self._score(step.answer) >= 1.0
        answers = [m.answer for m in read if m.answer is not None]
        if answers and step.answer is not None:
            step.agreement = sum(a == step.answer for a in answers) / len(answers)

    def _remember(self, turn: AgentTurn, step: AgentStep, failed: bool) -> None:
        """What later rounds see of this call: the answer it produced, and the turn in the
        agent's history unless the call failed."""
        if step.answer is not None:
            self._producing[step.agent] = step
        if not failed:
            reply_tokens = step.prompt_tokens + step.completion_tokens
            self._history[step.agent].append(
                PastTurn(replace(turn, history=[]), step.text, reply_tokens)
            )

    def _idle_agents(self, rnd: _Round) -> list[int]:
        """Agents with nothing to do this round: solo_process after round 0, healthy, holding
        a readable answer, reading nothing (this round or along a temporal edge) and read by
        nobody this round. A call would only re-solve the task alone with the same memory, so
        the idle rule keeps their answer instead."""
        if rnd.index == 0:
            return []
        plan = rnd.plan
        return [
            agent
            for agent in range(self.n_agents)
            if plan.actions[agent] == Action.SOLO_PROCESS
            and rnd.faults[agent] is None
            and not rnd.sources[agent]
            and not rnd.earlier[agent]
            and not rnd.speaks[agent]
            and self.last[agent] is not None
            and self.last[agent].answer is not None
            and (plan.active is None or bool(plan.active[agent]))
        ]

    def _keep(self, agent: int, rnd: _Round) -> AgentStep:
        """An idle agent's step: its last answer kept, no call, no tokens."""
        prev = self.last[agent]
        return self._step(
            agent,
            rnd,
            answer=prev.answer,
            confidence=prev.confidence,
            correct=prev.correct,
            text=KEPT_TEXT,
        )

    async def _timeout(self, agent: int, rnd: _Round) -> AgentStep:
        """A timed-out agent's call: made without an inbox, then discarded (its prompt tokens
        are spent, its completion tokens are not)."""
        result: TurnResult = await self.backend.agent_turn(self._turn(agent, rnd))
        call = LLMCall(
            agent=agent,
            round=rnd.index,
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
        return self._step(
            agent, rnd, alive=False, fault="timeout", prompt_tokens=call.prompt_tokens
        )

    def _idle(self, agent: int, rnd: _Round) -> AgentStep:
        """A crashed agent (nothing), or an inactive one (its previous answer carried)."""
        fault = rnd.faults[agent]
        if fault == "crash":
            return self._step(agent, rnd, alive=False, fault="crash")
        prev = self.last[agent]
        return self._step(
            agent,
            rnd,
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
        agent = step.agent
        if plan.q_values is not None:
            step.q_values = [float(q) for q in plan.q_values[agent]]
        if plan.greedy is not None:
            step.greedy = bool(plan.greedy[agent])
        if plan.epsilon is not None:
            step.epsilon = float(plan.epsilon)

    # -- the decision ---------------------------------------------------------------------

    def finals(self) -> list[AgentStep]:
        """The steps that produced the live agents' final answers (in agent order)."""
        last_round = self.config.n_rounds - 1
        out = []
        for agent in range(self.n_agents):
            step = self._producing[agent]
            if step is None or self.faults[last_round][agent] in SILENT_MODES:
                continue
            if self.last[agent] is not None and self.last[agent].answer is None:
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
        passed = self._pass_through(finals)
        decision = await self._decide(finals, passed)
        team_score = await self._score(decision.answer) if decision.answer is not None else 0.0
        decision.correct = None if decision.answer is None else team_score >= 1.0
        if decision.answer is not None:
            read = [s.answer for s in finals]
            decision.agreement = sum(a == decision.answer for a in read) / len(read)
        # Concurrent calls finish in any order; records must not depend on it.
        self.calls.sort(key=lambda c: (c.round, c.agent))
        record = self._episode_record(decision, float(team_score), passed)
        record.reward = reward(record.score, record.tokens, self.config)
        self.record = record
        return record

    async def _decide(self, finals: list[AgentStep], passed: str | None) -> AgentStep:
        """The decision agent's step: the answer passed through (``passed``), or its call
        over the final answers, or nothing when no agent has a readable one."""
        decision = AgentStep(
            agent=DECISION_AGENT,
            role="decision",
            round=self.config.n_rounds,
            action=int(Action.AGGREGATE_REFINE),
            read_from=[s.agent for s in finals],
        )
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
        return decision

    def _episode_record(
        self, decision: AgentStep, team_score: float, passed: str | None
    ) -> EpisodeRecord:
        """The finished episode as the store keeps it (its reward still to set)."""
        task = self.task
        return EpisodeRecord(
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
            score=team_score,
            failures=[f.to_dict() for f in self.failures],
            calls=list(self.calls),
            backend=self.backend.name,
            model=self.backend.model,
            pass_through=passed,
        )

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
