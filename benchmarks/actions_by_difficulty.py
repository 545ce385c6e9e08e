"""What a trained team does on easy and hard tasks: action counts and reward by difficulty.

Plays the checkpoint's greedy policy on held-out episodes (the same ones ``agentqmix
compare`` uses for the same ``--seed``) and prints one JSON object: per difficulty group
(easy = levels 1-2, medium = 3, hard = 4-5) and per domain/group, the number of episodes,
accuracy, mean tokens, mean reward and the action counts per round; plus the share of
episodes whose whole joint action sequence equals the most common one (1.0 = a constant
policy).

    python benchmarks/actions_by_difficulty.py --checkpoint CKPT --benchmark mixed --episodes 1000
"""

from __future__ import annotations

import argparse
import json
from collections import Counter

from core.actions import ACTION_NAMES
from core.experiment import TeamOptions, learned_policy, run_policy

GROUPS = {"easy": (1, 2), "medium": (3,), "hard": (4, 5)}


def _summary(records) -> dict:
    n_rounds = max(len(r.rounds) for r in records)
    counts = [dict.fromkeys(ACTION_NAMES, 0) for _ in range(n_rounds)]
    for rec in records:
        for rnd in rec.rounds:
            for step in rnd.steps:
                if step.alive and step.fault != "inactive":
                    counts[rnd.round][ACTION_NAMES[step.action]] += 1
    n = len(records)
    return {
        "n": n,
        "accuracy": round(sum(r.score for r in records) / n, 4),
        "mean_tokens": round(sum(r.tokens for r in records) / n, 1),
        "mean_reward": round(sum(r.reward for r in records) / n, 4),
        "action_counts_per_round": counts,
    }


def _joint(rec) -> tuple:
    return tuple(tuple(step.action for step in rnd.steps) for rnd in rec.rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--benchmark", default="mixed")
    parser.add_argument("--preset", default="flash-lite")
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    opts = TeamOptions(benchmark=args.benchmark, preset=args.preset, seed=args.seed)
    policy = learned_policy(args.checkpoint, opts, "cpu")
    records = run_policy(opts, policy, args.episodes, args.seed)
    out: dict = {"checkpoint": args.checkpoint, "episodes": len(records), "all": _summary(records)}
    for group, levels in GROUPS.items():
        chosen = [r for r in records if r.difficulty in levels]
        if chosen:
            out[group] = _summary(chosen)
    for domain in sorted({r.domain for r in records}):
        for group, levels in GROUPS.items():
            chosen = [r for r in records if r.domain == domain and r.difficulty in levels]
            if chosen:
                out[f"{domain}/{group}"] = _summary(chosen)
    joints = Counter(_joint(r) for r in records)
    top, count = joints.most_common(1)[0]
    out["distinct_joint_actions"] = len(joints)
    out["most_common_joint_share"] = round(count / len(records), 4)
    out["most_common_joint"] = [[ACTION_NAMES[a] for a in rnd] for rnd in top]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
