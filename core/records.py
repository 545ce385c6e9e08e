"""What one team episode leaves behind: enough to replay it exactly.

These plain dataclasses are the contract between the team runtime (which fills
them), the policy runner (which adds Q-values, ε and the mixer's view), the
episode store (which writes them to DuckDB) and the lab (which draws them).
Agent indices are 0..N-1; the decision agent is recorded as agent ``-1``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

DECISION_AGENT = -1

Chat = list[dict[str, str]]
"""Chat messages as sent to a chat-completions endpoint: ``[{"role": ..., "content": ...}]``."""


def prompt_digest(messages: Chat) -> str:
    """SHA-256 hex digest of the canonical JSON of ``messages`` alone (sorted keys, no
    whitespace): the key of the store's ``prompts`` table, equal for equal prompts
    whichever agent, episode, run or model sent them."""
    text = json.dumps(messages, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass
class LLMCall:
    """One call to a back-end (synthetic or real)."""

    agent: int
    round: int
    prompt_hash: str
    """The back-end's key of the request: for ``openai`` the response cache's key (SHA-256 of
    base URL, model, messages, sampling parameters, seed and sample identity, so two agents
    sending the same messages have different keys); for the synthetic society a seed hash."""
    prompt_tokens: int
    completion_tokens: int
    usage_reported: bool = True
    """False when the server returned no ``usage``; the token counts are then 0."""
    latency_s: float = 0.0
    retries: int = 0
    cache_hit: bool = False
    error: str | None = None
    """Why the call failed for good (the agent is then failed for the round)."""
    prompt: Chat | None = None
    """The chat messages of the request as sent (secrets masked, as in every stored text);
    ``None`` for the synthetic society (it is asked nothing) and for a call never sent.
    execute_verify's two requests: the second one's, whose first messages are the whole
    first request, then the first reply and the check."""

    @property
    def messages_hash(self) -> str | None:
        """:func:`prompt_digest` of :attr:`prompt` (the ``prompts`` table's key), or None."""
        return None if self.prompt is None else prompt_digest(self.prompt)


@dataclass
class Message:
    """An answer that travelled along an edge of the round graph (dst read src)."""

    src: int
    dst: int
    round: int
    text: str
    answer: str | None
    confidence: float
    tokens: int
    """Tokens the text adds to the reader's prompt."""


@dataclass
class AgentStep:
    """What one agent did in one round."""

    agent: int
    role: str
    round: int
    action: int
    alive: bool = True
    fault: str | None = None
    """Failure mode active this round: crash, timeout, byzantine, garbled, call_error."""
    answer: str | None = None
    confidence: float = 0.0
    correct: bool | None = None
    text: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    read_from: list[int] = field(default_factory=list)
    agreement: float = 0.0
    """Share of what it read that agreed with its own answer after the round."""
    verified: bool = False
    # Filled by the policy runner (None for fixed topologies).
    q_values: list[float] | None = None
    greedy: bool | None = None
    epsilon: float | None = None

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass
class RoundRecord:
    """One round: the induced graph, what every agent did, and the mixer's view."""

    round: int
    edges: list[tuple[int, int]]
    dropped_edges: list[tuple[int, int]]
    layers: list[list[int]]
    steps: list[AgentStep]
    messages: list[Message] = field(default_factory=list)
    q_tot: float | None = None
    mixer_weights: list[list[float]] | None = None
    """QMIX first-layer weights ``(N, embed)`` for this round's state (non-negative)."""
    credit: list[float] | None = None
    """∂Q_tot/∂Q_i for each agent ``(N,)``."""

    @property
    def tokens(self) -> int:
        return sum(s.tokens for s in self.steps)


@dataclass
class EpisodeRecord:
    """A whole episode of the team on one task."""

    task_id: str
    benchmark: str
    domain: str
    difficulty: int
    question: str
    ground_truth: str
    roles: list[str]
    policy: str
    seed: int
    rounds: list[RoundRecord] = field(default_factory=list)
    decision: AgentStep | None = None
    team_answer: str | None = None
    score: float = 0.0
    reward: float = 0.0
    failures: list[dict[str, Any]] = field(default_factory=list)
    """Injected failures: ``{"agent": i, "mode": m, "from_round": r}``."""
    calls: list[LLMCall] = field(default_factory=list)
    backend: str = "sim"
    model: str = ""
    pass_through: str | None = None
    """Why the decision agent made no call: ``single`` (only one final answer existed) or
    ``unanimous`` (every final answer agreed, ``--pass-through unanimous``); None when it
    was called or no agent had a readable answer."""

    @property
    def prompt_tokens(self) -> int:
        total = sum(s.prompt_tokens for r in self.rounds for s in r.steps)
        return total + (self.decision.prompt_tokens if self.decision else 0)

    @property
    def completion_tokens(self) -> int:
        total = sum(s.completion_tokens for r in self.rounds for s in r.steps)
        return total + (self.decision.completion_tokens if self.decision else 0)

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EpisodeRecord:
        d = dict(d)
        d["rounds"] = [
            RoundRecord(
                **{
                    **r,
                    "edges": [tuple(e) for e in r["edges"]],
                    "dropped_edges": [tuple(e) for e in r["dropped_edges"]],
                    "steps": [AgentStep(**s) for s in r["steps"]],
                    "messages": [Message(**m) for m in r["messages"]],
                }
            )
            for r in d.get("rounds", [])
        ]
        d["decision"] = AgentStep(**d["decision"]) if d.get("decision") else None
        d["calls"] = [LLMCall(**c) for c in d.get("calls", [])]
        return cls(**d)
