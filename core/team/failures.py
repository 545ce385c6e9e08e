"""Agent failures: what can go wrong with an agent, and from which round (docs/team.md).

Modes, each active from ``from_round`` to the end of the episode:

* ``crash`` — the agent is silent: no call, no tokens, no answer; it sends and receives
  nothing.
* ``timeout`` — the call is made (its prompt tokens are spent) but nothing comes back in
  time: no answer, no completion tokens; it sends and receives nothing.
* ``byzantine`` — the agent keeps talking but answers confidently wrong (the back-end is
  told through ``AgentTurn.fault``).
* ``garbled`` — the call completes but the output is unreadable: its text is corrupted and
  it carries no answer.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from core.errors import UserError

FAILURE_MODES = ("crash", "timeout", "byzantine", "garbled")
SILENT_MODES = frozenset({"crash", "timeout"})
"""Modes that take the agent out of the round's graph."""


@dataclass(frozen=True)
class FailureSpec:
    """One injected failure."""

    agent: int
    """Index of the failing agent."""
    mode: str
    """One of :data:`FAILURE_MODES`."""
    from_round: int = 0
    """First round (0-based) in which the failure is active; it lasts to the end."""

    def validate(self, n_agents: int | None = None) -> None:
        if self.mode not in FAILURE_MODES:
            raise ValueError(f"failure mode {self.mode!r} is not one of {FAILURE_MODES}")
        if self.agent < 0 or (n_agents is not None and self.agent >= n_agents):
            raise ValueError(f"failure agent {self.agent} is not in 0..{(n_agents or 1) - 1}")
        if self.from_round < 0:
            raise ValueError(f"failure from_round {self.from_round} is negative")

    def to_dict(self) -> dict:
        return asdict(self)


def parse_failures(
    text: str, roles: Sequence[str], n_rounds: int | None = None
) -> list[FailureSpec]:
    """Parse ``AGENT:MODE[@ROUND],...`` (AGENT = index or role name) into failures.

    >>> parse_failures("0:crash@1,verifier:byzantine", ["solver", "verifier"])
    [FailureSpec(agent=0, mode='crash', from_round=1), FailureSpec(agent=1, mode='byzantine', from_round=0)]
    """
    specs: list[FailureSpec] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        who, sep, rest = item.partition(":")
        if not sep or not who.strip() or not rest.strip():
            raise UserError(f"Failure {item!r} is not of the form AGENT:MODE[@ROUND].")
        mode, at, round_text = rest.strip().partition("@")
        mode = mode.strip().lower()
        if mode not in FAILURE_MODES:
            raise UserError(
                f"Failure mode {mode!r} in {item!r} is not one of {', '.join(FAILURE_MODES)}."
            )
        agent = _parse_agent(who.strip(), roles, item)
        from_round = 0
        if at:
            if not round_text.strip().isdigit():
                raise UserError(
                    f"Round {round_text!r} in failure {item!r} is not a non-negative integer."
                )
            from_round = int(round_text)
            if n_rounds is not None and from_round >= n_rounds:
                raise UserError(
                    f"Round {from_round} in failure {item!r} is past the last round {n_rounds - 1}."
                )
        specs.append(FailureSpec(agent, mode, from_round))
    agents = [s.agent for s in specs]
    if len(set(agents)) != len(agents):
        raise UserError(f"Failure spec {text!r} names the same agent twice.")
    return specs


def _parse_agent(who: str, roles: Sequence[str], item: str) -> int:
    if who.isdigit():
        agent = int(who)
        if agent >= len(roles):
            raise UserError(f"Agent {agent} in failure {item!r} is not in 0..{len(roles) - 1}.")
        return agent
    matches = [i for i, role in enumerate(roles) if role.lower() == who.lower()]
    if not matches:
        raise UserError(
            f"Agent {who!r} in failure {item!r} is neither an index nor one of the roles {', '.join(roles)}."
        )
    return matches[0]


def sample_failures(
    n_agents: int, n_rounds: int, fail_prob: float, rng: random.Random
) -> list[FailureSpec]:
    """The random training curriculum: each agent fails with probability ``fail_prob``.

    Mode and first round are uniform; at least one agent always stays healthy (when the
    draw would fail everyone, one failing agent chosen at random is spared).
    """
    if fail_prob <= 0.0:
        return []
    specs = [
        FailureSpec(i, rng.choice(FAILURE_MODES), rng.randrange(n_rounds))
        for i in range(n_agents)
        if rng.random() < fail_prob
    ]
    if len(specs) == n_agents:
        del specs[rng.randrange(n_agents)]
    return specs


def fault_table(
    failures: Sequence[FailureSpec], n_agents: int, n_rounds: int
) -> list[list[str | None]]:
    """``table[r][i]`` = the failure mode of agent ``i`` in round ``r`` (``None`` = healthy)."""
    table: list[list[str | None]] = [[None] * n_agents for _ in range(n_rounds)]
    for spec in failures:
        spec.validate(n_agents)
        for r in range(spec.from_round, n_rounds):
            table[r][spec.agent] = spec.mode
    return table
