"""The CTDE teaching page's model: a small, real QMixer and brute-force checks of IGM.

A seeded :class:`core.qmix.mixers.QMixer` (untrained: monotonicity comes from its
architecture, not from training) mixes per-agent Q-tables the student edits. Everything
is exact: credit from :meth:`QMixer.view`, the centralised argmax by enumerating every
joint action.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch

from core.actions import N_ACTIONS
from core.qmix.mixers import MixerConfig, MixerView, QMixer


@dataclass
class CtdeConfig:
    """Size of the teaching example."""

    n_agents: int = 3
    """Agents in the toy team (6**n joint actions are enumerated)."""
    state_dim: int = 4
    """Size of the global state the mixer's hypernetworks read."""
    embed: int = 8
    """Width of the mixing layer (rows of the weight heat map)."""
    seed: int = 7
    """Seeds the mixer's weights and the example Q-tables."""

    def validate(self) -> None:
        if not 1 <= self.n_agents <= 4:
            raise ValueError(f"n_agents must be in 1..4 (6**n joint actions), got {self.n_agents}")
        if self.state_dim < 1 or self.embed < 1:
            raise ValueError(
                f"state_dim and embed must be >= 1, got {self.state_dim}, {self.embed}"
            )


STATES: dict[str, tuple[float, ...]] = {
    "easy maths question, everyone healthy": (1.0, 0.0, 0.2, 0.0),
    "hard coding task, tight token budget": (0.0, 1.0, 0.9, -0.5),
    "multiple choice, one agent crashed": (-0.5, 0.3, 0.5, 1.0),
}
"""Example global states (what the mixer's hypernetworks condition on)."""


def build_mixer(config: CtdeConfig | None = None) -> QMixer:
    """A seeded QMixer for the toy team (weights are a deterministic function of the seed)."""
    config = config or CtdeConfig()
    config.validate()
    gen = torch.Generator().manual_seed(config.seed)
    mixer = QMixer(
        config.n_agents, config.state_dim, MixerConfig(embed=config.embed, hypernet_hidden=16)
    )
    with torch.no_grad():
        for p in mixer.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.6)
    return mixer.eval()


def example_q_table(state: str, config: CtdeConfig | None = None) -> list[list[float]]:
    """Per-agent Q-values ``(N, 6)`` for one of :data:`STATES`, rounded for sliders."""
    config = config or CtdeConfig()
    index = list(STATES).index(state)
    gen = torch.Generator().manual_seed(config.seed * 100 + index)
    table = torch.randn(config.n_agents, N_ACTIONS, generator=gen)
    return [[round(float(v), 1) for v in row] for row in table]


def state_tensor(state: str, config: CtdeConfig | None = None) -> torch.Tensor:
    """``(1, S)`` the named state as the mixer's input."""
    config = config or CtdeConfig()
    values = list(STATES[state])[: config.state_dim]
    values += [0.0] * (config.state_dim - len(values))
    return torch.tensor([values], dtype=torch.float32)


def mix(mixer: QMixer, chosen_qs: list[float], state: torch.Tensor) -> MixerView:
    """The mixer's view for the chosen per-agent Q-values ``(N,)`` in ``state (1, S)``."""
    return mixer.view(torch.tensor([chosen_qs], dtype=torch.float32), state)


def greedy_actions(q_table: list[list[float]]) -> list[int]:
    """Decentralised execution: each agent takes the argmax of its own Q-values."""
    return [max(range(len(row)), key=lambda a: (row[a], -a)) for row in q_table]


def joint_argmax(
    mixer: QMixer, q_table: list[list[float]], state: torch.Tensor
) -> tuple[list[int], float]:
    """Centralised argmax: Q_tot of every joint action (6**N of them); the best and its value."""
    n = len(q_table)
    joints = list(itertools.product(range(N_ACTIONS), repeat=n))
    qs = torch.tensor([[q_table[i][a] for i, a in enumerate(j)] for j in joints])  # (6**N, N)
    with torch.no_grad():
        q_tot = mixer(qs.unsqueeze(1), state.expand(len(joints), -1).unsqueeze(1)).view(-1)
    best = int(torch.argmax(q_tot))
    return list(joints[best]), float(q_tot[best])


def sweep(
    mixer: QMixer, chosen_qs: list[float], state: torch.Tensor, grid: list[float]
) -> dict[int, list[float]]:
    """Q_tot as each agent's Q-value runs over ``grid`` with the others held fixed."""
    out = {}
    for i in range(len(chosen_qs)):
        rows = []
        for value in grid:
            qs = list(chosen_qs)
            qs[i] = value
            rows.append(qs)
        with torch.no_grad():
            q_tot = mixer(
                torch.tensor(rows).unsqueeze(1), state.expand(len(grid), -1).unsqueeze(1)
            ).view(-1)
        out[i] = [float(v) for v in q_tot]
    return out
