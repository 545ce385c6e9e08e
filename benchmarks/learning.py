"""Does learning pay? Train the default policy on several seeds, then play it and every
fixed topology on the same held-out episodes, with paired standard errors.

For each training seed: ``agentqmix train``'s defaults (or the flags given), then greedy
decentralised evaluation on ``--eval-episodes`` held-out episodes of stream ``--eval-seed``
(a seed not used for tuning), the same episodes for every policy. Reported per seed:
accuracy, mean tokens, mean reward of the learned policy and of every fixed topology, the
paired difference of rewards to the best fixed topology (mean ± standard error over
episodes), and the same split by difficulty (easy ≤ 2, hard ≥ 4).

    agentqmix bench learning --seeds 0,1,2 --eval-seed 1000 --eval-episodes 1000 --json
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import run_main
from core.experiment import TeamOptions, run_policy, train_team
from core.qmix.policy import QMixPolicy
from core.qmix.training import TrainConfig
from core.records import EpisodeRecord
from core.team.runtime import IDLE_RULES
from core.team.topologies import FIXED_TOPOLOGIES, make_policy

GROUPS = {"all": (1, 2, 3, 4, 5), "easy": (1, 2), "hard": (4, 5)}
MULTI_AGENT = tuple(name for name in FIXED_TOPOLOGIES if name != "single")


def _figures(records: list[EpisodeRecord], mask: np.ndarray) -> dict[str, float]:
    chosen = [r for r, m in zip(records, mask, strict=True) if m]
    return {
        "accuracy": round(float(np.mean([r.score for r in chosen])), 4),
        "mean_tokens": round(float(np.mean([r.tokens for r in chosen])), 1),
        "mean_reward": round(float(np.mean([r.reward for r in chosen])), 4),
    }


def _paired(a: list[EpisodeRecord], b: list[EpisodeRecord], mask: np.ndarray) -> dict[str, float]:
    d = np.array([x.reward - y.reward for x, y in zip(a, b, strict=True)])[mask]
    return {
        "mean": round(float(d.mean()), 4),
        "se": round(float(d.std(ddof=1) / np.sqrt(len(d))), 4),
    }


def evaluate(
    opts: TeamOptions,
    learned_records: dict[int, list[EpisodeRecord]],
    episodes: int,
    eval_seed: int,
) -> dict[str, Any]:
    fixed = {
        name: run_policy(opts, make_policy(name), episodes, eval_seed) for name in FIXED_TOPOLOGIES
    }
    difficulty = np.array([r.difficulty for r in fixed["single"]])
    out: dict[str, Any] = {}
    for group, levels in GROUPS.items():
        mask = np.isin(difficulty, levels)
        rows = {name: _figures(recs, mask) for name, recs in fixed.items()}
        best = max(rows, key=lambda k: rows[k]["mean_reward"])
        best_acc = max(rows, key=lambda k: rows[k]["accuracy"])
        cheapest_multi = min(MULTI_AGENT, key=lambda k: rows[k]["mean_tokens"])
        entry: dict[str, Any] = {
            "n": int(mask.sum()),
            "fixed": rows,
            "best_fixed_by_reward": best,
            "best_fixed_by_accuracy": best_acc,
            "cheapest_multi_agent": cheapest_multi,
            "learned": {},
        }
        for seed, recs in learned_records.items():
            row = _figures(recs, mask)
            row["vs_best_fixed"] = _paired(recs, fixed[best], mask)
            row["accuracy_minus_best_fixed_accuracy"] = round(
                row["accuracy"] - rows[best_acc]["accuracy"], 4
            )
            row["tokens_over_cheapest_multi_agent"] = round(
                row["mean_tokens"] / rows[cheapest_multi]["mean_tokens"], 3
            )
            entry["learned"][str(seed)] = row
        out[group] = entry
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2", help="training seeds")
    parser.add_argument("--benchmark", default="mixed")
    parser.add_argument("--episodes", type=int, default=TrainConfig.episodes)
    parser.add_argument("--max-updates", type=int, default=TrainConfig.max_updates)
    parser.add_argument("--token-weight", type=float, default=TeamOptions.token_weight)
    parser.add_argument("--idle", choices=IDLE_RULES, default=TeamOptions.idle)
    parser.add_argument("--fail-prob", type=float, default=0.0)
    parser.add_argument("--eval-seed", type=int, default=1000)
    parser.add_argument("--eval-episodes", type=int, default=1000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    learned: dict[int, QMixPolicy] = {}
    timings = {}
    for seed in seeds:
        opts = TeamOptions(
            benchmark=args.benchmark, seed=seed, token_weight=args.token_weight,
            fail_prob=args.fail_prob, idle=args.idle,
        )  # fmt: skip
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            out = train_team(
                opts,
                TrainConfig(episodes=args.episodes, max_updates=args.max_updates, seed=seed),
                Path(tmp) / "policy.pt",
                log=False,
                eval_episodes=0,
            )
            timings[str(seed)] = round(time.perf_counter() - t0, 1)
        state = out.state
        learned[seed] = QMixPolicy(state.agent, state.mixer, state.device, epsilon=0.0)
    eval_opts = TeamOptions(
        benchmark=args.benchmark, token_weight=args.token_weight, idle=args.idle
    )
    learned_records = {
        seed: run_policy(eval_opts, policy, args.eval_episodes, args.eval_seed)
        for seed, policy in learned.items()
    }
    result = {
        "seeds": seeds,
        "episodes": args.episodes,
        "max_updates": args.max_updates,
        "idle": args.idle,
        "eval_seed": args.eval_seed,
        "eval_episodes": args.eval_episodes,
        "train_seconds": timings,
        **evaluate(eval_opts, learned_records, args.eval_episodes, args.eval_seed),
    }
    run_main(result, args.json)


if __name__ == "__main__":
    main()
