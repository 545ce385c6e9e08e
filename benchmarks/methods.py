"""The methods contest (docs/baselines.md, "The contest"): Agent Q-Mix and the four
learned-topology methods under both protocols (``graph``: no tool; ``tools``: the methods
may verify), each tuned with the same budget on the tuning seed and stream, then trained on
several seeds and played on one held-out evaluation stream; paired differences with
hierarchical-bootstrap intervals (seeds and episodes), per domain and difficulty.

Resumable: each finished trial is a file under ``--out``; run the same command again to
continue. Prints JSON and writes ``--out``/table.md. Every evaluation it plays is also
logged to the episode store (``--db``, the lab's by default), where the lab's Methods view
shows it; a contest finished before is added to the store by running it again.

    agentqmix bench methods --out runs/contest --episodes 8000 --json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from benchmarks.common import Parser, int_in, run_main, user_errors
from core.experiment.contest import CONTESTANTS, PROTOCOLS, Contest, ContestConfig, table
from core.store.engine import resolve_db


def seeds(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def main(argv: list[str] | None = None) -> None:
    d = ContestConfig()
    parser = Parser(prog="agentqmix bench methods", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder of the trials")
    parser.add_argument("--benchmark", default=d.benchmark)
    parser.add_argument("--episodes", type=int_in(1, 10**7), default=d.episodes)
    parser.add_argument("--tune-seed", type=int_in(0, 2**62), default=d.tune_seed)
    parser.add_argument("--tune-stream", type=int_in(0, 2**62), default=d.tune_stream)
    parser.add_argument("--tune-episodes", type=int_in(1, 10**6), default=d.tune_episodes)
    parser.add_argument("--seeds", type=seeds, default=d.seeds, help="training seeds, a,b,c")
    parser.add_argument("--eval-stream", type=int_in(0, 2**62), default=d.eval_stream)
    parser.add_argument("--eval-episodes", type=int_in(1, 10**6), default=d.eval_episodes)
    parser.add_argument("--protocols", default=",".join(PROTOCOLS))
    parser.add_argument("--methods", default=",".join(CONTESTANTS))
    parser.add_argument("--grid-size", type=int_in(1, 100), default=d.grid_size)
    parser.add_argument("--n-envs", type=int_in(2, 4096), default=d.n_envs)
    parser.add_argument("--bootstrap", type=int_in(100, 10**6), default=d.bootstrap)
    parser.add_argument("--ablations", action="store_true", help="the papers' readings too")
    parser.add_argument(
        "--db", help="episode store the lab reads (default: $AGENTQMIX_DB or ./agentqmix.duckdb)"
    )
    parser.add_argument("--no-store", action="store_true", help="log nothing to the store")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with user_errors():
        config = ContestConfig(
            benchmark=args.benchmark, episodes=args.episodes, tune_seed=args.tune_seed,
            tune_stream=args.tune_stream, tune_episodes=args.tune_episodes, seeds=args.seeds,
            eval_stream=args.eval_stream, eval_episodes=args.eval_episodes,
            protocols=tuple(args.protocols.split(",")), methods=tuple(args.methods.split(",")),
            grid_size=args.grid_size, n_envs=args.n_envs, bootstrap=args.bootstrap,
            ablations=args.ablations,
        )  # fmt: skip
        db = None if args.no_store else resolve_db(args.db)
        contest = Contest(config, args.out, progress=lambda k: print(k, file=sys.stderr), db=db)
        result = contest.result()
        (args.out / "table.md").write_text(table(result))
        (args.out / "result.json").write_text(json.dumps(result, indent=1))
    run_main(result, args.json, table(result))


if __name__ == "__main__":
    main()
