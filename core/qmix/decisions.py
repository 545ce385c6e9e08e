"""What an actor decides each round, and the actor contract the runner drives.

Torch-free on purpose: the team domain and the CLI import these without loading torch.
"""

from __future__ import annotations

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

        def rows(a: np.ndarray | None) -> Any:
            return None if a is None else a[e].astype(float).tolist()

        return RoundView(
            actions=[int(a) for a in self.actions[e]],
            q_values=rows(self.q),
            greedy=None if self.greedy is None else [bool(g) for g in self.greedy[e]],
            epsilon=None if self.epsilon is None else float(self.epsilon),
            q_tot=None if self.q_tot is None else float(self.q_tot[e]),
            mixer_weights=rows(self.mixer_weights),
            credit=rows(self.credit),
        )


class Actor(Protocol):
    """Chooses the actions of ``E`` episodes at once, round after round."""

    name: str

    def start(self, episodes: list[int]) -> Any:
        """Fresh memory for the episodes (indices in the stream) about to be played."""
        ...

    def act(
        self, obs: list[dict[str, np.ndarray]], memory: Any, explain: bool = False
    ) -> tuple[StepOutput, Any]: ...
