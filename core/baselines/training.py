"""Training any learned-topology method, top to bottom: config -> envs -> method ->
optimiser -> loop (collect, score, optimise, change stage) -> final stage.

Every batch plays ``n_envs`` training episodes through the one rollout path with graphs
*sampled* from the method (:class:`~core.baselines.policy.GraphPolicy` with ``explore``),
takes each episode's reward as its utility, and takes one Adam step on

    −1/B Σ_b (u_b − ū_{−b}) log p_θ(G_b)  +  the method's regulariser

(:mod:`core.baselines.edges`). Stage changes (AgentDropout's node dropout) happen between
batches, the last one (AgentPrune's pruning, AgentDropout's edge dropout) when the
budget is spent. Environment-agnostic like the QMIX loop: anything with the vec-env
protocol whose observations carry the team layout trains here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from core.baselines.edges import reinforce_loss
from core.baselines.method import VERIFY, GraphMethod, Stage
from core.baselines.policy import EpisodeDraw, GraphPolicy, describe_graphs, stacked
from core.qmix.env import VecEnv
from core.qmix.runner import EpisodeResult, rollout
from core.qmix.seeding import seed_everything, torch_threads


@dataclass
class BaselineTrainConfig:
    """The budget and seeds of one training run of a learned-topology method."""

    episodes: int = 40_000
    """Training episodes in total: the method's optimisation budget, by default the same as
    ``agentqmix train``'s (docs/baselines.md, "Budgets")."""
    n_envs: int = 32
    """Episodes played in lockstep per batch: one REINFORCE step per batch."""
    seed: int = 0
    """Seeds the method's initial weights, its graph sampling and the episode stream."""
    max_tokens: int | None = None
    """A budget in tokens besides the one in episodes: training ends when its episodes have
    spent this many tokens or ``episodes`` are played, whichever comes first; stage changes
    (AgentDropout's node dropout at ``node_stage``) follow the larger share spent. Set it to
    another run's ``train_tokens`` to train on equal tokens (docs/baselines.md, "Budgets")."""
    cpu_threads: int = 1
    """Torch CPU threads while training (0 = torch's setting)."""
    task_baseline: bool = True
    """Subtract a linear estimate of the reward from the task's features before the
    leave-one-out baseline (a state-dependent baseline: unbiased, since it does not depend
    on the sampled graph). How hard a task is explains most of an episode's reward; without
    it the few points a graph is worth drown in that spread (docs/baselines.md)."""
    task_baseline_rate: float = 0.01
    """Adam's step size for the task baseline's regression."""

    def validate(self) -> None:
        if self.episodes < 1:
            raise ValueError(f"episodes must be >= 1, got {self.episodes}")
        if self.n_envs < 2:
            raise ValueError(f"n_envs must be >= 2 (the baseline needs a batch), got {self.n_envs}")
        if self.cpu_threads < 0:
            raise ValueError(f"cpu_threads must be >= 0, got {self.cpu_threads}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if not self.task_baseline_rate > 0:
            raise ValueError(f"task_baseline_rate must be > 0, got {self.task_baseline_rate}")


@dataclass
class BaselineState:
    """The method, its optimiser and progress."""

    method: GraphMethod
    optimiser: torch.optim.Optimizer
    critic: TaskBaseline | None = None
    episodes_done: int = 0
    updates: int = 0
    tokens: int = 0
    """Tokens the training episodes spent (the budget in tokens)."""
    stages: list[Stage] = field(default_factory=list)
    history: list[dict[str, float]] = field(default_factory=list)

    def budget_used(self, config: BaselineTrainConfig) -> int:
        """The budget spent, in episodes: those played, or — with a token budget — the
        episodes' share of the tokens spent if that is larger (``config.episodes`` = spent)."""
        used = self.episodes_done
        if config.max_tokens is not None:
            share = min(self.tokens / config.max_tokens, 1.0)
            used = max(used, int(share * config.episodes))
        return used


class BaselineHooks:
    """Override to observe training (the episode store). Default: do nothing."""

    def on_episodes(self, results: Sequence[EpisodeResult], state: BaselineState) -> None:
        """After each batch of training episodes."""

    def on_update(self, stats: dict[str, float], state: BaselineState) -> None:
        """After each optimiser step."""

    def on_stage(self, stage: Stage, state: BaselineState) -> None:
        """After a stage change (pruning, dropout)."""

    def should_stop(self) -> bool:
        return False

    def batch_size(self, n: int) -> int:
        """How many of the next ``n`` episodes to collect as one batch (fewer: a budget
        that only fits so many; 0 = stop)."""
        return n


def train_method(
    make_venv: Callable[[int], VecEnv],
    method: GraphMethod,
    config: BaselineTrainConfig,
    hooks: BaselineHooks | None = None,
    progress: Callable[[int, int, dict[str, float]], None] | None = None,
) -> BaselineState:
    """Train ``method`` on the training stream of ``make_venv(config.n_envs)``."""
    config.validate()
    hooks = hooks or BaselineHooks()
    seed_everything(config.seed)
    generator = torch.Generator().manual_seed(config.seed)
    optimiser = torch.optim.Adam(method.parameters(), lr=method.config.learning_rate)
    critic = (
        TaskBaseline(method.shape.feature_width, config.task_baseline_rate)
        if config.task_baseline
        else None
    )
    state = BaselineState(method, optimiser, critic)
    venv = make_venv(config.n_envs)
    started = time.perf_counter()
    try:
        with torch_threads(config.cpu_threads):
            while state.budget_used(config) < config.episodes and not hooks.should_stop():
                _stage(method.on_progress(state.budget_used(config), config.episodes), state, hooks)
                # --- collect: graphs sampled while anything is left to learn
                n = hooks.batch_size(min(config.n_envs, config.episodes - state.episodes_done))
                if n < 1:
                    break
                first = state.episodes_done
                actor = GraphPolicy(method, explore=method.trainable, generator=generator)
                results = rollout(venv, actor, range(first, first + n))
                state.episodes_done += n
                state.tokens += sum(int(r.info.get("tokens", 0)) for r in results)
                hooks.on_episodes(results, state)
                # --- optimise
                utility = torch.tensor([r.ret for r in results], dtype=torch.float32)
                stats = {"episode": float(state.episodes_done), "reward": float(utility.mean())}
                if method.trainable:
                    stats |= update(method, state.optimiser, actor.memory, utility, state.critic)
                    state.updates += 1
                    hooks.on_update(stats, state)
                stats |= describe_graphs(actor.graphs())
                stats["elapsed_s"] = time.perf_counter() - started
                state.history.append(stats)
                if progress:
                    progress(state.budget_used(config), config.episodes, stats)
            if state.budget_used(config) >= config.episodes:
                _stage(method.finish(state.episodes_done), state, hooks)
    finally:
        venv.close()
    return state


class TaskBaseline:
    """``b(x) = w·x + c``: a linear estimate of an episode's reward from its task features,
    fitted online by least squares (one Adam step per batch, on the batch it scores)."""

    def __init__(self, width: int, rate: float):
        self.model = torch.nn.Linear(width, 1)
        torch.nn.init.zeros_(self.model.weight)
        torch.nn.init.zeros_(self.model.bias)
        self.optimiser = torch.optim.Adam(self.model.parameters(), lr=rate)

    def __call__(self, features: torch.Tensor) -> torch.Tensor:
        """``(B, F)`` -> ``(B,)``, no grad."""
        with torch.no_grad():
            return self.model(features.float()).squeeze(-1)

    def fit(self, features: torch.Tensor, utility: torch.Tensor) -> float:
        loss = (self.model(features.float()).squeeze(-1) - utility).pow(2).mean()
        self.optimiser.zero_grad(set_to_none=True)
        loss.backward()
        self.optimiser.step()
        return float(loss.detach())


def update(
    method: GraphMethod,
    optimiser: torch.optim.Optimizer,
    draws: list[EpisodeDraw],
    utility: torch.Tensor,
    critic: TaskBaseline | None = None,
) -> dict[str, float]:
    """One REINFORCE step on the graphs ``draws`` (one per episode) and their utilities
    ``(B,)``: the log-probabilities are recomputed with grad under the same context. With
    a ``critic``, the advantage is measured from its estimate (scored before it learns from
    this batch, so it never sees the outcome it baselines)."""
    edges, context, features = stacked(draws)
    probs = method.edge_probs(context, len(draws))
    log_probs = method.log_prob(probs, edges)
    residual = utility if critic is None else utility - critic(features)
    policy_loss = reinforce_loss(log_probs, residual)
    # The method's regulariser is about its graph; the verify bits (tools) have none.
    penalty = method.regulariser({k: p for k, p in probs.items() if k != VERIFY})
    loss = policy_loss + penalty
    optimiser.zero_grad(set_to_none=True)
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(method.parameters(), float("inf"))
    optimiser.step()
    stats = {
        "loss": float(loss.detach()),
        "policy_loss": float(policy_loss.detach()),
        "regulariser": float(penalty.detach()),
        "grad_norm": float(grad_norm),
    }
    if critic is not None:
        stats["baseline_mse"] = critic.fit(features, utility)
    return stats


def _stage(stage: Stage | None, state: BaselineState, hooks: BaselineHooks) -> None:
    if stage is None:
        return
    state.stages.append(stage)
    hooks.on_stage(stage, state)
