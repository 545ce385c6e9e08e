"""Does learning pay? Train the default policy on several seeds, then play it and every
fixed topology on the same held-out episodes, with paired standard errors.

For each training seed: ``agentqmix train``'s defaults (or the flags given), then greedy
decentralised evaluation on ``--eval-episodes`` held-out episodes of stream ``--eval-seed``
(a seed not used for tuning), the same episodes for every policy. Reported per seed:
accuracy, mean tokens, mean reward of the learned policy and of every fixed topology, the
paired difference of rewards to the best fixed topology (mean ± standard error over
episodes), and the same split by difficulty (easy ≤ 2, hard ≥ 4). ``--pass-through
unanimous`` trains and plays every policy, fixed ones included, under that rule.

    agentqmix bench learning --seeds 0,1,2 --eval-seed 1000 --eval-episodes 1000 --json

``--from-sweep DB`` computes the same report from a sweep's episode store instead of
training: the learned policies are the sweep's trials at ``--token-weight`` (default: the
default weight, so the trials are the default policy), the fixed topologies its fixed
runs, on the very held-out tasks the sweep played (checked task by task); rewards are
recomputed at that weight from each episode's score and tokens. ``--pass-through`` picks
the rule whose points are read, of a sweep that played several (``sweep --pass-through
off,unanimous``).

    agentqmix bench learning --from-sweep sweep.duckdb [--sweep-id ID] --json
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import Parser, float_in, int_in, run_main, user_errors
from core.errors import UserError
from core.experiment import TeamOptions, run_policy, train_team
from core.experiment.sweep_plan import parse_seeds
from core.qmix.policy import QMixPolicy
from core.records import EpisodeRecord
from core.tasks.registry import benchmark_domains
from core.team.options import options_from_dict
from core.team.recipes import TEAM_RECIPE, recipe_config, recipe_value
from core.team.runtime import reward
from core.team.settings import IDLE_RULES, PASS_THROUGH_RULES
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
    return compare(fixed, learned_records)


def compare(fixed: dict[str, list[Any]], learned_records: dict[int, list[Any]]) -> dict[str, Any]:
    """Per difficulty group, every fixed topology and learned policy on the same episodes
    (each record: ``score``, ``tokens``, ``reward``, ``difficulty``; lists in episode order)."""
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


@dataclass(frozen=True)
class Outcome:
    """What the report reads of one held-out episode."""

    task_id: str
    difficulty: int
    score: float
    tokens: int
    reward: float


def from_sweep(
    db: Path,
    sweep_id: str | None,
    token_weight: float,
    pass_through: str = TeamOptions.pass_through,
) -> dict[str, Any]:
    """The report for the trials at ``token_weight`` of sweep ``sweep_id`` (default: the
    newest in ``db``) against its fixed topologies, from the episodes the sweep logged under
    decision rule ``pass_through``."""
    from core.store.queries import (
        EpisodeFilter,
        get_run,
        list_episodes,
        list_sweeps,
        sweep_points,
    )

    if not db.is_file():
        raise UserError(f"--from-sweep: no episode store at {db}.")
    sweeps = list_sweeps(db)
    if sweeps.empty:
        raise UserError(f"--from-sweep: {db} holds no sweep.")
    sweep_id = sweep_id or str(sweeps["sweep_id"].iloc[0])
    if sweep_id not in set(sweeps["sweep_id"]):
        raise UserError(f"--sweep-id: {db} holds no sweep {sweep_id!r}.")
    points = sweep_points(db, sweep_id)
    rules = points["pass_through"].fillna(TeamOptions.pass_through)
    if not (rules == pass_through).any():
        raise UserError(
            f"--pass-through: sweep {sweep_id} played {', '.join(sorted(set(rules)))} only, "
            f"not {pass_through}."
        )
    points = points[rules == pass_through]
    # The sweep's own reward (penalty, budget) at the chosen weight.
    team = options_from_dict(get_run(db, str(points["run_id"].iloc[0])).config["team"])
    rule = replace(team, token_weight=token_weight).runtime_config()

    def outcomes(run_id: str) -> list[Outcome]:
        df = list_episodes(db, EpisodeFilter(run_ids=[run_id]), limit=10**9)
        return [
            Outcome(t, int(d), float(sc), int(tok), reward(float(sc), int(tok), rule))
            for t, d, sc, tok in zip(df.task_id, df.difficulty, df.score, df.tokens, strict=True)
        ]

    fixed_rows = points[points["token_weight"].isna()]
    trials = points[np.isclose(points["token_weight"].fillna(-1.0), token_weight)]
    if trials.empty:
        weights = sorted(set(points["token_weight"].dropna()))
        raise UserError(f"--token-weight: sweep {sweep_id} has trials at {weights} only.")
    fixed = {str(r.policy): outcomes(r.run_id) for r in fixed_rows.itertuples()}
    learned = {int(r.seed): outcomes(r.run_id) for r in trials.itertuples()}
    tasks = [o.task_id for o in fixed["single"]]
    for name, recs in [*fixed.items(), *((f"seed {s}", r) for s, r in learned.items())]:
        if [o.task_id for o in recs] != tasks:
            raise UserError(f"--from-sweep: {name} did not play the same held-out tasks.")
    return {
        "sweep_id": sweep_id,
        "seeds": sorted(learned),
        "token_weight": token_weight,
        "pass_through": pass_through,
        "eval_episodes": len(tasks),
        **compare(fixed, learned),
    }


def main(argv: list[str] | None = None) -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--from-sweep", type=Path, help="report from this sweep's store")
    parser.add_argument("--sweep-id", help="with --from-sweep: which sweep (default newest)")
    parser.add_argument("--seeds", default="0,1,2", help="training seeds")
    parser.add_argument("--benchmark", default="mixed")
    parser.add_argument(
        "--episodes", type=int_in(1, 10**9), default=recipe_value(TEAM_RECIPE, "episodes")
    )
    parser.add_argument(
        "--max-updates", type=int_in(0, 10**9), default=recipe_value(TEAM_RECIPE, "max_updates")
    )
    parser.add_argument(
        "--epsilon-anneal", type=float_in(1e-9, 1.0),
        default=recipe_value(TEAM_RECIPE, "exploration.anneal_fraction"),
        help="share of the training episodes over which ε falls (train's --epsilon-anneal)",
    )  # fmt: skip
    parser.add_argument("--token-weight", type=float_in(0.0, 1e6), default=TeamOptions.token_weight)
    parser.add_argument("--idle", choices=IDLE_RULES, default=TeamOptions.idle)
    parser.add_argument(
        "--pass-through", choices=PASS_THROUGH_RULES, default=TeamOptions.pass_through,
        help="the decision agent's rule, in training and for every policy evaluated",
    )  # fmt: skip
    parser.add_argument("--fail-prob", type=float_in(0.0, 0.99), default=0.0)
    parser.add_argument("--eval-seed", type=int_in(0, 2**62), default=1000)
    parser.add_argument("--eval-episodes", type=int_in(1, 10**6), default=1000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.from_sweep is not None:
        with user_errors():
            report = from_sweep(
                args.from_sweep, args.sweep_id, args.token_weight, args.pass_through
            )
            run_main(report, args.json)
        return
    with user_errors():
        seeds = parse_seeds(args.seeds)
        # Every flag of the team checked before the first seed trains (a bad --benchmark).
        TeamOptions(
            benchmark=args.benchmark, token_weight=args.token_weight, fail_prob=args.fail_prob,
            idle=args.idle, pass_through=args.pass_through,
        ).validate()  # fmt: skip
        benchmark_domains(args.benchmark, 0)  # loads the tasks: an unknown name is a sentence
    learned: dict[int, QMixPolicy] = {}
    timings = {}
    for seed in seeds:
        opts = TeamOptions(
            benchmark=args.benchmark, seed=seed, token_weight=args.token_weight,
            fail_prob=args.fail_prob, idle=args.idle, pass_through=args.pass_through,
        )  # fmt: skip
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            out = train_team(
                opts,
                recipe_config(
                    TEAM_RECIPE,
                    {
                        "episodes": args.episodes,
                        "max_updates": args.max_updates,
                        "exploration.anneal_fraction": args.epsilon_anneal,
                        "seed": seed,
                    },
                ),
                Path(tmp) / "policy.pt",
                log=False,
                eval_episodes=0,
            )
            timings[str(seed)] = round(time.perf_counter() - t0, 1)
        state = out.state
        learned[seed] = state.greedy_policy()
    eval_opts = TeamOptions(
        benchmark=args.benchmark, token_weight=args.token_weight, idle=args.idle,
        pass_through=args.pass_through,
    )  # fmt: skip
    learned_records = {
        seed: run_policy(eval_opts, policy, args.eval_episodes, args.eval_seed)
        for seed, policy in learned.items()
    }
    result = {
        "seeds": seeds,
        "episodes": args.episodes,
        "max_updates": args.max_updates,
        "epsilon_anneal": args.epsilon_anneal,
        "idle": args.idle,
        "pass_through": args.pass_through,
        "eval_seed": args.eval_seed,
        "eval_episodes": args.eval_episodes,
        "train_seconds": timings,
        **evaluate(eval_opts, learned_records, args.eval_episodes, args.eval_seed),
    }
    run_main(result, args.json)


if __name__ == "__main__":
    main()
