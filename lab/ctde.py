"""The CTDE teaching page's model: a small, real QMixer and brute-force checks of IGM.

A seeded :class:`core.qmix.mixers.QMixer` (untrained: monotonicity comes from its
architecture, not from training) mixes per-agent Q-tables the student edits. Everything
is exact: credit from :meth:`QMixer.view`, the centralised argmax by enumerating every
joint action. :class:`UnconstrainedMixer` is the same network without the ``abs`` on its
weights — the counter-example that shows why QMIX needs monotonicity: with signed
weights the agents' own greedy choices can miss the joint argmax.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch

from core.actions import ACTION_NAMES, N_ACTIONS
from core.qmix.mixers import MixerConfig, MixerView, QMixer
from core.records import RoundRecord


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

CRASHED: dict[str, int] = {"multiple choice, one agent crashed": 2}
"""States with a crashed agent, and which one: it sits the round out, so its only
available action is ``solo_process`` (as in the real team's ``avail`` mask)."""


class UnconstrainedMixer(QMixer):
    """QMIX's network without ``abs``: signed mixing weights, so Q_tot is not monotonic in
    each Q_i and a per-agent argmax no longer has to be the joint argmax."""

    def weights(self, states: torch.Tensor) -> tuple[torch.Tensor, ...]:
        w1 = self.hyper_w1(states).view(-1, self.n_agents, self.embed)
        return w1, self.hyper_b1(states), self.hyper_w_final(states), self.v(states).squeeze(-1)


def build_mixer(config: CtdeConfig | None = None, monotonic: bool = True) -> QMixer:
    """A seeded QMixer for the toy team (weights are a deterministic function of the seed);
    ``monotonic=False`` gives the same parameters in an :class:`UnconstrainedMixer`."""
    config = config or CtdeConfig()
    config.validate()
    gen = torch.Generator().manual_seed(config.seed)
    mixer = (QMixer if monotonic else UnconstrainedMixer)(
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


def available(state: str, config: CtdeConfig | None = None) -> list[list[bool]]:
    """``(N, 6)`` which actions each agent may take in ``state`` (a crashed agent: solo only)."""
    config = config or CtdeConfig()
    avail = [[True] * N_ACTIONS for _ in range(config.n_agents)]
    crashed = CRASHED.get(state)
    if crashed is not None and crashed < config.n_agents:
        avail[crashed] = [a == 0 for a in range(N_ACTIONS)]
    return avail


def greedy_actions(q_table: list[list[float]], avail: list[list[bool]] | None = None) -> list[int]:
    """Decentralised execution: each agent takes the argmax of its own available Q-values."""
    out = []
    for i, row in enumerate(q_table):
        allowed = [a for a in range(len(row)) if avail is None or avail[i][a]]
        out.append(max(allowed, key=lambda a: (row[a], -a)))
    return out


def joint_argmax(
    mixer: QMixer,
    q_table: list[list[float]],
    state: torch.Tensor,
    avail: list[list[bool]] | None = None,
) -> tuple[list[int], float]:
    """Centralised argmax: Q_tot of every available joint action (up to 6**N); the best and
    its value."""
    n = len(q_table)
    choices = [[a for a in range(N_ACTIONS) if avail is None or avail[i][a]] for i in range(n)]
    joints = list(itertools.product(*choices))
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


def action_label(agent: int, action: int) -> str:
    """``agent 1 · broadcast_all``: what a Q-value slider sets."""
    return f"agent {agent} · {ACTION_NAMES[action]}"


def view_round(view: MixerView) -> RoundRecord:
    """The mixer's view of one state as a round record (what the Replay panels draw)."""
    return RoundRecord(
        round=0, edges=[], dropped_edges=[], layers=[], steps=[], q_tot=float(view.q_tot[0]),
        mixer_weights=view.w1[0].tolist(), credit=view.credit[0].tolist(),
    )  # fmt: skip
