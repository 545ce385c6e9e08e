"""The CTDE teaching page's model: a small, real QMixer and brute-force checks of IGM.

A seeded :class:`core.qmix.mixers.QMixer` (untrained: monotonicity comes from its
architecture, not from training) mixes per-agent Q-tables the student edits. Everything
is exact: credit from :meth:`QMixer.view`, the centralised argmax by enumerating every
joint action. ``monotonic=False`` is the same network without the ``abs`` on its
weights — the counter-example that shows why QMIX needs monotonicity: with signed
weights the agents' own greedy choices can miss the joint argmax.

The scale: Q-values are in units of the team's reward, which lies in
:data:`REWARD_RANGE` on the default settings. The Q-value sliders span that range, and
the seeded mixer is rescaled per state (a positive factor and a shift on its output, so
monotonicity, the argmax and the credit's ranking are untouched) so that its Q_tot spans
the same range over the sliders' box: a monotonic Q_tot is lowest with every Q_i at the
bottom and highest with every Q_i at the top, so it never leaves the range.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from core.actions import ACTION_NAMES, N_ACTIONS
from core.qmix.games import CLIMBING_PAYOFF
from core.qmix.mixers import MixerConfig, MixerView, QMixer
from core.records import RoundRecord
from core.team.options import TeamOptions

_TEAM = TeamOptions()
REWARD_RANGE: tuple[float, float] = (-_TEAM.token_weight, _TEAM.accuracy_weight)
"""The team's reward on the default settings (capped token penalty):
``w_acc · score − w_tok · min(tokens / budget, 1)`` lies in ``[−w_tok, w_acc]``."""

Q_STEP = 0.05
"""Slider step of the Q-values (and the rounding of the example tables)."""


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


class TeachingMixer(QMixer):
    """A seeded QMixer whose output is rescaled per state to :data:`REWARD_RANGE` over the
    sliders' box; ``monotonic=False`` drops the ``abs`` on its weights (the same parameters,
    signed), so Q_tot is no longer monotonic in each Q_i and a per-agent argmax no longer
    has to be the joint argmax.

    The rescaling is ``k(s) · Q_tot + c(s)`` with ``k > 0``, read off the monotonic
    network at the box's two corners and folded into its final weights and V(s), so
    :meth:`QMixer.forward` and :meth:`QMixer.view` (credit included) see one network.
    """

    def __init__(self, n_agents: int, state_dim: int, config: MixerConfig, monotonic: bool):
        super().__init__(n_agents, state_dim, config)
        self.monotonic = monotonic

    def _raw(self, states: torch.Tensor, monotonic: bool) -> tuple[torch.Tensor, ...]:
        if monotonic:
            return super().weights(states)
        w1 = self.hyper_w1(states).view(-1, self.n_agents, self.embed)
        return w1, self.hyper_b1(states), self.hyper_w_final(states), self.v(states).squeeze(-1)

    def weights(self, states: torch.Tensor) -> tuple[torch.Tensor, ...]:
        w1, b1, w_final, v = self._raw(states, self.monotonic)
        k, c = self._scale(states)  # (B,), (B,)
        return w1, b1, w_final * k.unsqueeze(-1), v * k + c

    def _scale(self, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        w1, b1, w_final, v = self._raw(states, True)
        lo, hi = REWARD_RANGE

        def q_tot(value: float) -> torch.Tensor:  # (B,) with every Q_i = value
            qs = torch.full((states.shape[0], 1, self.n_agents), value)
            return (F.elu(torch.bmm(qs, w1).squeeze(1) + b1) * w_final).sum(-1) + v

        bottom, top = q_tot(lo), q_tot(hi)
        k = (hi - lo) / (top - bottom)
        return k, lo - k * bottom


def build_mixer(config: CtdeConfig | None = None, monotonic: bool = True) -> TeachingMixer:
    """A seeded :class:`TeachingMixer` for the toy team (weights are a deterministic
    function of the seed); ``monotonic=False`` gives the same parameters without ``abs``."""
    config = config or CtdeConfig()
    config.validate()
    gen = torch.Generator().manual_seed(config.seed)
    mixer = TeachingMixer(
        config.n_agents,
        config.state_dim,
        MixerConfig(embed=config.embed, hypernet_hidden=16),
        monotonic,
    )
    with torch.no_grad():
        for p in mixer.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.6)
    return mixer.eval()


def example_q_table(state: str, config: CtdeConfig | None = None) -> list[list[float]]:
    """Per-agent Q-values ``(N, 6)`` for one of :data:`STATES`, in :data:`REWARD_RANGE` and
    on the sliders' grid."""
    config = config or CtdeConfig()
    index = list(STATES).index(state)
    gen = torch.Generator().manual_seed(config.seed * 100 + index)
    lo, hi = REWARD_RANGE
    table = lo + (hi - lo) * torch.rand(config.n_agents, N_ACTIONS, generator=gen)
    return [[round(round(float(v) / Q_STEP) * Q_STEP, 2) for v in row] for row in table]


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


def joint_count(avail: list[list[bool]]) -> int:
    """How many joint actions the team can take (a crashed agent has one)."""
    count = 1
    for row in avail:
        count *= sum(row)
    return count


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


def climbing_payoff() -> list[list[float]]:
    """Claus & Boutilier's climbing game (core.qmix.games), the team's payoff ``[a0][a1]``:
    the table monotonic mixing cannot represent, shown on the CTDE page."""
    return [list(row) for row in CLIMBING_PAYOFF]
