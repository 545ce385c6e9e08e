"""Collecting in a child process while the learner trains: same run for the same seed, the
episodes arrive in order, a stop or an error in the child ends it cleanly.

That learning survives the child's lag of one iteration is checked where the relay game is
trained anyway: tests/core/test_cli_foundation.py's ``relay_checkpoint`` trains with the
child collector (the default) and its team reaches the optimal greedy return."""

from __future__ import annotations

import multiprocessing

import pytest
import torch

from core.qmix.controller import ExplorationConfig
from core.qmix.encoders import AgentNetConfig
from core.qmix.env import EnvShapes, SerialVecEnv
from core.qmix.games import RelayGame
from core.qmix.learner import LearnerConfig
from core.qmix.policy import QMixPolicy
from core.qmix.runner import rollout
from core.qmix.seeding import seed_everything
from core.qmix.training import TrainConfig, TrainHooks, build_state, train
from tests.core.torch_threads import one_torch_thread  # noqa: F401


def relay_venv(width: int) -> SerialVecEnv:
    return SerialVecEnv([RelayGame() for _ in range(width)], seed=0)


def config(**kw) -> TrainConfig:
    base = dict(episodes=96, seed=0, device="cpu", n_envs=8, cpu_threads=1)
    base["agent"] = AgentNetConfig(gnn_hidden=16, gru_hidden=16)
    return TrainConfig(**{**base, **kw})


class Watch(TrainHooks):
    """Records the episodes as they arrive; asks to stop after ``stop_after`` batches."""

    def __init__(self, stop_after: int | None = None):
        self.seen: list[int] = []
        self.returns: list[float] = []
        self.batches, self.stop_after = 0, stop_after

    def on_episodes(self, results, state, epsilon) -> None:
        self.seen += [r.episode for r in results]
        self.returns += [r.ret for r in results]
        self.batches += 1

    def should_stop(self) -> bool:
        return self.stop_after is not None and self.batches >= self.stop_after


def weights(state) -> list[torch.Tensor]:
    return [p.detach().clone() for p in state.agent.parameters()]


def test_a_seed_fixes_the_run_and_episodes_arrive_in_order():
    runs = []
    for _ in range(2):
        hooks = Watch()
        state = train(relay_venv, config(), hooks=hooks)
        runs.append((hooks.seen, hooks.returns, weights(state), state.learner.updates))
    (seen, returns, w, updates), again = runs
    assert seen == list(range(96)) and updates > 0
    assert again[0] == seen and again[1] == returns and again[3] == updates
    assert all(torch.equal(a, b) for a, b in zip(w, again[2], strict=True))


class Keep(TrainHooks):
    def __init__(self):
        self.batches: list[list] = []

    def on_episodes(self, results, state, epsilon) -> None:
        self.batches.append(results)


def q_values(results) -> list:
    return [[v.q_values for v in r.views] for r in results]


def test_the_child_acts_with_the_weights_of_one_iteration_earlier():
    """Greedy runs that update after every batch: inline, batch 1 is played after batch 0's
    updates; ahead, it was asked for before them, so it is played by the initial network."""
    cfg = dict(episodes=24, exploration=ExplorationConfig(start=0.0, finish=0.0))
    cfg["learner"] = LearnerConfig(batch_size=8)
    inline, ahead = Keep(), Keep()
    train(relay_venv, config(collect_ahead=False, **cfg), hooks=inline)
    train(relay_venv, config(collect_ahead=True, **cfg), hooks=ahead)

    seed_everything(0)
    initial = build_state(EnvShapes.of(RelayGame()), config(**cfg))
    policy = QMixPolicy(initial.agent, initial.mixer, initial.device)
    by_initial = [q_values(rollout(relay_venv(8), policy, range(k, k + 8))) for k in (0, 8)]

    assert q_values(inline.batches[0]) == q_values(ahead.batches[0]) == by_initial[0]
    assert q_values(ahead.batches[1]) == by_initial[1]
    assert q_values(inline.batches[1]) != by_initial[1]


def test_stopping_ends_the_child_and_keeps_what_was_played():
    hooks = Watch(stop_after=3)
    state = train(relay_venv, config(collect_ahead=True), hooks=hooks)
    assert state.episodes_done == 24 and hooks.seen == list(range(24))
    assert not multiprocessing.active_children()


class Breaks(RelayGame):
    def step(self, actions):
        if self.t == 1:
            raise ValueError("the environment broke at t=1")
        return super().step(actions)


def test_an_error_in_the_child_is_raised_here():
    def venv(width: int) -> SerialVecEnv:
        return SerialVecEnv([Breaks() for _ in range(width)], seed=0)

    with pytest.raises(ValueError, match="broke at t=1"):
        train(venv, config(collect_ahead=True))
    assert not multiprocessing.active_children()


def test_a_prefilled_buffer_updates_from_the_first_batch():
    """``prefill``: episodes of another source start the buffer, so a run of fewer episodes
    than a batch updates once per episode from the first batch on; without it, only once
    every episode is in (a run shorter than a batch waits for all of it)."""
    cfg = config(episodes=6, n_envs=2, collect_ahead=False)
    cfg.learner = LearnerConfig(batch_size=8, updates_per_episode=1.0)
    stand_in = build_state(EnvShapes.of(relay_venv(1)), cfg)
    prefill = [
        r.recorder for r in rollout(relay_venv(8), QMixPolicy(stand_in.agent, stand_in.mixer,
                                    stand_in.device, epsilon=1.0), list(range(8)))
    ]  # fmt: skip
    assert train(relay_venv, cfg).learner.updates == 2  # the last batch's two
    assert train(relay_venv, cfg, prefill=prefill).learner.updates == 6
