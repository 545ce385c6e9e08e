"""Calibration of the synthetic society: accuracy and tokens per fixed topology and difficulty.

Prints one JSON object: for every preset and fixed topology, accuracy / mean tokens /
mean reward over the same seeded tasks of a benchmark, grouped by difficulty (easy = 1-2,
medium = 3, hard = 4-5) and by domain; the best topology by mean reward per group; and
the full-mesh / single token ratio. Compare with /work/shared/CALIBRATION.md and
docs/simulator.md.

    agentqmix bench sim-calibration --benchmark mixed --episodes 600
    agentqmix bench sim-calibration --speed   # ms of Python per 4x3 sim episode
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from benchmarks.common import Parser, float_in, int_in, user_errors
from core.backends.society import PRESETS
from core.team.env import TeamEnv
from core.team.options import TeamOptions
from core.team.topologies import FIXED_TOPOLOGIES, make_policy

GROUPS = {"easy": (1, 2), "medium": (3,), "hard": (4, 5)}


def summarise(records) -> dict:
    return {
        "n": len(records),
        "accuracy": round(statistics.mean(r.score for r in records), 4),
        "mean_tokens": round(statistics.mean(r.tokens for r in records), 1),
        "mean_reward": round(statistics.mean(r.reward for r in records), 4),
    }


def calibrate(preset: str, benchmark: str, episodes: int, seed: int, token_weight: float) -> dict:
    opts = TeamOptions(benchmark=benchmark, preset=preset, seed=seed, token_weight=token_weight)
    opts.validate()
    env = TeamEnv(opts)
    out: dict = {"token_budget": env.runtime_config.token_budget, "topologies": {}}
    seconds = 0.0
    for name in FIXED_TOPOLOGIES:
        start = time.perf_counter()
        records = env.run(make_policy(name), range(episodes), width=16)
        seconds += time.perf_counter() - start
        row = {"all": summarise(records)}
        for group, levels in GROUPS.items():
            chosen = [r for r in records if r.difficulty in levels]
            if chosen:
                row[group] = summarise(chosen)
        for domain in sorted({r.domain for r in records}):
            for group, levels in GROUPS.items():
                chosen = [r for r in records if r.domain == domain and r.difficulty in levels]
                if chosen:
                    row[f"{domain}/{group}"] = summarise(chosen)
        out["topologies"][name] = row
    topo = out["topologies"]
    out["best_by_reward"] = {
        group: max(
            topo, key=lambda t, g=group: topo[t].get(g, {}).get("mean_reward", float("-inf"))
        )
        for group in ("all", *GROUPS)
    }
    out["full_over_single_tokens"] = round(
        topo["full"]["all"]["mean_tokens"] / topo["single"]["all"]["mean_tokens"], 2
    )
    out["full_mesh_mean_tokens"] = topo["full"]["all"]["mean_tokens"]
    out["ms_per_episode"] = round(1000 * seconds / (episodes * len(FIXED_TOPOLOGIES)), 3)
    env.close()
    return out


def speed(episodes: int) -> dict:
    """Milliseconds per 4-agent x 3-round episode, one episode at a time."""
    env = TeamEnv(TeamOptions(benchmark="mixed"))
    env.run(make_policy("full"), range(episodes))  # warm the task and embedding caches
    out = {}
    for name in ("single", "full", "random"):
        start = time.perf_counter()
        env.run(make_policy(name), range(episodes), width=1)
        out[f"run/{name}"] = round(1000 * (time.perf_counter() - start) / episodes, 3)
    start = time.perf_counter()
    for k in range(episodes):
        env.reset(seed=k)
        done = False
        while not done:
            _, _, done, _ = env.step([3, 1, 2, 4])
    out["env_reset_step"] = round(1000 * (time.perf_counter() - start) / episodes, 3)
    env.close()
    return {"ms_per_episode": out, "episodes": episodes}


def main() -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--benchmark", default="mixed")
    parser.add_argument("--episodes", type=int_in(1, 10**6), default=600)
    parser.add_argument("--seed", type=int_in(0, 2**63 - 1), default=0)
    parser.add_argument("--token-weight", type=float_in(0.0, 1e6), default=0.1)
    parser.add_argument("--preset", action="append", choices=list(PRESETS), help="default: all")
    parser.add_argument("--speed", action="store_true", help="time episodes instead")
    args = parser.parse_args()
    if args.speed:
        print(json.dumps(speed(args.episodes), indent=1))
        return
    presets = args.preset or list(PRESETS)
    with user_errors():
        result = _calibrate_all(args, presets)
    print(json.dumps(result, indent=1))


def _calibrate_all(args: argparse.Namespace, presets: list[str]) -> dict:
    return {
        "benchmark": args.benchmark,
        "episodes": args.episodes,
        "seed": args.seed,
        "token_weight": args.token_weight,
        "presets": {
            p: calibrate(p, args.benchmark, args.episodes, args.seed, args.token_weight)
            for p in presets
        },
    }


if __name__ == "__main__":
    main()
