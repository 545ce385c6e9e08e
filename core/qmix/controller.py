"""Decentralised action selection: each agent acts on its own Q-values only.

ε-greedy over the available actions, with ε annealed linearly over training.
"""

from __future__ import annotations

import torch

from core.qmix.config import ExplorationConfig


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
