"""How much a task-adaptive policy could gain: the oracle, a hand-written adaptive plan and
the best fixed plan, on the same seeded held-out episodes.

For every episode, every *joint plan* of a family (per round one of the round templates
below, for every round: 7^3 = 343 plans on 3 rounds) is played on the same seeded
episode. The **oracle** takes, per episode, the plan with the highest reward in hindsight
(an upper bound no policy reaches: it knows the dice); the **best fixed plan** is the one
plan with the highest mean reward over all episodes; the **adaptive** plan is written by
hand from what agents observe (answer alone first; keep quiet when the team already
agrees; otherwise debate, then verify). Alongside: every fixed topology.

    agentqmix bench headroom --episodes 300 --seed 7 --json
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from benchmarks.common import Parser, float_in, int_in, run_main, user_errors
from core.actions import Action
from core.backends.society import PRESETS
from core.team.env import TeamEnv
from core.team.options import TeamOptions
from core.team.plan import RoundPlan
from core.team.summary import summarize_records
from core.team.topologies import FIXED_TOPOLOGIES, make_policy

S, B, Q, A, V, D = (int(a) for a in Action)
TEMPLATES = {
    "solo": (S, S, S, S),
    "verify": (V, V, V, V),
    "debate": (D, D, D, D),
    "aggregate": (A, A, A, A),
    "star": (A, S, S, S),
    "query": (Q, Q, Q, Q),
    "verify+aggregate": (V, V, V, A),
}
GROUPS = {"easy": (1, 2), "medium": (3,), "hard": (4, 5)}


class PlanPolicy:
    """The same joint plan in every episode."""

    def __init__(self, rounds: tuple[str, ...]):
        self.rounds, self.name = rounds, "/".join(rounds)

    def begin(self, n_agents: int, seed: int) -> Any:
        return n_agents

    def plan(self, obs: dict, round_index: int, memory: Any) -> tuple[RoundPlan, Any]:
        template = TEMPLATES[self.rounds[round_index]]
        return RoundPlan(actions=[template[i % 4] for i in range(memory)]), memory


class AdaptivePolicy:
    """Answer alone; stay quiet once everyone agrees; otherwise debate, then verify."""

    name = "adaptive (hand-written)"

    def __init__(self, obs_dim: int):
        self.consensus = obs_dim - 3 - 2 - 2  # docs/team.md, Observation

    def begin(self, n_agents: int, seed: int) -> Any:
        return n_agents

    def plan(self, obs: dict, round_index: int, memory: Any) -> tuple[RoundPlan, Any]:
        n = memory
        if round_index == 0:
            return RoundPlan(actions=[S] * n), memory
        live = obs["avail"].all(axis=1)
        agree = obs["obs"][live, self.consensus]
        if len(agree) and float(agree.min()) >= 1.0:
            return RoundPlan(actions=[S] * n), memory
        return RoundPlan(actions=[D if round_index == 1 else V] * n), memory


def _rewards(records) -> np.ndarray:
    return np.array([r.reward for r in records])


def _row(records) -> dict[str, float]:
    s = summarize_records(records)
    return {k: round(s[k], 4) for k in ("accuracy", "mean_tokens", "mean_reward")}


def headroom(opts: TeamOptions, episodes: int, rounds: int) -> dict[str, Any]:
    env = TeamEnv(opts, "eval")
    indices = range(episodes)
    plans = list(itertools.product(TEMPLATES, repeat=rounds))
    table = np.zeros((len(plans), episodes))
    tokens = np.zeros((len(plans), episodes))
    scores = np.zeros((len(plans), episodes))
    difficulty = None
    for p, plan in enumerate(plans):
        records = env.run(PlanPolicy(plan), indices, width=64)
        table[p], tokens[p] = _rewards(records), [r.tokens for r in records]
        scores[p] = [r.score for r in records]
        if difficulty is None:
            difficulty = np.array([r.difficulty for r in records])
    best_each = table.argmax(0)
    cols = np.arange(episodes)
    best_plan = int(table.mean(1).argmax())
    adaptive = env.run(AdaptivePolicy(env.obs_dim), indices, width=64)
    fixed = {name: env.run(make_policy(name), indices, width=64) for name in FIXED_TOPOLOGIES}
    env.close()

    def group_rows(mask: np.ndarray) -> dict[str, Any]:
        out = {
            "oracle": {
                "accuracy": round(float(scores[best_each, cols][mask].mean()), 4),
                "mean_tokens": round(float(tokens[best_each, cols][mask].mean()), 1),
                "mean_reward": round(float(table[best_each, cols][mask].mean()), 4),
            },
            "best fixed plan: " + "/".join(plans[best_plan]): {
                "accuracy": round(float(scores[best_plan][mask].mean()), 4),
                "mean_tokens": round(float(tokens[best_plan][mask].mean()), 1),
                "mean_reward": round(float(table[best_plan][mask].mean()), 4),
            },
            AdaptivePolicy.name: _row([r for r, m in zip(adaptive, mask, strict=True) if m]),
        }
        for name, recs in fixed.items():
            out[name] = _row([r for r, m in zip(recs, mask, strict=True) if m])
        return out

    result: dict[str, Any] = {"episodes": episodes, "plans": len(plans)}
    result["all"] = group_rows(np.ones(episodes, dtype=bool))
    for group, levels in GROUPS.items():
        mask = np.isin(difficulty, levels)
        if mask.any():
            result[group] = {"n": int(mask.sum()), **group_rows(mask)}
    return result


def main(argv: list[str] | None = None) -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--benchmark", default="mixed")
    parser.add_argument("--preset", default="flash-lite", choices=list(PRESETS))
    parser.add_argument("--episodes", type=int_in(1, 10**5), default=300)
    parser.add_argument("--seed", type=int_in(0, 2**63 - 1), default=7)
    parser.add_argument("--token-weight", type=float_in(0.0, 1e6), default=0.1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    opts = TeamOptions(
        benchmark=args.benchmark, preset=args.preset, seed=args.seed, token_weight=args.token_weight
    )
    with user_errors():  # a bad --benchmark is one sentence before any work
        opts.validate()
        result = headroom(opts, args.episodes, opts.rounds)
    run_main(result, args.json)


if __name__ == "__main__":
    main()
