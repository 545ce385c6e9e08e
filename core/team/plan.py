"""What a policy hands the team runtime for one round, and the policy contract.

Learned policies (the QMIX controller) and fixed topologies (single, chain, star,
ring, full, debate, random) both implement :class:`TeamPolicy`, so every
comparison runs on the same runtime and is logged the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np


@dataclass
class RoundPlan:
    """One round's decisions for the whole team.

    Attributes:
        actions: ``(N,)`` action ids (see :mod:`core.actions`).
        edges: explicit ``(src, dst)`` edges that replace the action-induced ones
            (fixed topologies such as chain and ring); ``None`` = induce from actions.
            Cycles are broken by the same rule either way.
        active: ``(N,)`` which agents take part this round (``single`` uses one agent);
            ``None`` = all live agents.
        q_values: ``(N, n_actions)`` per-agent Q-values (learned policies only).
        greedy: ``(N,)`` True where the action was the greedy one, False where explored.
        epsilon: exploration rate in force.
        q_tot: the mixer's Q_tot for the chosen joint action.
        mixer_weights: ``(N, embed)`` the mixer's first-layer weights for this state.
        credit: ``(N,)`` ∂Q_tot/∂Q_i.
    """

    actions: list[int]
    edges: list[tuple[int, int]] | None = None
    active: list[bool] | None = None
    q_values: list[list[float]] | None = None
    greedy: list[bool] | None = None
    epsilon: float | None = None
    q_tot: float | None = None
    mixer_weights: list[list[float]] | None = None
    credit: list[float] | None = None


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
