"""The same code paths on a GPU: a learner update matches the CPU's, training runs (with
the episode collector on the CPU, as a forked child must be). Skipped without CUDA."""

from __future__ import annotations

import copy

import pytest
import torch

from benchmarks.learner import random_batch
from core.qmix.encoders import AgentNetConfig, AgentNetwork
from core.qmix.env import SerialVecEnv
from core.qmix.games import RelayGame
from core.qmix.learner import LearnerConfig, QLearner
from core.qmix.mixers import MixerConfig, make_mixer
from core.qmix.seeding import resolve_device
from core.qmix.training import TrainConfig, train

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA GPU is visible to torch on this machine"
)


def test_auto_device_is_the_gpu():
    assert resolve_device("auto").type == "cuda"


def test_a_learner_update_on_the_gpu_matches_the_cpu():
    torch.manual_seed(0)
    agent = AgentNetwork(6, 3, 4, AgentNetConfig(gnn_hidden=32, gru_hidden=32, q_hidden=32))
    mixer = make_mixer(3, 10, MixerConfig(embed=16, hypernet_hidden=16))
    cpu = QLearner(agent, mixer, LearnerConfig(batch_size=8))
    gpu_dev = torch.device("cuda")
    gpu = QLearner(copy.deepcopy(agent).to(gpu_dev), copy.deepcopy(mixer).to(gpu_dev), cpu.config)
    batch = random_batch(8, 3, 3, 6, 10, 4, density=0.5)
    for _ in range(3):
        a, b = cpu.train(batch), gpu.train(batch.to(gpu_dev))
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-3, abs=1e-5)
    for p, q in zip(cpu.params, gpu.params, strict=True):
        torch.testing.assert_close(q.cpu(), p, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("collect_ahead", [True, False])
def test_training_runs_on_the_gpu(collect_ahead):
    def venv(width: int) -> SerialVecEnv:
        return SerialVecEnv([RelayGame() for _ in range(width)], seed=0)

    config = TrainConfig(
        episodes=64, device="cuda", n_envs=8, collect_ahead=collect_ahead,
        agent=AgentNetConfig(gnn_hidden=16, gru_hidden=16, q_hidden=16),
    )  # fmt: skip
    state = train(venv, config)
    assert state.device.type == "cuda" and state.learner.updates > 0
    assert all(p.is_cuda for p in state.agent.parameters())
