"""Decentralised action selection: each agent acts on its own Q-values only.

ε-greedy over the available actions, with ε annealed linearly over training.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class ExplorationConfig:
    """ε-greedy schedule."""

    start: float = 1.0
    """ε at the first episode."""
    finish: float = 0.05
    """ε after annealing."""
    anneal_fraction: float = 0.5
    """Fraction of the training episodes over which ε falls linearly from start to finish."""

    def validate(self) -> None:
        for name in ("start", "finish"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"epsilon {name} must be in [0, 1], got {v}")
        if not 0.0 < self.anneal_fraction <= 1.0:
            raise ValueError(f"anneal_fraction must be in (0, 1], got {self.anneal_fraction}")


def epsilon_at(config: ExplorationConfig, episode: int, total_episodes: int) -> float:
    """Linearly annealed ε for ``episode`` of ``total_episodes``."""
    span = max(1.0, config.anneal_fraction * total_episodes)
    frac = min(1.0, episode / span)
    return config.start + frac * (config.finish - config.start)


def select_actions(
    q: torch.Tensor, avail: torch.Tensor, epsilon: float, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """ε-greedy per agent over the available actions.

    Shapes: ``q (B, N, A)``, ``avail (B, N, A)`` bool -> ``actions (B, N)`` long,
    ``greedy (B, N)`` bool (True where the action equals the greedy one, False where
    exploration picked a different action).
    """
    masked = q.masked_fill(~avail, float("-inf"))
    greedy_actions = masked.argmax(-1)
    if epsilon <= 0.0:
        return greedy_actions, torch.ones_like(greedy_actions, dtype=torch.bool)
    # Sample on the CPU: the exploration generator is a CPU one (a CUDA tensor with a CPU
    # generator is an error in torch.multinomial).
    probs = avail.float().cpu()
    random_actions = torch.multinomial(
        probs.view(-1, probs.shape[-1]), 1, generator=generator
    ).view(greedy_actions.shape)
    explore = torch.rand(greedy_actions.shape, generator=generator) < epsilon
    actions = torch.where(explore.to(q.device), random_actions.to(q.device), greedy_actions)
    return actions, actions == greedy_actions
