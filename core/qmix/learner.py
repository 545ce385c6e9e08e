"""The QMIX learner: unroll over whole episodes, TD error of Q_tot against target networks."""

from __future__ import annotations

import copy

import torch
from torch import nn

from core.qmix.buffer import EpisodeBatch
from core.qmix.config import LearnerConfig
from core.qmix.encoders import AgentNetwork, mean_aggregator


def last_actions(batch: EpisodeBatch) -> torch.Tensor:
    """``(B, T+1, N)``: the action fed at round ``t`` is the one taken at ``t - 1`` (-1 at 0)."""
    b, _, n, _ = batch.obs.shape
    first = torch.full((b, 1, n), -1, dtype=torch.long, device=batch.obs.device)
    return torch.cat((first, batch.actions), dim=1)


def batch_aggregator(batch: EpisodeBatch) -> torch.Tensor:
    """``(B*(T+1), N, N)``: :func:`mean_aggregator` of every round graph of the batch."""
    n = batch.adj.shape[-1]
    return mean_aggregator(batch.adj.reshape(-1, n, n))


def unroll(
    agent: AgentNetwork,
    batch: EpisodeBatch,
    last: torch.Tensor | None = None,
    aggregator: torch.Tensor | None = None,
    grad_rounds: int | None = None,
) -> torch.Tensor:
    """Q-values at every observation of a batch of episodes, ``(B, T+1, N, A)``.

    ``last`` (:func:`last_actions`) and ``aggregator`` (:func:`batch_aggregator`) depend on
    the batch only: the learner builds them once for the online and the target network.
    ``grad_rounds``: see :meth:`AgentNetwork.forward_sequence`.
    """
    last = last_actions(batch) if last is None else last
    aggregator = batch_aggregator(batch) if aggregator is None else aggregator
    return agent.forward_sequence(batch.obs, batch.adj, last, aggregator, grad_rounds)


def lambda_targets(
    reward: torch.Tensor,
    terminated: torch.Tensor,
    target_next: torch.Tensor,
    gamma: float,
    lam: float,
) -> torch.Tensor:
    """TD(λ) targets of Q_tot, ``(B, T)``, from ``reward``, ``terminated`` and
    ``target_next[:, t]`` = the target networks' Q_tot at the state after step ``t``:

        G_t = r_t + γ (1 - term_t) [(1 - λ) Q'(s_{t+1}) + λ G_{t+1}],   G_{T-1} uses Q'(s_T).

    λ = 0 gives the one-step targets; a terminal step never bootstraps. Padded steps after
    an episode's end are masked by the caller; they never leak into earlier steps because
    the episode's last real step is terminal or the last of the horizon.
    """
    targets = torch.empty_like(reward)
    g: torch.Tensor | None = None
    for t in reversed(range(reward.shape[1])):
        nxt = target_next[:, t] if g is None else (1.0 - lam) * target_next[:, t] + lam * g
        g = reward[:, t] + gamma * (1.0 - terminated[:, t]) * nxt
        targets[:, t] = g
    return targets


def lr_at(config: LearnerConfig, update: int, total_updates: int) -> float:
    """The learning rate of update number ``update`` (0-based) of a run of ``total_updates``:
    linear from ``lr`` to ``lr · lr_decay_to`` over the first ``lr_decay_fraction`` of the
    updates, then flat. Constant when ``lr_decay_to`` is 1 or the total is unknown (0)."""
    if config.lr_decay_to >= 1.0 or total_updates < 1:
        return config.lr
    span = max(config.lr_decay_fraction * total_updates, 1.0)
    progress = min(update / span, 1.0)
    return config.lr * (1.0 - progress * (1.0 - config.lr_decay_to))


