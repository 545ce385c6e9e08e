"""What a policy hands the team runtime for one round, and how policies reach the runner.

Fixed topologies (single, chain, star, ring, full, debate, random) implement
:class:`TeamPolicy` (one episode's plan per round); :func:`as_actor` turns one into an
actor of :mod:`core.qmix.runner`. The learned policy is an actor already: its per-episode
:class:`~core.qmix.policy.RoundView` (actions, Q-values, ε, the mixer's view) reaches the
runtime as the round's directive and :func:`plan_for` makes it a :class:`RoundPlan`. So
every policy runs through the same rollout path and is logged the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from core.qmix.decisions import RoundView, StepOutput


@dataclass
class RoundPlan(RoundView):
    """One round's decisions for the whole team: an actor's :class:`RoundView` (actions,
    and for learned policies Q-values, greedy flags, ε and the mixer's view) plus what a
    fixed topology may fix besides the actions.

    Attributes:
        edges: explicit ``(src, dst)`` edges that replace the action-induced ones
            (fixed topologies such as chain and ring); ``None`` = induce from actions.
            Cycles are broken by the same rule either way.
        active: ``(N,)`` which agents take part this round (``single`` uses one agent);
            ``None`` = all live agents.
        temporal: ``(src, dst)`` edges across rounds: ``dst`` also reads the answer ``src``
            held after the previous round (the temporal edges of a spatial-temporal graph,
            learned by AgentPrune and AgentDropout); ``None`` = none besides each agent's
            own memory. They close no cycle (the previous round is over), so no rule drops
            them; docs/team.md, "Temporal edges".
    """

    edges: list[tuple[int, int]] | None = None
    active: list[bool] | None = None
    temporal: list[tuple[int, int]] | None = None


class TeamPolicy(Protocol):
    """Chooses each round's plan from the protocol observation dict.

    ``obs`` is the environment protocol's dict: ``obs (N, obs_dim)``, ``state (state_dim,)``,
    ``adj (N, N)``, ``avail (N, n_actions)`` as numpy arrays. ``memory`` is whatever the
    policy keeps across the rounds of one episode (a GRU state, an RNG); ``begin``
    makes it fresh for each episode.
    """

    name: str

    def begin(self, n_agents: int, seed: int) -> Any: ...

    def plan(
        self, obs: dict[str, np.ndarray], round_index: int, memory: Any
    ) -> tuple[RoundPlan, Any]: ...


def plan_for(actions: Sequence[int], directive: Any = None) -> RoundPlan:
    """The round's plan from the actor's actions and its directive (a :class:`RoundPlan`,
    a learned policy's :class:`RoundView`, or None)."""
    actions = [int(a) for a in actions]
    if isinstance(directive, RoundPlan):
        plan = directive
    elif isinstance(directive, RoundView):
        plan = RoundPlan(**vars(directive))
    elif directive is None:
        return RoundPlan(actions=actions)
    else:
        raise TypeError(f"unknown round directive {type(directive).__name__}")
    if [int(a) for a in plan.actions] != actions:
        raise ValueError(f"plan actions {plan.actions} differ from actions {actions}")
    return plan


class TeamPolicyActor:
    """A :class:`TeamPolicy` (one episode at a time) as a batched actor of the runner."""

    def __init__(self, policy: TeamPolicy, seed_of: Callable[[int], int], n_agents: int):
        self.policy, self.seed_of, self.n_agents = policy, seed_of, n_agents
        self.name = policy.name

    def start(self, episodes: list[int]) -> list[list[Any]]:
        """Per episode: ``[policy memory, round index]``."""
        return [[self.policy.begin(self.n_agents, self.seed_of(k)), 0] for k in episodes]

    def act(
        self, obs: list[dict[str, np.ndarray]], memory: list[list[Any]], explain: bool = False
    ) -> tuple[StepOutput, list[list[Any]]]:
        plans = []
        for o, slot in zip(obs, memory, strict=True):
            plan, slot[0] = self.policy.plan(o, slot[1], slot[0])
            slot[1] += 1
            plans.append(plan)
        actions = np.asarray([p.actions for p in plans], dtype=np.int64)
        return StepOutput(actions=actions, directives=plans), memory


def as_actor(policy: Any, seed_of: Callable[[int], int], n_agents: int) -> Any:
    """``policy`` as an actor of the runner: actors pass through, team policies are wrapped."""
    if callable(getattr(policy, "act", None)):
        return policy
    return TeamPolicyActor(policy, seed_of, n_agents)
