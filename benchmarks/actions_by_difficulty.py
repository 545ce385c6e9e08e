"""What a trained team does on easy and hard tasks: action counts and reward by difficulty.

Plays the checkpoint's greedy policy on held-out episodes (the same ones ``agentqmix
compare`` uses for the same ``--seed``) and prints one JSON object: per difficulty group
(easy = levels 1-2, medium = 3, hard = 4-5) and per domain/group, the number of episodes,
accuracy, mean tokens, mean reward and the action counts per round; plus the share of
episodes whose whole joint action sequence equals the most common one (1.0 = a constant
policy).

    agentqmix bench actions-by-difficulty --checkpoint CKPT --benchmark mixed --episodes 1000
"""

from __future__ import annotations

import json
from collections import Counter

from benchmarks.common import Parser, int_in, user_errors
from core.actions import ACTION_NAMES
from core.experiment import TeamOptions, learned_policy, run_policy
from core.team.summary import summarize_records

GROUPS = {"easy": (1, 2), "medium": (3,), "hard": (4, 5)}


def _summary(records) -> dict:
    row = summarize_records(records)
    return {
        "n": row["episodes"],
        **{k: round(row[k], 4) for k in ("accuracy", "mean_tokens", "mean_reward")},
        "action_counts_per_round": row["action_counts_per_round"],
    }


def _joint(rec) -> tuple:
    return tuple(tuple(step.action for step in rnd.steps) for rnd in rec.rounds)


def main() -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--benchmark", default="mixed")
    parser.add_argument("--preset", default="flash-lite")
    parser.add_argument("--episodes", type=int_in(1, 10**6), default=1000)
    parser.add_argument("--seed", type=int_in(0, 2**63 - 1), default=0)
    args = parser.parse_args()
    opts = TeamOptions(benchmark=args.benchmark, preset=args.preset, seed=args.seed)
    with user_errors():
        opts.validate()
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
