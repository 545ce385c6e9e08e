"""The fast paths of the team environment play exactly the episodes of the plain ones.

The synthetic society runs without an event loop (its calls never wait), many episodes
step in lockstep, graphs come from a cache, the replay buffer is written a rollout at a
time. Each must leave the same records as the general path: an event loop that really
switches between concurrent calls, and one episode at a time.
"""

from __future__ import annotations

import asyncio
import math

import pytest
import torch

from core.backends.base import AgentTurn, DecisionTurn, TurnResult
from core.backends.society import SimBackend
from core.qmix.encoders import AgentNetConfig, AgentNetwork
from core.qmix.mixers import MixerConfig, make_mixer
from core.qmix.policy import QMixPolicy
from core.team.env import TeamEnv
from core.team.options import TeamOptions
from core.team.topologies import make_policy
from tests.core.torch_threads import one_torch_thread  # noqa: F401


class WaitingSim:
    """The synthetic society behind a back-end that really waits: every call yields to the
    event loop first, so the team plays it with ``asyncio.gather`` and the calls of a layer
    (and of the episodes of a round) interleave as a server's would."""

    name = "sim"
    answers_are_programs = False
    synchronous = False
    sandbox = "auto"

    def __init__(self, preset: str = "flash-lite"):
        self.sim = SimBackend(preset)
        self.model = self.sim.model

    async def agent_turn(self, turn: AgentTurn) -> TurnResult:
        await asyncio.sleep(0)
        return self.sim.agent_turn_sync(turn)

    async def decide(self, turn: DecisionTurn) -> TurnResult:
        await asyncio.sleep(0)
        return self.sim.decide_sync(turn)

    async def aclose(self) -> None:
        return None


OPTS = TeamOptions(benchmark="mixed", seed=5, fail_prob=0.3)
EPISODES = range(24)


def learned_policy(env: TeamEnv, epsilon: float) -> QMixPolicy:
    torch.manual_seed(0)
    agent = AgentNetwork(env.obs_dim, env.n_agents, env.n_actions, AgentNetConfig(gnn_hidden=32))
    mixer = make_mixer(env.n_agents, env.state_dim, MixerConfig())
    generator = torch.Generator().manual_seed(1)
    return QMixPolicy(agent, mixer, torch.device("cpu"), epsilon=epsilon, generator=generator)


def play(backend, policy_of, width: int) -> list[dict]:
    env = TeamEnv(OPTS, "train", backend=backend)
    try:
        assert env.vectorized(width).synchronous == backend.synchronous
        return [r.to_dict() for r in env.run(policy_of(env), EPISODES, width=width)]
    finally:
        env.close()


@pytest.mark.parametrize("width", [1, 8])
def test_no_event_loop_gives_the_records_of_concurrent_calls(width):
    """Exploring learned policy (failures drawn by the curriculum): same records whether the
    calls run one after the other or interleave on the event loop."""

    def policy(env):
        return learned_policy(env, epsilon=0.3)

    fast = play(SimBackend("flash-lite"), policy, width)
    slow = play(WaitingSim(), policy, width)
    assert fast == slow
    assert len({r["seed"] for r in fast}) == len(EPISODES)


def assert_same(x, y, where: str = "record") -> None:
    """Equal, except floats, which may differ in their last bits (relative 1e-4)."""
    if isinstance(x, float) and isinstance(y, float):
        assert math.isclose(x, y, rel_tol=1e-4, abs_tol=1e-6), f"{where}: {x} != {y}"
    elif isinstance(x, dict) and isinstance(y, dict):
        assert x.keys() == y.keys(), where
        for k in x:
            assert_same(x[k], y[k], f"{where}.{k}")
    elif isinstance(x, list) and isinstance(y, list):
        assert len(x) == len(y), where
        for i, (a, b) in enumerate(zip(x, y, strict=True)):
            assert_same(a, b, f"{where}[{i}]")
    else:
        assert x == y, f"{where}: {x!r} != {y!r}"


@pytest.mark.parametrize("policy_name", ["greedy", "random", "full", "chain", "debate"])
def test_lockstep_gives_the_records_of_one_episode_at_a_time(policy_name):
    """24 episodes in lockstep on the fast path = the same episodes one at a time on the
    general path. The learned policy's Q-values and mixer weights come from a batched
    matmul whose last bits depend on the batch size; its decisions do not."""

    def policy(env):
        if policy_name == "greedy":
            return learned_policy(env, epsilon=0.0)
        return make_policy(policy_name)

    lockstep = play(SimBackend("flash-lite"), policy, width=24)
    one_by_one = play(WaitingSim(), policy, width=1)
    if policy_name == "greedy":
        assert_same(lockstep, one_by_one)
    else:
        assert lockstep == one_by_one
