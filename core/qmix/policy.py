"""The learned, decentralised policy: agent network + (for the lab's view) the mixer.

Execution is decentralised: each agent's action is the ε-greedy choice over its own
Q-values. The mixer is only consulted to *report* Q_tot, its weights and the
per-agent credit, which the lab draws; it never changes an action.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from core.qmix.controller import select_actions
from core.qmix.encoders import AgentNetwork
from core.team.plan import RoundPlan


@dataclass
class StepOutput:
    """One batched decision. Shapes: ``actions (E, N)``, ``greedy (E, N)``, ``q (E, N, A)``;
    mixer fields ``(E,)``, ``(E, N, embed)``, ``(E, N)`` or None when not asked for."""

    actions: np.ndarray
    greedy: np.ndarray
    q: np.ndarray
    q_tot: np.ndarray | None = None
    mixer_weights: np.ndarray | None = None
    credit: np.ndarray | None = None


@dataclass
class PolicyMemory:
    """What the policy carries across the rounds of a batch of episodes."""

    hidden: torch.Tensor
    last_action: torch.Tensor
    extras: dict[str, Any] = field(default_factory=dict)


class QMixPolicy:
    """Acts for a batch of episodes at once; also usable as a :class:`TeamPolicy`."""

    name = "qmix"

    def __init__(
        self,
        agent: AgentNetwork,
        mixer: nn.Module | None,
        device: torch.device,
        epsilon: float = 0.0,
        generator: torch.Generator | None = None,
        label: str = "qmix",
    ):
        self.agent, self.mixer, self.device = agent, mixer, device
        self.epsilon, self.generator, self.name = epsilon, generator, label

    def start(self, batch: int) -> PolicyMemory:
        return PolicyMemory(
            hidden=self.agent.initial_hidden(batch, self.device),
            last_action=torch.full(
                (batch, self.agent.n_agents), -1, dtype=torch.long, device=self.device
            ),
        )

    @torch.no_grad()
    def step(
        self, obs: list[dict[str, np.ndarray]], memory: PolicyMemory, explain: bool = False
    ) -> tuple[StepOutput, PolicyMemory]:
        """Decide for ``E`` episodes given their protocol observation dicts."""
        o = torch.from_numpy(np.stack([x["obs"] for x in obs])).to(self.device)
        adj = torch.from_numpy(np.stack([x["adj"] for x in obs])).to(self.device)
        avail = torch.from_numpy(np.stack([x["avail"] for x in obs])).to(self.device)
        q, hidden = self.agent(o, adj, memory.last_action, memory.hidden)
        actions, greedy = select_actions(q, avail, self.epsilon, self.generator)
        out = StepOutput(
            actions=actions.cpu().numpy(), greedy=greedy.cpu().numpy(), q=q.cpu().numpy()
        )
        if explain and self.mixer is not None:
            state = torch.from_numpy(np.stack([x["state"] for x in obs])).to(self.device)
            chosen = q.gather(-1, actions.unsqueeze(-1)).squeeze(-1)  # (E, N)
            view = self.mixer.view(chosen, state)
            out.q_tot = view.q_tot.cpu().numpy()
            out.mixer_weights = view.w1.cpu().numpy()
            out.credit = view.credit.cpu().numpy()
        return out, PolicyMemory(hidden=hidden, last_action=actions)

    # TeamPolicy interface: one episode at a time, used by the async team runtime.
    def begin(self, n_agents: int, seed: int) -> PolicyMemory:
        return self.start(1)

    def plan(
        self, obs: dict[str, np.ndarray], round_index: int, memory: PolicyMemory
    ) -> tuple[RoundPlan, PolicyMemory]:
        out, memory = self.step([obs], memory, explain=True)
        return plan_from_output(out, 0, self.epsilon), memory


def plan_from_output(out: StepOutput, e: int, epsilon: float) -> RoundPlan:
    """The :class:`RoundPlan` of episode ``e`` of a batched decision."""
    return RoundPlan(
        actions=[int(a) for a in out.actions[e]],
        q_values=out.q[e].astype(float).tolist(),
        greedy=[bool(g) for g in out.greedy[e]],
        epsilon=float(epsilon),
        q_tot=None if out.q_tot is None else float(out.q_tot[e]),
        mixer_weights=None
        if out.mixer_weights is None
        else out.mixer_weights[e].astype(float).tolist(),
        credit=None if out.credit is None else out.credit[e].astype(float).tolist(),
    )
