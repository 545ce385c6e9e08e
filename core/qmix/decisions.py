"""What an actor decides each round, and the actor contract the runner drives.

Torch-free on purpose: the team domain and the CLI import these without loading torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np


@dataclass
class RoundView:
    """What an actor decided for one episode in one round, as plain lists.

    ``actions (N,)``; the learned policy adds ``q_values (N, A)``, ``greedy (N,)`` and
    ``epsilon``; with ``explain`` also the mixer's ``q_tot``, first-layer weights
    ``mixer_weights (N, embed)`` and credit ``(N,)`` = ∂Q_tot/∂Q_i.
    """

    actions: list[int]
    q_values: list[list[float]] | None = None
    greedy: list[bool] | None = None
    epsilon: float | None = None
    q_tot: float | None = None
    mixer_weights: list[list[float]] | None = None
    credit: list[float] | None = None


@dataclass
class StepOutput:
    """One batched decision. Shapes: ``actions (E, N)``, ``greedy (E, N)``, ``q (E, N, A)``;
    mixer fields ``(E,)``, ``(E, N, embed)``, ``(E, N)`` or None when not asked for.
    ``directives`` (one per episode, or None) is handed to the environment with the actions."""

    actions: np.ndarray
    greedy: np.ndarray | None = None
    q: np.ndarray | None = None
    epsilon: float | None = None
    q_tot: np.ndarray | None = None
    mixer_weights: np.ndarray | None = None
    credit: np.ndarray | None = None
    directives: list[Any] | None = None

    def view(self, e: int) -> RoundView:
        """Episode ``e``'s part of the decision."""
        return self.views([e])[0]

    def views(self, episodes: Sequence[int]) -> list[RoundView]:
        """The parts of episodes ``episodes``; each array is converted to lists once for all."""
        idx = list(episodes)

        def rows(a: np.ndarray | None) -> list[Any]:
            return [None] * len(idx) if a is None else a[idx].astype(float).tolist()

        actions, q_values = self.actions[idx].astype(int).tolist(), rows(self.q)
        greedy = [None] * len(idx) if self.greedy is None else self.greedy[idx].tolist()
        epsilon = None if self.epsilon is None else float(self.epsilon)
        q_tot, weights, credit = rows(self.q_tot), rows(self.mixer_weights), rows(self.credit)
        return [
            RoundView(
                actions=actions[k],
                q_values=q_values[k],
                greedy=greedy[k],
                epsilon=epsilon,
                q_tot=q_tot[k],
                mixer_weights=weights[k],
                credit=credit[k],
            )
            for k in range(len(idx))
        ]


class Actor(Protocol):
    """Chooses the actions of ``E`` episodes at once, round after round."""

    name: str

    def start(self, episodes: list[int]) -> Any:
        """Fresh memory for the episodes (indices in the stream) about to be played."""
        ...

    def act(
        self, obs: list[dict[str, np.ndarray]], memory: Any, explain: bool = False
    ) -> tuple[StepOutput, Any]: ...
