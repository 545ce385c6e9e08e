"""Mixing networks: QMIX (monotonic, state-conditioned) and VDN (a plain sum).

Both take per-agent chosen Q-values ``(B, T, N)`` and the global state ``(B, T, S)``
and return ``Q_tot (B, T, 1)``. QMIX's hypernetworks emit non-negative weights
(``abs``), so ∂Q_tot/∂Q_i ≥ 0 for every agent: the greedy joint action is the
tuple of per-agent greedy actions (IGM), which is what lets agents act alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from core.qmix.config import MIXER_KINDS, MixerConfig


@dataclass
class MixerView:
    """What the lab draws for one state: weights, and per-agent credit.

    Shapes: ``w1 (B, N, E)``, ``b1 (B, E)``, ``w_final (B, E)``, ``v (B,)``, ``credit (B, N)``,
    ``q_tot (B,)``.
    """

    w1: torch.Tensor
    b1: torch.Tensor
    w_final: torch.Tensor
    v: torch.Tensor
    credit: torch.Tensor
    q_tot: torch.Tensor


def _check(agent_qs: torch.Tensor, states: torch.Tensor, n_agents: int, state_dim: int) -> None:
    if agent_qs.shape[-1] != n_agents:
        raise ValueError(
            f"mixer built for {n_agents} agents got Q-values of shape {tuple(agent_qs.shape)}"
        )
    if states.shape[-1] != state_dim:
        raise ValueError(
            f"mixer built for state_dim {state_dim} got states of shape {tuple(states.shape)}"
        )
    if agent_qs.shape[:-1] != states.shape[:-1]:
        raise ValueError(
            f"Q-values {tuple(agent_qs.shape)} and states {tuple(states.shape)} disagree on batch dims"
        )


class QMixer(nn.Module):
    """QMIX: ``Q_tot = w_final · elu(Q · W1 + b1) + V(s)`` with ``W1, w_final ≥ 0``."""

    def __init__(self, n_agents: int, state_dim: int, config: MixerConfig):
        super().__init__()
        config.validate()
        self.n_agents, self.state_dim, self.embed = n_agents, state_dim, config.embed
        h, e = config.hypernet_hidden, config.embed
        self.hyper_w1 = nn.Sequential(
            nn.Linear(state_dim, h), nn.ReLU(), nn.Linear(h, n_agents * e)
        )
        self.hyper_b1 = nn.Linear(state_dim, e)
        self.hyper_w_final = nn.Sequential(nn.Linear(state_dim, h), nn.ReLU(), nn.Linear(h, e))
        self.v = nn.Sequential(nn.Linear(state_dim, e), nn.ReLU(), nn.Linear(e, 1))

    def weights(self, states: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """``states (M, S)`` -> ``w1 (M, N, E)``, ``b1 (M, E)``, ``w_final (M, E)``, ``v (M,)``."""
        w1 = self.hyper_w1(states).abs().view(-1, self.n_agents, self.embed)
        b1 = self.hyper_b1(states)
        w_final = self.hyper_w_final(states).abs()
        return w1, b1, w_final, self.v(states).squeeze(-1)

    def forward(self, agent_qs: torch.Tensor, states: torch.Tensor) -> torch.Tensor:
        """``agent_qs (B, T, N)``, ``states (B, T, S)`` -> ``q_tot (B, T, 1)``."""
        _check(agent_qs, states, self.n_agents, self.state_dim)
        lead = agent_qs.shape[:-1]
        qs = agent_qs.reshape(-1, 1, self.n_agents)  # (M, 1, N)
        w1, b1, w_final, v = self.weights(states.reshape(-1, self.state_dim))
        hidden = F.elu(torch.bmm(qs, w1).squeeze(1) + b1)  # (M, E)
        q_tot = (hidden * w_final).sum(-1) + v  # (M,)
        return q_tot.view(*lead, 1)

    @torch.no_grad()
    def view(self, agent_qs: torch.Tensor, states: torch.Tensor) -> MixerView:
        """Weights and exact credit ∂Q_tot/∂Q_i for ``agent_qs (B, N)``, ``states (B, S)``."""
        _check(agent_qs, states, self.n_agents, self.state_dim)
        w1, b1, w_final, v = self.weights(states)
        pre = torch.bmm(agent_qs.unsqueeze(1), w1).squeeze(1) + b1  # (B, E)
        elu_grad = torch.where(pre > 0, torch.ones_like(pre), torch.exp(pre))
        credit = torch.einsum("bne,be->bn", w1, elu_grad * w_final)
        q_tot = (F.elu(pre) * w_final).sum(-1) + v
        return MixerView(w1=w1, b1=b1, w_final=w_final, v=v, credit=credit, q_tot=q_tot)


class VDNMixer(nn.Module):
    """VDN: ``Q_tot = Σ_i Q_i`` (no state; every agent's credit is 1)."""

    def __init__(self, n_agents: int, state_dim: int, config: MixerConfig | None = None):
        super().__init__()
        self.n_agents, self.state_dim = n_agents, state_dim

    def forward(self, agent_qs: torch.Tensor, states: torch.Tensor) -> torch.Tensor:
        """``agent_qs (B, T, N)``, ``states (B, T, S)`` -> ``q_tot (B, T, 1)``."""
        _check(agent_qs, states, self.n_agents, self.state_dim)
        return agent_qs.sum(-1, keepdim=True)

    @torch.no_grad()
    def view(self, agent_qs: torch.Tensor, states: torch.Tensor) -> MixerView:
        b, n = agent_qs.shape
        ones = torch.ones(b, n, 1, device=agent_qs.device)
        zeros = torch.zeros(b, 1, device=agent_qs.device)
        return MixerView(
            w1=ones,
            b1=zeros,
            w_final=torch.ones(b, 1, device=agent_qs.device),
            v=zeros.squeeze(-1),
            credit=torch.ones(b, n, device=agent_qs.device),
            q_tot=agent_qs.sum(-1),
        )


MIXERS: dict[str, type[nn.Module]] = {"qmix": QMixer, "vdn": VDNMixer}
"""Name -> mixer class (``--mixer``); adding a mixer is one line here and its name one in
:data:`core.qmix.config.MIXER_KINDS` (which the settings check without importing torch)."""
if tuple(MIXERS) != MIXER_KINDS:
    raise ImportError(f"MIXERS {tuple(MIXERS)} and MIXER_KINDS {MIXER_KINDS} disagree")


def make_mixer(n_agents: int, state_dim: int, config: MixerConfig) -> nn.Module:
    """Build the mixer named by ``config.kind``."""
    config.validate()
    return MIXERS[config.kind](n_agents, state_dim, config)
