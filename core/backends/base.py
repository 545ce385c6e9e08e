"""The contract between the team runtime and whatever plays the agents (docs/team.md).

The runtime decides *who* talks to *whom*; a back-end decides *what* an agent says.
Two back-ends implement it: the synthetic society (``sim``) and any
OpenAI-compatible endpoint (``openai``; ``local`` is the same back-end on a llama.cpp
server the project starts, :mod:`core.backends.local_server`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from core.actions import Action
from core.records import AgentStep, LLMCall, Message
from core.tasks.base import Task


@dataclass
class AgentTurn:
    """Everything an agent sees when it acts in one round."""

    task: Task
    agent: int
    role: str
    round: int
    n_rounds: int
    action: Action
    previous: AgentStep | None
    """Its own step of the previous round (temporal edge), ``None`` in round 0."""
    inbox: list[Message] = field(default_factory=list)
    """Answers of this round read along in-edges, in source order."""
    earlier: list[Message] = field(default_factory=list)
    """Answers peers held after the previous round, read along temporal edges
    (``RoundPlan.temporal``), in source order; empty in round 0."""
    fault: str | None = None
    """``byzantine`` when the agent is injected to answer confidently wrong."""
    episode_seed: int = 0
    history: list[PastTurn] = field(default_factory=list)
    """The agent's earlier turns that reached the back-end and answered, oldest first (not
    the rounds it was failed, idle or kept): what a back-end writing each agent's requests
    as one growing conversation replays (``prompt_layout="conversation"``)."""


@dataclass
class PastTurn:
    """One earlier turn of an agent: what it was asked (its :class:`AgentTurn`, without
    history) and the reply it gave."""

    turn: AgentTurn
    reply: str
    tokens: int = 0
    """The turn's prompt and completion tokens as the server counted them (0 when it
    reported none): in the ``conversation`` layout, the size of the agent's conversation
    after this turn, which decides when the next request starts a new one."""


@dataclass
class DecisionTurn:
    """The decision agent's view after the last round: the live agents' final answers."""

    task: Task
    finals: list[AgentStep]
    episode_seed: int = 0
    n_rounds: int = 3


@dataclass
class TurnResult:
    """What one back-end call produced."""

    text: str
    answer: str | None
    confidence: float
    call: LLMCall
    verified: bool = False
    """True when execute_verify ran a tool check (tests, re-derivation) this turn."""
    failed: bool = False
    """True when the call failed for good (timeouts, retries exhausted, malformed)."""


class Backend(Protocol):
    """Plays the agents. Must be safe to call concurrently from one event loop."""

    name: str
    model: str
    answers_are_programs: bool
    """True when its answers to code tasks are programs to run against the tests; False when
    they are labels (the synthetic society). Scoring itself lives with the tasks
    (:mod:`core.tasks.scoring`)."""
    sandbox: str
    """Where its code answers run when they are programs: ``auto``/``bwrap`` (bubblewrap or
    refuse) or ``process`` (:class:`core.sandbox.SandboxConfig` ``backend``)."""
    synchronous: bool
    """True when its coroutines never wait (the synthetic society computes each answer on the
    spot): the team then plays its episodes without an event loop, call after call in a fixed
    order (:func:`core.team.runtime.run_sync`). A back-end without the attribute is waited on."""
    serial: bool
    """True when its server answers one call at a time (one llama.cpp instance): the team
    then awaits its calls one by one in agent order, and plays its episodes one after the
    other, so consecutive calls share the longest prompt prefix (the server reuses the
    prefix its last request left cached). A back-end without the attribute is not serial."""

    async def agent_turn(self, turn: AgentTurn) -> TurnResult: ...

    async def decide(self, turn: DecisionTurn) -> TurnResult: ...

    async def aclose(self) -> None: ...
