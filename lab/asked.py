"""What each agent was asked: the prompt and the figures of one call in a logged episode.

A real back-end's call carries the exact chat messages it sent (``LLMCall.prompt``, stored
once per distinct prompt in the store's ``prompts`` table): Replay shows them as they were.
The synthetic society is asked nothing; for its episodes the prompt is rebuilt from what
the record holds (task text, role, action, round, the agent's step of the round before,
the messages it read) with the builders the openai back-end itself calls
(:func:`core.backends.prompts.agent_chat`, :func:`~core.backends.prompts.decision_chat`),
so it is the prompt the same turn would have sent. A step without a call (a crashed
agent, an idle one that kept its answer, the decision agent passing one answer through)
was asked nothing.

Plain functions of :class:`EpisodeRecord` (no Streamlit): the Replay page renders them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from core.backends import prompts
from core.records import DECISION_AGENT, AgentStep, Chat, EpisodeRecord, LLMCall
from core.tasks.base import task_of
from core.team.runtime import KEPT_TEXT

EXACT = "exact prompt sent"
REBUILT = "as the openai back-end would have asked (synthetic society: no real prompt)"
NO_PROMPT = "no prompt"
SIM = "sim"
"""The back-end whose calls are rebuilt (it stores no prompts: they would bloat the store)."""


@dataclass
class Asked:
    """What one agent (or the decision agent) was asked in one round."""

    kind: str
    """:data:`EXACT`, :data:`REBUILT` or :data:`NO_PROMPT`."""
    note: str
    """One sentence for the reader: the label, with the hash, or why there is no prompt."""
    messages: Chat = field(default_factory=list)
    """The chat messages, role by role (empty for :data:`NO_PROMPT`)."""
    call: LLMCall | None = None
    """The call's record (tokens, latency, retries, cache, error), if it made one."""


def call_of(record: EpisodeRecord, round_: int, agent: int) -> LLMCall | None:
    """The call ``agent`` made in ``round_`` (the decision agent's round is the number of
    rounds), or None if it made none."""
    for call in record.calls:
        if call.agent == agent and call.round == round_:
            return call
    return None


def _step(record: EpisodeRecord, round_: int, agent: int) -> AgentStep | None:
    if agent == DECISION_AGENT:
        return record.decision
    if not 0 <= round_ < len(record.rounds):
        return None
    return next((s for s in record.rounds[round_].steps if s.agent == agent), None)


def _remembered(record: EpisodeRecord, round_: int, agent: int) -> AgentStep | None:
    """The agent's previous turn as the runtime hands it over: its step of the round before,
    skipping steps the idle rule kept (they only carry an earlier answer forward)."""
    for earlier in range(round_ - 1, -1, -1):
        step = _step(record, earlier, agent)
        if step is None or step.text != KEPT_TEXT:
            return step
    return None


def rebuilt_agent_prompt(record: EpisodeRecord, round_: int, agent: int) -> Chat:
    """The chat the openai back-end would have sent for this agent's turn (the runtime's
    rules: its own last step the idle rule did not keep, the answers it read this round in source
    order; a timed-out agent is out of the round's graph, so it read none)."""
    step = _step(record, round_, agent)
    if step is None:
        raise ValueError(f"agent {agent} has no step in round {round_}")
    previous = _remembered(record, round_, agent)
    rnd = record.rounds[round_]
    # A message on one of the round's edges was read this round (the first from each source);
    # any other came along a temporal edge: an answer of the round before.
    on_edge = {src for src, dst in rnd.edges if dst == agent}
    inbox, earlier = [], []
    for m in (m for m in rnd.messages if m.dst == agent):
        (inbox if m.src in on_edge else earlier).append(m)
        on_edge.discard(m.src)
    return prompts.agent_chat(
        task_of(record),
        step.role,
        step.action,
        round_,
        len(record.rounds),
        previous,
        sorted(inbox, key=lambda m: m.src),
        byzantine=step.fault == "byzantine",
        earlier=sorted(earlier, key=lambda m: m.src),
    )


def final_steps(record: EpisodeRecord) -> list[AgentStep]:
    """The steps whose answers the decision agent read: for each agent it read, its last
    step that made a call and produced an answer (an idle step only carries one)."""
    if record.decision is None:
        return []
    finals = []
    for agent in record.decision.read_from:
        steps = [
            s
            for rnd in record.rounds
            for s in rnd.steps
            if s.agent == agent and s.answer is not None and call_of(record, s.round, agent)
        ]
        if steps:
            finals.append(steps[-1])
    return prompts.readable_finals(finals)


