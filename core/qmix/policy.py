"""The learned, decentralised policy: agent network + (for the lab's view) the mixer.

Execution is decentralised: each agent's action is the ε-greedy choice over its own
Q-values. The mixer is only consulted to *report* Q_tot, its weights and the
per-agent credit, which the lab draws; it never changes an action.

Anything with ``name``, ``start(episodes)`` and ``act(obs, memory, explain)`` is an
*actor* the runner can drive (:mod:`core.qmix.decisions`); :class:`QMixPolicy` is the
learned one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from core.qmix.controller import select_actions
from core.qmix.decisions import StepOutput
from core.qmix.encoders import AgentNetwork


@dataclass
class PolicyMemory:
    """What the policy carries across the rounds of a batch of episodes."""

    hidden: torch.Tensor
    last_action: torch.Tensor
    extras: dict[str, Any] = field(default_factory=dict)


class QMixPolicy:
    """The learned actor: one batched forward of the agent network per round."""

    def __init__(
        self,
        agent: AgentNetwork,
        mixer: nn.Module | None,
        device: torch.device,
        epsilon: float = 0.0,
        generator: torch.Generator | None = None,
        label: str = "qmix",
        allowed: np.ndarray | None = None,
    ):
        self.agent, self.mixer, self.device = agent, mixer, device
        self.epsilon, self.generator, self.name = epsilon, generator, label
        # ``(A,)`` bool: the action set the policy was trained with (``--actions``). It is
        # applied on top of the environment's ``avail``, so a checkpoint trained on the
        # graph-only set never verifies, whatever set the evaluating team allows.
        self.allowed = None if allowed is None else torch.as_tensor(allowed, dtype=torch.bool)

    def start(self, episodes: list[int]) -> PolicyMemory:
        batch = len(episodes)
        return PolicyMemory(
            hidden=self.agent.initial_hidden(batch, self.device),
            last_action=torch.full(
                (batch, self.agent.n_agents), -1, dtype=torch.long, device=self.device
            ),
        )

    @torch.no_grad()
    def act(
        self, obs: list[dict[str, np.ndarray]], memory: PolicyMemory, explain: bool = False
    ) -> tuple[StepOutput, PolicyMemory]:
        """Decide for ``E`` episodes given their protocol observation dicts."""
        o = torch.from_numpy(np.stack([x["obs"] for x in obs])).to(self.device)
        adj = torch.from_numpy(np.stack([x["adj"] for x in obs])).to(self.device)
        avail = torch.from_numpy(np.stack([x["avail"] for x in obs])).to(self.device)
        if self.allowed is not None:
            avail = avail & self.allowed.to(self.device)
        q, hidden = self.agent(o, adj, memory.last_action, memory.hidden)
        actions, greedy = select_actions(q, avail, self.epsilon, self.generator)
        out = StepOutput(
            actions=actions.cpu().numpy(),
            greedy=greedy.cpu().numpy(),
            q=q.cpu().numpy(),
            epsilon=self.epsilon,
        )
        if explain and self.mixer is not None:
            state = torch.from_numpy(np.stack([x["state"] for x in obs])).to(self.device)
            chosen = q.gather(-1, actions.unsqueeze(-1)).squeeze(-1)  # (E, N)
            view = self.mixer.view(chosen, state)
            out.q_tot = view.q_tot.cpu().numpy()
            out.mixer_weights = view.w1.cpu().numpy()
            out.credit = view.credit.cpu().numpy()
        return out, PolicyMemory(hidden=hidden, last_action=actions)
