"""How many different graphs a learned policy plays over held-out tasks: the round-0 plan
(spatial edges and verify flags) of each episode, counted overall, per domain and per
difficulty. A graph designed per query (G-Designer's claim) shows many; one graph per
seed shows one.

    agentqmix bench graphs-per-query --checkpoint A.pt --checkpoint B.pt --actions graph \
        --seed 5000 --episodes 300
"""

from __future__ import annotations

import json
from collections import Counter

from benchmarks.common import Parser, int_in, user_errors
from core.errors import UserError
from core.experiment import TeamOptions, learned_policy, run_policy


def _plan(record) -> tuple:
    """Round 0 as played: its edges (sorted) and who verified."""
    rnd = record.rounds[0]
    return tuple(sorted(map(tuple, rnd.edges))), tuple(s.action for s in rnd.steps)


def _count(plans: list[tuple]) -> dict:
    counts = Counter(plans)
    top = counts.most_common(1)[0][1]
    return {
        "episodes": len(plans),
        "distinct": len(counts),
        "top_share": round(top / len(plans), 4),
    }


def count_graphs(records) -> dict:
    """``{"all": {...}, "domain=D": {...}, "difficulty=K": {...}}``: episodes, distinct
    round-0 plans, share of the most common; for all episodes also the mean reward and
    tokens they earned (so two decode rules can be compared on the same tasks)."""
    plans = [_plan(r) for r in records]
    out = {
        "all": {
            **_count(plans),
            "reward": round(sum(r.reward for r in records) / len(records), 4),
            "tokens": round(sum(r.tokens for r in records) / len(records), 1),
        }
    }
    for key in ("domain", "difficulty"):
        for value in sorted({getattr(r, key) for r in records}):
            chosen = [p for p, r in zip(plans, records, strict=True) if getattr(r, key) == value]
            out[f"{key}={value}"] = _count(chosen)
    return out


def _redecode(policy, decode: str, checkpoint: str) -> None:
    """Play a learned-topology checkpoint with another decode rule (``sample``: as the
    released G-Designer evaluates)."""
    method = getattr(policy, "method", None)
    if method is None:
        raise UserError(f"--decode applies to learned-topology checkpoints; {checkpoint} is not.")
    if decode not in method.config.decodes:
        raise UserError(f"--decode must be one of {', '.join(method.config.decodes)}.")
    method.config.decode = decode


def main() -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", action="append", required=True)
    parser.add_argument("--benchmark", default="mixed")
    parser.add_argument("--actions", default="all", help="the team's action set (graph, all)")
    parser.add_argument("--decode", default=None, help="override a graph method's decode rule")
    parser.add_argument("--episodes", type=int_in(1, 10**6), default=300)
    parser.add_argument("--seed", type=int_in(0, 2**63 - 1), default=5000)
    args = parser.parse_args()
    opts = TeamOptions(benchmark=args.benchmark, seed=args.seed, actions=args.actions)
    out = []
    with user_errors():
        opts.validate()
        for checkpoint in args.checkpoint:
            policy = learned_policy(checkpoint, opts, "cpu")
            if args.decode is not None:
                _redecode(policy, args.decode, checkpoint)
            records = run_policy(opts, policy, args.episodes, args.seed)
            out.append({"checkpoint": checkpoint, **count_graphs(records)})
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
