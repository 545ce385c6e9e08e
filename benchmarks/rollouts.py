"""Rollout episodes per second of the learned policy on the synthetic society, against the
number of episodes stepped in lockstep.

    agentqmix bench rollouts [--widths 1,8,32,128] [--episodes 256] [--repeats 3] [--agents 4]
        [--rounds 3] [--benchmark mixed] [--device cpu] [--no-explain] [--json]

The policy is the greedy learned one with untrained weights (its cost does not depend on
what it learned); every episode goes through the one rollout path
(:func:`core.qmix.runner.rollout`) and, as in training, into a replay buffer. The task
source is generated and every task seen once before the clock starts: a training run cycles
through its split's few hundred tasks many times, so that is the steady state.

Prints one JSON object (with ``--json``; a line otherwise).
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from typing import Any

from benchmarks.common import Parser, int_in, run_main, user_errors
from core.qmix.buffer import ReplayBuffer
from core.qmix.encoders import AgentNetConfig, AgentNetwork
from core.qmix.env import EnvShapes
from core.qmix.mixers import MixerConfig, make_mixer
from core.qmix.policy import QMixPolicy
from core.qmix.runner import rollout_all
from core.qmix.seeding import resolve_device, seed_everything, torch_threads
from core.team.env import TeamEnv
from core.team.options import TeamOptions
from core.team.runtime import DEFAULT_ROLES

WIDTHS = (1, 8, 32, 128)


def team_options(n_agents: int, rounds: int, benchmark: str) -> TeamOptions:
    """The default team with ``n_agents`` agents (the default roles, repeated) and ``rounds``."""
    roles = tuple(DEFAULT_ROLES[i % len(DEFAULT_ROLES)] for i in range(n_agents))
    return replace(TeamOptions(benchmark=benchmark), roles=roles, rounds=rounds)


def replay_bytes(shapes: EnvShapes) -> int:
    """Bytes one episode takes in the replay buffer (its tensors, :mod:`core.qmix.buffer`):
    the state is every agent's observation, so it grows as ``N * (N + ...)``."""
    n, a, t = shapes.n_agents, shapes.n_actions, shapes.max_steps
    per_obs = 4 * (n * shapes.obs_dim + shapes.state_dim) + n * n + n * a  # floats, bools
    return (t + 1) * per_obs + t * (8 * n + 3 * 4)


def rollout_benchmark(
    widths: tuple[int, ...] = WIDTHS,
    episodes: int = 256,
    n_agents: int = 4,
    rounds: int = 3,
    benchmark: str = "mixed",
    device: str = "cpu",
    explain: bool = True,
    repeats: int = 3,
) -> dict[str, Any]:
    """Episodes per second at each width, on the same ``episodes`` episodes of the stream,
    ``repeats`` times each (interleaved, so a burst of load hits every width alike)."""
    opts = team_options(n_agents, rounds, benchmark)
    opts.validate()
    dev = resolve_device(device)
    team = TeamEnv(opts, "train")
    try:
        with torch_threads(1):
            seed_everything(0)
            shapes = EnvShapes.of(team)
            agent = AgentNetwork(shapes.obs_dim, n_agents, shapes.n_actions, AgentNetConfig())
            mixer = make_mixer(n_agents, shapes.state_dim, MixerConfig())
            policy = QMixPolicy(agent.to(dev), mixer.to(dev), dev, epsilon=0.0)
            buffer = ReplayBuffer(shapes, episodes)  # sized to what is played, not training's

            def play(width: int) -> float:
                start = time.perf_counter()
                results = rollout_all(
                    team.vectorized(width), policy, range(episodes), width, explain
                )
                buffer.add_many([r.recorder for r in results])
                return time.perf_counter() - start

            play(max(widths))  # tasks generated, embedded and modelled once, as in training
            load = os.getloadavg()
            seconds: dict[int, list[float]] = {w: [] for w in widths}
            for _ in range(repeats):
                for width in widths:
                    seconds[width].append(play(width))
            rows = [
                {
                    "width": w,
                    "seconds": [round(x, 3) for x in seconds[w]],
                    # On a shared machine the fastest pass is the one least disturbed.
                    "episodes_per_s": round(episodes / min(seconds[w]), 1),
                    "episodes_per_s_median": round(episodes / sorted(seconds[w])[repeats // 2], 1),
                }
                for w in widths
            ]
    finally:
        team.close()
    return {
        "benchmark": "rollouts",
        "tasks": benchmark,
        "backend": opts.backend,
        "n_agents": n_agents,
        "rounds": rounds,
        "device": str(dev),
        "policy": "greedy learned (untrained weights)",
        "explain": explain,
        "episodes": episodes,
        "repeats": repeats,
        "torch_threads": 1,
        "replay_buffer_mb_per_1000_episodes": round(replay_bytes(shapes) * 1000 / 2**20, 1),
        "widths": rows,
        "load_average": [round(x, 2) for x in load],
    }


def main(argv: list[str] | None = None) -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", default=",".join(map(str, WIDTHS)))
    parser.add_argument("--episodes", type=int_in(1, 10**6), default=256)
    parser.add_argument("--repeats", type=int_in(1, 1000), default=3)
    parser.add_argument("--agents", type=int_in(1, 64), default=4)
    parser.add_argument("--rounds", type=int_in(1, 64), default=3)
    parser.add_argument("--benchmark", default="mixed")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--no-explain", action="store_true", help="skip the mixer's view")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    try:
        widths = tuple(int(w) for w in args.widths.split(","))
    except ValueError:
        parser.error(f"--widths must be comma-separated integers, not {args.widths!r}")
    if min(args.episodes, args.repeats, *widths) < 1:
        parser.error("--episodes, --repeats and every width must be at least 1")
    with user_errors():
        result = rollout_benchmark(
            widths,
            args.episodes,
            args.agents,
            args.rounds,
            args.benchmark,
            args.device,
            not args.no_explain,
            args.repeats,
        )
    best = max(result["widths"], key=lambda r: r["episodes_per_s"])
    line = f"{best['episodes_per_s']} episodes/s at width {best['width']} on {result['device']}"
    run_main(result, args.json, line)


if __name__ == "__main__":
    main()
