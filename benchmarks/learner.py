"""Learner updates per second at the default network sizes, on random episodes.

    agentqmix bench learner [--agents 3] [--batch 32] [--rounds 3] [--seconds 5] [--json]

Prints one JSON object (with ``--json``; a line otherwise).
"""

from __future__ import annotations

import time

import torch

from benchmarks.common import Parser, float_in, int_in, run_main, user_errors
from core.qmix.buffer import EpisodeBatch
from core.qmix.encoders import AgentNetConfig, AgentNetwork
from core.qmix.learner import LearnerConfig, QLearner
from core.qmix.mixers import MIXERS, MixerConfig, make_mixer
from core.qmix.seeding import resolve_device, seed_everything, torch_threads


def random_batch(
    batch: int,
    rounds: int,
    n_agents: int,
    obs_dim: int,
    state_dim: int,
    n_actions: int,
    density: float,
) -> EpisodeBatch:
    """A batch of random episodes with random round graphs of the given edge density."""
    t = rounds
    adj = torch.rand(batch, t + 1, n_agents, n_agents) < density
    adj &= ~torch.eye(n_agents, dtype=torch.bool)
    return EpisodeBatch(
        obs=torch.randn(batch, t + 1, n_agents, obs_dim),
        state=torch.randn(batch, t + 1, state_dim),
        adj=adj,
        avail=torch.ones(batch, t + 1, n_agents, n_actions, dtype=torch.bool),
        actions=torch.randint(0, n_actions, (batch, t, n_agents)),
        reward=torch.randn(batch, t),
        terminated=torch.zeros(batch, t).index_fill_(1, torch.tensor([t - 1]), 1.0),
        filled=torch.ones(batch, t),
    )


def learner_benchmark(
    n_agents: int = 3,
    batch: int = 32,
    rounds: int = 3,
    device: str = "auto",
    obs_dim: int = 96,
    n_actions: int = 6,
    density: float = 0.5,
    seconds: float = 5.0,
    mixer: str = "qmix",
    threads: int = 0,
) -> dict:
    """Learner updates per second at the default network sizes on random data."""
    with torch_threads(threads):
        return _learner_benchmark(
            n_agents, batch, rounds, device, obs_dim, n_actions, density, seconds, mixer
        )


def _learner_benchmark(
    n_agents: int,
    batch: int,
    rounds: int,
    device: str,
    obs_dim: int,
    n_actions: int,
    density: float,
    seconds: float,
    mixer: str,
) -> dict:
    seed_everything(0)
    dev = resolve_device(device)
    state_dim = n_agents * obs_dim + 16
    agent = AgentNetwork(obs_dim, n_agents, n_actions, AgentNetConfig()).to(dev)
    mix = make_mixer(n_agents, state_dim, MixerConfig(kind=mixer)).to(dev)
    learner = QLearner(agent, mix, LearnerConfig(batch_size=batch))
    data = random_batch(batch, rounds, n_agents, obs_dim, state_dim, n_actions, density).to(dev)
    for _ in range(3):  # warm-up
        learner.train(data)
    if dev.type == "cuda":
        torch.cuda.synchronize()
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        learner.train(data)
        steps += 1
    if dev.type == "cuda":
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    return {
        "benchmark": "learner",
        "n_agents": n_agents,
        "batch": batch,
        "rounds": rounds,
        "device": str(dev),
        "mixer": mixer,
        "edge_density": density,
        "torch_threads": torch.get_num_threads(),
        "updates": steps,
        "seconds": round(elapsed, 3),
        "train_steps_per_s": round(steps / elapsed, 2),
    }


def main(argv: list[str] | None = None) -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int_in(1, 64), default=3)
    parser.add_argument("--batch", type=int_in(1, 4096), default=32)
    parser.add_argument("--rounds", type=int_in(1, 64), default=3)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--seconds", type=float_in(0.01, 3600), default=5.0)
    parser.add_argument("--threads", type=int_in(0, 256), default=0, help="0 = torch's default")
    parser.add_argument("--mixer", default="qmix", choices=list(MIXERS))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with user_errors():
        result = learner_benchmark(
            n_agents=args.agents,
            batch=args.batch,
            rounds=args.rounds,
            device=args.device,
            seconds=args.seconds,
            threads=args.threads,
            mixer=args.mixer,
        )
    run_main(
        result, args.json, f"{result['train_steps_per_s']} learner updates/s on {result['device']}"
    )


if __name__ == "__main__":
    main()
