"""The classic-games suite on several seeds: each claim of docs/games.md checked with the
engine's textbook defaults (only the game's episode budget set), no tuning per seed.

The test suite checks each claim on one seed (tests/core/qmix/test_games.py); this
benchmark checks every claim on every seed asked for and records the cost, for
benchmarks/RESULTS.md.

    agentqmix bench games [--seeds 0,1,2] [--claims all|NAME,...] [--json]

Prints one JSON object: per claim and seed the greedy return and whether the claim held,
per claim how many seeds it held on, and the CPU and wall seconds spent.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from benchmarks.common import Parser, fail, run_main
from core.qmix.config import ExplorationConfig, LearnerConfig, MixerConfig
from core.qmix.games import GAMES, greedy_return
from core.qmix.seeding import torch_threads

UNIFORM = ExplorationConfig(start=1.0, finish=1.0)
"""The QMIX paper's protocol for the two-step game: uniform exploration throughout."""


@dataclass(frozen=True)
class Claim:
    """A game, the settings on top of the defaults, and what the greedy return must be."""

    game: str
    settings: dict[str, Any]
    expect: str
    holds: Callable[[float], bool]


CLAIMS: dict[str, Claim] = {
    "two_step": Claim("two_step", {}, "== 8", lambda r: r == 8.0),
    "two_step_uniform_qmix": Claim("two_step", {"exploration": UNIFORM}, "== 8", lambda r: r == 8.0),
    "two_step_uniform_vdn": Claim(
        "two_step", {"exploration": UNIFORM, "mixer": MixerConfig(kind="vdn")}, "== 7",
        lambda r: r == 7.0,
    ),
    "two_step_lambda_0.8": Claim(
        "two_step", {"learner": LearnerConfig(td_lambda=0.8)}, "== 7", lambda r: r == 7.0
    ),
    "relay": Claim("relay", {}, ">= 2.5", lambda r: r >= 2.5),
    "climbing": Claim(
        "climbing", {}, "in {5, 6, 7} (never the optimum 11)", lambda r: r in (5.0, 6.0, 7.0)
    ),
}  # fmt: skip
"""docs/games.md's claims, each a game and settings over the textbook defaults."""


def run(claims: list[str], seeds: list[int]) -> dict[str, Any]:
    """Every claim on every seed; the returns, what held, and the time spent."""
    rows, start_wall, start_cpu = [], time.perf_counter(), time.process_time()
    for name in claims:
        claim = CLAIMS[name]
        for seed in seeds:
            t0 = time.process_time()
            got = greedy_return(claim.game, seed, **claim.settings)
            rows.append({"claim": name, "game": claim.game, "seed": seed, "return": got,
                         "expect": claim.expect, "held": claim.holds(got),
                         "cpu_s": round(time.process_time() - t0, 2)})  # fmt: skip
    held = {name: sum(r["held"] for r in rows if r["claim"] == name) for name in claims}
    return {
        "seeds": seeds,
        "episodes": {name: GAMES[CLAIMS[name].game].episodes for name in claims},
        "rows": rows,
        "held": {name: f"{n}/{len(seeds)}" for name, n in held.items()},
        "all_held": all(r["held"] for r in rows),
        "cpu_s": round(time.process_time() - start_cpu, 1),
        "wall_s": round(time.perf_counter() - start_wall, 1),
    }


def _list(text: str, what: str, parse: Callable[[str], Any]) -> list[Any]:
    try:
        items = [parse(p.strip()) for p in text.split(",") if p.strip()]
    except ValueError:
        fail(f"{what} takes comma-separated values such as 0,1,2, not {text!r}.")
    if not items:
        fail(f"{what} needs at least one value.")
    return items


def main(argv: list[str] | None = None) -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (default 0,1,2)")
    parser.add_argument("--claims", default="all", help=f"all, or some of {', '.join(CLAIMS)}")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    seeds = _list(args.seeds, "--seeds", int)
    if any(s < 0 for s in seeds):
        fail(f"--seeds must be whole numbers >= 0, not {args.seeds!r}.")
    claims = list(CLAIMS) if args.claims == "all" else _list(args.claims, "--claims", str)
    unknown = [c for c in claims if c not in CLAIMS]
    if unknown:
        fail(f"no claim {unknown[0]!r}; choose from {', '.join(CLAIMS)}.")
    with torch_threads(1):
        result = run(claims, seeds)
    line = "; ".join(f"{name} {n}" for name, n in result["held"].items())
    run_main(result, args.json, f"{line} ({result['cpu_s']} CPU-s)")


if __name__ == "__main__":
    main()
