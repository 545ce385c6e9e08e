"""Learned-topology methods beside Agent Q-Mix and the fixed topologies, on the same
held-out episodes: paired standard errors, figures by difficulty, and the graphs each
policy played (docs/baselines.md, "Results").

Every ``--checkpoint`` (any family: ``agentqmix train`` or ``train --method ...``) and every
fixed topology plays held-out episodes ``0..K-1`` of stream ``--eval-seed`` (use one not
tuned on: the methods' defaults were chosen on training seed 100 / stream 300, and stream
1000 has been looked at). Reported per policy: accuracy, mean tokens and mean reward with
95 % intervals; the same for easy (difficulty ≤ 2) and hard (≥ 4) tasks; per difficulty the
mean spatial edges, temporal reads and active agents per round and the most common
round-0 edge set (what a per-query method such as G-Designer adapts); paired differences
(mean ± standard error over the same episodes) of reward, accuracy and tokens between every
learned policy and the first Agent Q-Mix checkpoint, to the best fixed topology and to
``full`` (what AgentPrune and AgentDropout claim to cut tokens against).
``--untrained METHOD`` adds a method at its starting point (every edge at p = 0.5,
sampled): GPTSwarm's claim is measured against it.

    agentqmix bench baselines --checkpoint qmix.pt --checkpoint gptswarm.pt \\
        --eval-seed 2000 --episodes 1000 --json
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import Parser, float_in, int_in, run_main, user_errors
from core.experiment.evaluate import learned_policy, run_policy
from core.experiment.methods import new_method
from core.experiment.policies import (
    PolicyInfo,
    describe,
    paired_difference,
    point_stats,
    unique_labels,
)
from core.records import EpisodeRecord
from core.team.options import TeamOptions
from core.team.topologies import FIXED_TOPOLOGIES, make_policy

GROUPS = {"easy": (1, 2), "hard": (4, 5)}


def graph_of(record: EpisodeRecord) -> dict[str, float]:
    """Per round on average: spatial edges kept, temporal reads (messages on no edge of
    the round), agents that made a call."""
    spatial, temporal, active = [], [], []
    for rnd in record.rounds:
        edges = set(rnd.edges)
        spatial.append(len(edges))
        temporal.append(sum((m.src, m.dst) not in edges for m in rnd.messages))
        active.append(sum(s.tokens > 0 for s in rnd.steps))
    return {
        "spatial_edges": float(np.mean(spatial)),
        "temporal_reads": float(np.mean(temporal)),
        "calling_agents": float(np.mean(active)),
    }


def by_difficulty(records: list[EpisodeRecord]) -> dict[str, Any]:
    """Per difficulty 1..5: episodes, accuracy, tokens, graph figures, top round-0 edge set."""
    out = {}
    for d in range(1, 6):
        chosen = [r for r in records if r.difficulty == d]
        if not chosen:
            continue
        graphs = [graph_of(r) for r in chosen]
        top, n = Counter(tuple(r.rounds[0].edges) for r in chosen).most_common(1)[0]
        out[str(d)] = {
            "episodes": len(chosen),
            "accuracy": round(float(np.mean([r.score for r in chosen])), 4),
            "mean_tokens": round(float(np.mean([r.tokens for r in chosen])), 1),
            **{k: round(float(np.mean([g[k] for g in graphs])), 3) for k in graphs[0]},
            "top_round0_edges": [list(e) for e in top],
            "top_share": round(n / len(chosen), 3),
        }
    return out


def compare(
    opts: TeamOptions, checkpoints: list[Path], untrained: list[str], episodes: int, seed: int
) -> dict[str, Any]:
    import torch

    from core.baselines.policy import GraphPolicy
    from core.baselines.registry import method_config

    learned = unique_labels([learned_policy(c, opts, "cpu") for c in checkpoints])
    for name in untrained:
        method = new_method(name, method_config(name, {"decode": "sample"}), opts, seed=0)
        generator = torch.Generator().manual_seed(seed)
        policy = GraphPolicy(method, generator=generator, label=f"{name} (untrained)")
        policy.info = PolicyInfo(policy.name, "learned", name, None, {}, None)
        learned.append(policy)
    fixed = [make_policy(n) for n in FIXED_TOPOLOGIES]
    played = {p.name: run_policy(opts, p, episodes, seed) for p in learned + fixed}
    tasks = {name: [r.task_id for r in recs] for name, recs in played.items()}
    first = next(iter(tasks.values()))
    assert all(t == first for t in tasks.values()), "policies played different tasks"

    policies = {}
    for policy in learned + fixed:
        recs = played[policy.name]
        row = {**describe(policy).as_dict(), **point_stats(recs)}
        for group, levels in GROUPS.items():
            part = [r for r in recs if r.difficulty in levels]
            row[group] = {k: v for k, v in point_stats(part).items() if k != "n"} | {"n": len(part)}
        row["graph"] = {
            k: round(float(np.mean([graph_of(r)[k] for r in recs])), 3)
            for k in ("spatial_edges", "temporal_reads", "calling_agents")
        }
        row["by_difficulty"] = by_difficulty(recs)
        policies[policy.name] = row

    best_fixed = max((p.name for p in fixed), key=lambda n: policies[n]["mean_reward"])
    qmix = next((p.name for p in learned if describe(p).method == "qmix"), None)
    paired = {}
    for policy in learned:
        name = policy.name
        entry = {
            "vs_best_fixed": _paired(played[name], played[best_fixed]),
            # The papers' own claims (AgentPrune, AgentDropout) are against the full graph.
            "vs_full": _paired(played[name], played["full"]),
        }
        if qmix and name != qmix:
            entry["qmix_minus_this"] = _paired(played[qmix], played[name])
        paired[name] = entry
    return {
        "benchmark": opts.benchmark,
        "eval_seed": seed,
        "episodes": episodes,
        "token_weight": opts.token_weight,
        # Which protocol this is (docs/baselines.md, "Protocols"): the team's action set; a
        # method verifies only if its checkpoint was trained with tools=true.
        "actions": opts.actions,
        "best_fixed": best_fixed,
        "policies": policies,
        "paired": paired,
    }


def _paired(a: list[EpisodeRecord], b: list[EpisodeRecord]) -> dict[str, Any]:
    """Paired differences ``a − b`` over the same episodes, ± standard errors."""
    return {
        key: {k: round(v, 4) for k, v in paired_difference(
            [getattr(x, attr) for x in a], [getattr(y, attr) for y in b]
        ).items()}
        for key, attr in (("reward", "reward"), ("accuracy", "score"), ("tokens", "tokens"))
    }  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = Parser(prog="agentqmix bench baselines", description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", type=Path, action="append", default=[])
    parser.add_argument("--untrained", action="append", default=[], help="a method at p = 0.5")
    parser.add_argument("--benchmark", default="mixed")
    parser.add_argument("--episodes", type=int_in(1, 100_000), default=1000)
    parser.add_argument("--eval-seed", type=int_in(0, 2**62), default=2000)
    parser.add_argument("--token-weight", type=float_in(0.0, 1e6), default=None)
    parser.add_argument("--fail", default="", help="failures injected in every episode")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with user_errors():
        from core.baselines.names import METHOD_NAMES
        from core.errors import UserError

        for name in args.untrained:
            if name not in METHOD_NAMES:
                raise UserError(f"--untrained takes {', '.join(METHOD_NAMES)}, not {name!r}.")
        opts = TeamOptions(benchmark=args.benchmark, seed=args.eval_seed, failures=args.fail)
        if args.token_weight is not None:
            opts = replace(opts, token_weight=args.token_weight)
        opts.validate()
        result = compare(opts, args.checkpoint, args.untrained, args.episodes, args.eval_seed)
    run_main(result)


if __name__ == "__main__":
    main()