class QLearner:
    """Owns online, target and greedy-policy networks and the optimiser; ``train(batch)`` does
    one update.

    ``policy_agent``/``policy_mixer`` are the greedy policy (``LearnerConfig.policy_ema``):
    the online networks themselves, or their moving average. ``total_updates``: the updates
    the run plans, for the learning-rate schedule (0: unknown, a constant rate).
    """

    def __init__(
        self, agent: AgentNetwork, mixer: nn.Module, config: LearnerConfig, total_updates: int = 0
    ):
        config.validate()
        self.agent, self.mixer, self.config = agent, mixer, config
        self.total_updates = total_updates
        self.target_agent = copy.deepcopy(agent).requires_grad_(False)
        self.target_mixer = copy.deepcopy(mixer).requires_grad_(False)
        averaged = config.policy_ema > 0
        self.policy_agent = copy.deepcopy(agent).requires_grad_(False) if averaged else agent
        self.policy_mixer = copy.deepcopy(mixer).requires_grad_(False) if averaged else mixer
        self.params = list(agent.parameters()) + list(mixer.parameters())
        # Fused Adam: one kernel for all parameters (CPU and CUDA, torch >= 2.4).
        self.optimiser = torch.optim.Adam(self.params, lr=config.lr, fused=True)
        self.updates = 0

    def loss(self, batch: EpisodeBatch) -> tuple[torch.Tensor, dict[str, float]]:
        """Masked TD loss of Q_tot; also returns diagnostics."""
        cfg = self.config
        with torch.autocast(
            batch.obs.device.type, dtype=torch.bfloat16, enabled=cfg.precision == "bf16"
        ):
            return self._loss(batch)

    def _loss(self, batch: EpisodeBatch) -> tuple[torch.Tensor, dict[str, float]]:
        cfg = self.config
        last, aggregator = last_actions(batch), batch_aggregator(batch)
        # The TD error differentiates Q at rounds 0..T-1; round T only feeds double-Q's argmax.
        # (.float(): under bf16 autocast the networks' outputs are bfloat16; the TD is not.)
        q = unroll(self.agent, batch, last, aggregator, grad_rounds=batch.actions.shape[1]).float()
        chosen = q[:, :-1].gather(-1, batch.actions.unsqueeze(-1)).squeeze(-1)  # (B, T, N)
        with torch.no_grad():
            target_q = unroll(self.target_agent, batch, last, aggregator)[:, 1:].float()
            next_avail = batch.avail[:, 1:]
            if cfg.double_q:
                online_next = q[:, 1:].detach().masked_fill(~next_avail, float("-inf"))
                best = online_next.argmax(-1, keepdim=True)
                target_max = target_q.gather(-1, best).squeeze(-1)
            else:
                target_max = target_q.masked_fill(~next_avail, float("-inf")).max(-1).values
            target_tot = self.target_mixer(target_max, batch.state[:, 1:]).squeeze(-1).float()
            y = lambda_targets(batch.reward, batch.terminated, target_tot, cfg.gamma, cfg.td_lambda)
        q_tot = self.mixer(chosen, batch.state[:, :-1]).squeeze(-1).float()  # (B, T)
        mask = batch.filled
        td = (q_tot - y) * mask
        loss = td.pow(2).sum() / mask.sum().clamp(min=1.0)
        stats = {
            "loss": float(loss.detach()),
            "td_error": float(td.detach().abs().sum() / mask.sum().clamp(min=1.0)),
            "q_tot_mean": float((q_tot.detach() * mask).sum() / mask.sum().clamp(min=1.0)),
        }
        return loss, stats

    def train(self, batch: EpisodeBatch) -> dict[str, float]:
        """One gradient step on ``batch``; updates the targets on schedule."""
        loss, stats = self.loss(batch)
        self.optimiser.zero_grad(set_to_none=True)
        loss.backward()
        stats["grad_norm"] = float(nn.utils.clip_grad_norm_(self.params, self.config.grad_clip))
        if self.config.lr_decay_to < 1.0:
            lr = lr_at(self.config, self.updates, self.total_updates)
            for group in self.optimiser.param_groups:
                group["lr"] = lr
            stats["lr"] = lr
        self.optimiser.step()
        self.updates += 1
        self._update_targets()
        self._update_policy()
        return stats

    def _update_policy(self) -> None:
        """Move the averaged greedy policy ``max(policy_ema, 1 / updates)`` of the way to
        the online weights (buffers are copied, not averaged).

        The ``1 / updates`` warm-up makes it the plain mean of every update's weights until
        ``1 / policy_ema`` updates, instead of an average that keeps the initial random
        weights' share at ``(1 - policy_ema)^updates`` (~5 % after 300 updates at 0.01): the
        tuning run without it held the untrained policy's plan for 300 updates."""
        if self.config.policy_ema <= 0:
            return
        rate = max(self.config.policy_ema, 1.0 / self.updates)
        pairs = ((self.policy_agent, self.agent), (self.policy_mixer, self.mixer))
        with torch.no_grad():
            for policy, online in pairs:
                # One fused call per network: a per-tensor loop costs more in dispatch.
                torch._foreach_lerp_(list(policy.parameters()), list(online.parameters()), rate)
                for pb, b in zip(policy.buffers(), online.buffers(), strict=True):
                    pb.copy_(b)

    def _update_targets(self) -> None:
        tau = self.config.tau
        pairs = ((self.target_agent, self.agent), (self.target_mixer, self.mixer))
        if tau > 0:
            with torch.no_grad():
                for target, online in pairs:
                    for tp, p in zip(target.parameters(), online.parameters(), strict=True):
                        tp.lerp_(p, tau)
        elif self.updates % self.config.target_update_interval == 0:
            for target, online in pairs:
                target.load_state_dict(online.state_dict())
