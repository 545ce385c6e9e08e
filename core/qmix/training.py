"""The training loop, top to bottom: config -> envs -> networks -> schedule -> loop -> result.

Environment-agnostic: anything that follows the protocol in :mod:`core.qmix.env` trains here.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from core.qmix.buffer import EpisodeRecorder, ReplayBuffer
from core.qmix.collect import ChildCollector, InlineCollector
from core.qmix.config import TrainConfig
from core.qmix.controller import epsilon_at
from core.qmix.encoders import AgentNetwork
from core.qmix.env import EnvShapes, VecEnv, check_env
from core.qmix.learner import QLearner
from core.qmix.mixers import make_mixer
from core.qmix.policy import QMixPolicy
from core.qmix.runner import EpisodeResult
from core.qmix.seeding import resolve_device, seed_everything, torch_threads


@dataclass
class TrainState:
    """Networks and progress; what a checkpoint saves and ``--resume`` restores."""

    agent: AgentNetwork
    """The online networks (what exploration acts with and the learner trains)."""
    mixer: torch.nn.Module
    learner: QLearner
    shapes: EnvShapes
    device: torch.device
    episodes_done: int = 0
    history: list[dict[str, float]] = field(default_factory=list)
    buffer: ReplayBuffer | None = None
    """The replay buffer the run fills (set by :func:`train`; a resumed fine-tune's comes
    back from its checkpoint with the real episodes it had played)."""

    def greedy_policy(self, label: str = "qmix") -> QMixPolicy:
        """The trained greedy policy (ε = 0): the learner's policy networks, the online ones
        or their average (``LearnerConfig.policy_ema``)."""
        learner = self.learner
        return QMixPolicy(
            learner.policy_agent, learner.policy_mixer, self.device, epsilon=0.0, label=label
        )


class TrainHooks:
    """Override to observe training (the episode store, the lab). Default: do nothing."""

    def on_episodes(
        self, results: Sequence[EpisodeResult], state: TrainState, epsilon: float
    ) -> None:
        """Called after each batch of collected episodes."""

    def on_update(self, stats: dict[str, float], state: TrainState) -> None:
        """Called after each learner update."""

    def should_stop(self) -> bool:
        """Return True to stop early (the lab's Stop button, Ctrl-C)."""
        return False

    def batch_size(self, n: int) -> int:
        """How many of the next ``n`` episodes to collect as one batch (fewer: a budget
        that only fits so many; 0 = stop)."""
        return n


def build_state(shapes: EnvShapes, config: TrainConfig) -> TrainState:
    """Networks, mixer and learner for ``shapes`` on the configured device."""
    device = resolve_device(config.device)
    agent = AgentNetwork(shapes.obs_dim, shapes.n_agents, shapes.n_actions, config.agent).to(device)
    mixer = make_mixer(shapes.n_agents, shapes.state_dim, config.mixer).to(device)
    learner = QLearner(agent, mixer, config.learner, planned_updates(config))
    return TrainState(agent=agent, mixer=mixer, learner=learner, shapes=shapes, device=device)


def planned_updates(config: TrainConfig) -> int:
    """The updates a run of ``config`` makes in all (the learning-rate schedule's length)."""
    return int(config.episodes * updates_per_episode(config))


def updates_per_episode(config: TrainConfig) -> float:
    """Learner updates per collected episode: the learner's rate, capped by ``max_updates``."""
    rate = config.learner.updates_per_episode
    if config.max_updates:
        rate = min(rate, config.max_updates / config.episodes)
    return rate


def train(
    make_venv: Callable[[int], VecEnv],
    config: TrainConfig,
    hooks: TrainHooks | None = None,
    progress: Callable[[int, int, dict[str, float]], None] | None = None,
    state: TrainState | None = None,
    prefill: Sequence[EpisodeRecorder] = (),
) -> TrainState:
    """Train a QMIX team on the training stream of ``make_venv(config.n_envs)``.

    ``state`` continues an earlier run (``--resume``): its ``episodes_done`` is where the
    episode stream and the ε schedule pick up. ``prefill``: finished episodes of another
    source (``TrainConfig.prefill_episodes``) that start the replay buffer; they count
    towards no schedule, only towards the buffer's size.
    """
    config.validate()
    venv = make_venv(config.n_envs)
    try:
        with torch_threads(config.cpu_threads):
            return _train(venv, config, hooks or TrainHooks(), progress, state, prefill)
    finally:
        venv.close()


def _train(
    venv: VecEnv,
    config: TrainConfig,
    hooks: TrainHooks,
    progress: Callable[[int, int, dict[str, float]], None] | None,
    state: TrainState | None,
    prefill: Sequence[EpisodeRecorder] = (),
) -> TrainState:
    seed_everything(config.seed)
    shapes = check_env(venv)
    state = state or build_state(shapes, config)
    if state.buffer is None:
        state.buffer = ReplayBuffer(shapes, config.learner.buffer_size)
    buffer = state.buffer
    buffer.add_many(list(prefill))
    generator = torch.Generator().manual_seed(config.seed)
    collector = make_collector(venv, state, config, generator)
    recent: deque[float] = deque(maxlen=100)
    updates_due = 0.0
    rate = updates_per_episode(config)
    started = time.perf_counter()

    def ask(first: int) -> bool:
        """Ask for the batch that starts at episode ``first``; False when the run ends
        before it (its last episode, or the hooks' :meth:`TrainHooks.batch_size` says 0)."""
        if first >= config.episodes:
            return False
        n = hooks.batch_size(min(config.n_envs, config.episodes - first))
        if n < 1:
            return False
        epsilon = epsilon_at(config.exploration, first, config.episodes)
        collector.ask(list(range(first, first + n)), epsilon)
        return True

    try:
        asked = ask(state.episodes_done)
        while asked and not hooks.should_stop():
            # --- collect (the batch asked for last; ask for the next one before optimising,
            #     so that a child collector plays it meanwhile)
            epsilon = epsilon_at(config.exploration, state.episodes_done, config.episodes)
            results = collector.take()
            n = len(results)
            buffer.add_many([res.recorder for res in results])
            recent.extend(res.ret for res in results)
            state.episodes_done += n
            asked = ask(state.episodes_done)
            hooks.on_episodes(results, state, epsilon)

            # --- optimise
            updates_due += n * rate
            if buffer.size >= min(config.learner.batch_size, config.episodes):
                while updates_due >= 1.0:
                    batch = buffer.sample(config.learner.batch_size, generator).to(state.device)
                    stats = state.learner.train(batch)
                    stats.update(episode=state.episodes_done, epsilon=epsilon)
                    hooks.on_update(stats, state)
                    updates_due -= 1.0
            else:
                updates_due = 0.0
            # --- report
            summary = {
                "return_ma": float(np.mean(recent)),
                "epsilon": epsilon,
                "updates": state.learner.updates,
                "elapsed_s": time.perf_counter() - started,
            }
            state.history.append({"episode": state.episodes_done, **summary})
            if progress:
                progress(state.episodes_done, config.episodes, summary)
    finally:
        collector.close()
    return state


def make_collector(
    venv: VecEnv, state: TrainState, config: TrainConfig, generator: torch.Generator
) -> InlineCollector | ChildCollector:
    """A child collector when asked for and the environment never waits on a server; else
    the inline one, which shares ``generator`` with the batch sampling as it always has."""
    if config.collect_ahead and getattr(venv, "synchronous", True):
        # Its own exploration stream: this process keeps ``generator`` for sampling batches.
        explore = torch.Generator().manual_seed(config.seed + 1_000_003)
        return ChildCollector(venv, state.agent, state.mixer, config.explain, explore)
    policy = QMixPolicy(state.agent, state.mixer, state.device, generator=generator)
    return InlineCollector(venv, policy, config.explain)