def rebuilt_decision_prompt(record: EpisodeRecord) -> Chat:
    """The chat the openai back-end would have sent the decision agent."""
    return prompts.decision_chat(task_of(record), final_steps(record), len(record.rounds))


PASSED_WHY = {
    "single": "only one final answer existed: it was passed through",
    "unanimous": "every final answer agreed: consensus pass-through, --pass-through unanimous",
}
"""Why the decision agent made no call, by ``EpisodeRecord.pass_through`` (None: no answer,
or an episode logged before the reason was stored)."""


def _no_call(step: AgentStep | None, agent: int, passed: str | None = None) -> str:
    if agent == DECISION_AGENT:
        why = PASSED_WHY.get(passed, "no agent had a readable answer")
        return f"The decision agent made no call ({why}), so it was asked nothing."
    if step is None:
        return "Not in this round: no call, no prompt."
    if not step.alive:
        fault = step.fault or "inactive"
        return f"Out of this round ({fault}): it made no call, so it was asked nothing."
    return "Idle this round (kept its answer, made no call), so it was asked nothing."


def asked(record: EpisodeRecord, round_: int, agent: int) -> Asked:
    """What ``agent`` was asked in ``round_`` (``DECISION_AGENT``: the decision agent, whose
    round is the number of rounds)."""
    call_round = len(record.rounds) if agent == DECISION_AGENT else round_
    call = call_of(record, call_round, agent)
    step = _step(record, round_, agent)
    if call is None:
        return Asked(NO_PROMPT, _no_call(step, agent, record.pass_through))
    if call.prompt is not None:
        note = f"{EXACT} · hash `{call.messages_hash}` (`prompts.messages_hash` in the store)."
        return Asked(EXACT, note, call.prompt, call)
    if record.backend != SIM:
        note = (
            f"This {record.backend} call's prompt is not in the store (logged before it kept them)."
        )
        return Asked(NO_PROMPT, note, call=call)
    if agent == DECISION_AGENT:
        messages = rebuilt_decision_prompt(record)
    else:
        messages = rebuilt_agent_prompt(record, round_, agent)
    return Asked(REBUILT, f"{REBUILT}.", messages, call)


def call_summary(call: LLMCall) -> str:
    """``812 prompt + 95 completion tokens · 1.24 s · 0 retries · cache miss`` (+ its error)."""
    parts = [
        f"{call.prompt_tokens:,} prompt + {call.completion_tokens:,} completion tokens"
        + ("" if call.usage_reported else " (no usage reported)"),
        f"{call.latency_s:.2f} s",
        f"{call.retries} retr{'y' if call.retries == 1 else 'ies'}",
        "cache hit" if call.cache_hit else "cache miss",
    ]
    if call.error:
        parts.append(f"error: {call.error}")
    return " · ".join(parts)


def calls_table(record: EpisodeRecord, round_: int, roles_of: dict[int, str]) -> pd.DataFrame:
    """The calls of round ``round_`` (and, in the last round, the decision agent's), one row
    each: tokens, latency, retries, cache hit, error, and where its prompt comes from.
    ``roles_of``: agent -> display name."""
    last = round_ == len(record.rounds) - 1
    rows = []
    for call in record.calls:
        is_decision = call.agent == DECISION_AGENT
        if not (call.round == round_ or (last and is_decision)):
            continue
        source = EXACT if call.prompt is not None else REBUILT if record.backend == SIM else "—"
        rows.append(
            {
                "agent": roles_of.get(call.agent, str(call.agent)),
                "prompt tokens": call.prompt_tokens,
                "completion tokens": call.completion_tokens,
                "latency (s)": round(call.latency_s, 3),
                "retries": call.retries,
                "cache hit": call.cache_hit,
                "error": call.error or "",
                "prompt": source.split(" (")[0],
            }
        )
    columns = ["agent", "prompt tokens", "completion tokens", "latency (s)", "retries"]
    columns += ["cache hit", "error", "prompt"]
    return pd.DataFrame(rows, columns=columns)


def code_height(text: str) -> int | str:
    """Height for a message's code block: its own up to ~16 lines, then a scrolled box."""
    return "content" if text.count("\n") < 16 and len(text) < 1600 else 320
