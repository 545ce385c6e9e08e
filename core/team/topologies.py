"""Fixed topologies (docs/team.md): baselines that run on the same runtime as learned policies.

| name | every round |
|---|---|
| single | one agent (the first healthy one) answers once, in round 0; everyone else is inactive |
| chain | edges 0→1→2→…; agent 0 solo, the others selective_query (each reads its predecessor) |
| star | spokes send to hub 0 (edges j→0); the hub aggregate_refine, spokes solo |
| ring | edges i→i+1 mod N, all selective_query; the cycle rule drops N-1→0 |
| full | everyone aggregate_refine (full mesh; the cycle rule keeps j→i for j < i) |
| debate | everyone debate_check (pairs 0-1, 2-3, …) |
| random | uniform random available actions, seeded per episode |
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from core.actions import N_ACTIONS, Action
from core.errors import UserError
from core.team.plan import RoundPlan

SOLO, QUERY, AGGREGATE, DEBATE = (
    int(Action.SOLO_PROCESS),
    int(Action.SELECTIVE_QUERY),
    int(Action.AGGREGATE_REFINE),
    int(Action.DEBATE_CHECK),
)


class FixedTopology(ABC):
    """A policy whose plan does not depend on what it observes (beyond who is healthy)."""

    name = "fixed"
    stochastic = False
    """Whether its plan draws on the episode seed: a replay of a logged episode (calibration)
    must then take the actions it logged, not draw again under the replay's seed."""

    def begin(self, n_agents: int, seed: int) -> Any:
        return {"n": n_agents}

    def plan(
        self, obs: dict[str, np.ndarray], round_index: int, memory: Any
    ) -> tuple[RoundPlan, Any]:
        return self.round_plan(memory["n"], round_index, obs, memory), memory

    @abstractmethod
    def round_plan(self, n: int, round_index: int, obs: dict, memory: Any) -> RoundPlan:
        """The plan of round ``round_index`` for a team of ``n``; each topology defines it."""


class Single(FixedTopology):
    """One direct call: the first healthy agent answers in round 0, alone."""

    name = "single"

    def round_plan(self, n: int, round_index: int, obs: dict, memory: Any) -> RoundPlan:
        if round_index == 0:
            healthy = [i for i in range(n) if bool(obs["avail"][i].all())]
            memory["agent"] = healthy[0] if healthy else 0
        chosen = memory["agent"]
        return RoundPlan(
            actions=[SOLO] * n, active=[round_index == 0 and i == chosen for i in range(n)]
        )


class Chain(FixedTopology):
    name = "chain"

    def round_plan(self, n: int, round_index: int, obs: dict, memory: Any) -> RoundPlan:
        return RoundPlan(
            actions=[SOLO] + [QUERY] * (n - 1), edges=[(i, i + 1) for i in range(n - 1)]
        )


class Star(FixedTopology):
    name = "star"

    def round_plan(self, n: int, round_index: int, obs: dict, memory: Any) -> RoundPlan:
        return RoundPlan(
            actions=[AGGREGATE] + [SOLO] * (n - 1), edges=[(j, 0) for j in range(1, n)]
        )


class Ring(FixedTopology):
    name = "ring"

    def round_plan(self, n: int, round_index: int, obs: dict, memory: Any) -> RoundPlan:
        edges = [(i, (i + 1) % n) for i in range(n)] if n > 1 else []
        return RoundPlan(actions=[QUERY] * n, edges=edges)


class Full(FixedTopology):
    name = "full"

    def round_plan(self, n: int, round_index: int, obs: dict, memory: Any) -> RoundPlan:
        return RoundPlan(actions=[AGGREGATE] * n)


class Debate(FixedTopology):
    name = "debate"

    def round_plan(self, n: int, round_index: int, obs: dict, memory: Any) -> RoundPlan:
        return RoundPlan(actions=[DEBATE] * n)


class RandomActions(FixedTopology):
    """Uniform random actions among the available ones; seeded by the episode seed."""

    name = "random"
    stochastic = True

    def begin(self, n_agents: int, seed: int) -> Any:
        return {"n": n_agents, "rng": random.Random(seed * 2654435761 + 97)}

    def round_plan(self, n: int, round_index: int, obs: dict, memory: Any) -> RoundPlan:
        rng = memory["rng"]
        avail = obs["avail"]
        actions = []
        for i in range(n):
            allowed = [a for a in range(N_ACTIONS) if avail[i][a]] or [SOLO]
            actions.append(rng.choice(allowed))
        return RoundPlan(actions=actions)


FIXED_TOPOLOGIES: dict[str, type[FixedTopology]] = {
    cls.name: cls for cls in (Single, Chain, Star, Ring, Full, Debate, RandomActions)
}


def make_policy(name: str) -> FixedTopology:
    """The fixed topology called ``name``; an unknown name is a user mistake."""
    if name not in FIXED_TOPOLOGIES:
        raise UserError(f"Unknown topology {name!r}; choose one of {', '.join(FIXED_TOPOLOGIES)}.")
    return FIXED_TOPOLOGIES[name]()
