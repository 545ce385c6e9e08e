"""Episode-store benchmark: logging throughput, one-episode load latency, logging overhead.

    agentqmix bench store [--rows 1000000] [--episodes 4000] [--train-episodes 256] --json

Prints JSON (:func:`run_store_bench`);
``logging_overhead`` times a caller-supplied training loop with logging off and on.
Episodes are synthetic (``core.store.synthetic``): this measures the store, not the team.
"""

from __future__ import annotations

import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import Parser, int_in, run_main
from core.store.db import read_session
from core.store.queries import load_episode_from
from core.store.synthetic import synthetic_episode
from core.store.writer import LoggerConfig, RunLogger


def _steps_per_episode(n_agents: int, n_rounds: int) -> int:
    return n_agents * n_rounds + 1  # + the decision agent


def bench_throughput(db: Path, episodes: int, n_agents: int, n_rounds: int) -> dict[str, Any]:
    """Log ``episodes`` one at a time, as a training loop does, including the final ingest."""
    records = [synthetic_episode(i, n_agents, n_rounds) for i in range(episodes)]
    t0 = time.perf_counter()
    logger = RunLogger(db, "train", {"bench": "throughput"}, policy="qmix")
    t_log = time.perf_counter()
    for rec in records:
        logger.log_episode(rec)
    t_logged = time.perf_counter()
    logger.close()
    t1 = time.perf_counter()
    rows = episodes * _steps_per_episode(n_agents, n_rounds)
    return {
        "episodes": episodes,
        "agent_step_rows": rows,
        "seconds": round(t1 - t0, 3),
        "agent_step_rows_per_s": round(rows / (t1 - t0)),
        "episodes_per_s": round(episodes / (t1 - t0)),
        "log_episode_us": round((t_logged - t_log) / episodes * 1e6, 1),
    }


def fill(db: Path, target_rows: int, n_agents: int, n_rounds: int, batch: int = 2000) -> int:
    """Log synthetic episodes until the store holds ``target_rows`` agent-step rows."""
    per = _steps_per_episode(n_agents, n_rounds)
    pool = [synthetic_episode(i, n_agents, n_rounds) for i in range(500)]
    have = 0
    with read_session(db) as cur:
        have = cur.execute("SELECT count(*) FROM agent_steps").fetchone()[0]
    settings = LoggerConfig(ingest_every_s=0.0)
    with RunLogger(db, "eval", {"bench": "fill"}, policy="chain", settings=settings) as logger:
        while have < target_rows:
            n = min(batch, -(-(target_rows - have) // per))
            logger.log_episodes(
                pool[i % len(pool)] for i in range(logger.next_episode, logger.next_episode + n)
            )
            have += n * per
    return have


def bench_load(db: Path, samples: int = 50, seed: int = 0) -> dict[str, Any]:
    """Latency of loading one full episode (a new read session each time, as the lab does)."""
    from core.store.queries import load_episode

    with read_session(db) as cur:
        keys = cur.execute("SELECT run_id, episode FROM episodes").fetchall()
        rows = cur.execute("SELECT count(*) FROM agent_steps").fetchone()[0]
    rng = random.Random(seed)
    picks = [rng.choice(keys) for _ in range(samples)]
    load_episode(db, *picks[0])  # warm the engine
    times, in_session = [], []
    for run_id, episode in picks:
        t0 = time.perf_counter()
        assert load_episode(db, run_id, episode) is not None
        times.append((time.perf_counter() - t0) * 1000)
    with read_session(db) as cur:
        for run_id, episode in picks:
            t0 = time.perf_counter()
            load_episode_from(cur, run_id, episode)
            in_session.append((time.perf_counter() - t0) * 1000)
    return {
        "agent_step_rows_in_db": rows,
        "load_episode_ms_median": round(statistics.median(times), 2),
        "load_episode_ms_p95": round(sorted(times)[int(0.95 * (len(times) - 1))], 2),
        "load_episode_in_open_session_ms_median": round(statistics.median(in_session), 2),
    }


def logging_overhead(train: Callable[[bool], None], repeats: int = 3) -> dict[str, Any]:
    """Best-of-``repeats`` wall time of ``train(log)`` with logging off and on.

    ``train(False)`` must run a fixed small training job without a RunLogger and
    ``train(True)`` the same job logging every episode (and metrics) to a fresh store.
    """
    best = {False: float("inf"), True: float("inf")}
    for _ in range(repeats):
        for log in (False, True):
            t0 = time.perf_counter()
            train(log)
            best[log] = min(best[log], time.perf_counter() - t0)
    return {
        "train_s_logging_off": round(best[False], 3),
        "train_s_logging_on": round(best[True], 3),
        "logging_slowdown_pct": round(100 * (best[True] / best[False] - 1), 1),
    }


def train_job(episodes: int = 256, seed: int = 0) -> Callable[[bool], None]:
    """A fixed small sim training job (default network sizes) for :func:`logging_overhead`."""
    from core.experiment import TeamOptions, train_team
    from core.team.recipes import TEAM_RECIPE, recipe_config

    def job(log: bool) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            train_team(
                TeamOptions(benchmark="mixed", seed=seed),
                recipe_config(TEAM_RECIPE, {"episodes": episodes, "seed": seed, "device": "cpu"}),
                Path(tmp) / "ckpt.pt",
                db=str(Path(tmp) / "store.duckdb"),
                log=log,
                eval_episodes=0,
            )

    return job


def run_store_bench(
    rows: int = 1_000_000,
    throughput_episodes: int = 4000,
    n_agents: int = 4,
    n_rounds: int = 3,
    workdir: str | Path | None = None,
    train_episodes: int = 256,
) -> dict[str, Any]:
    """Both store figures, on fresh databases in ``workdir`` (a temporary folder by default)."""
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        tmp_path = Path(tmp)
        throughput = bench_throughput(
            tmp_path / "tp.duckdb", throughput_episodes, n_agents, n_rounds
        )
        big = tmp_path / "big.duckdb"
        t0 = time.perf_counter()
        fill(big, rows, n_agents, n_rounds)
        fill_s = time.perf_counter() - t0
        load = bench_load(big)
        load["fill_seconds"] = round(fill_s, 1)
        load["db_mb"] = round(big.stat().st_size / 2**20, 1)
    overhead = logging_overhead(train_job(train_episodes)) if train_episodes > 0 else {}
    return {
        "logging": throughput,
        "load": load,
        "training": overhead,
        "goals": {
            "agent_step_rows_per_s": 50_000,
            "load_episode_ms": 50,
            "logging_slowdown_pct": 10,
        },
    }


def main(argv: list[str] | None = None) -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rows", type=int_in(1, 10**8), default=1_000_000, help="agent-step rows to load"
    )
    parser.add_argument(
        "--episodes", type=int_in(1, 10**7), default=4000, help="throughput episodes"
    )
    parser.add_argument(
        "--train-episodes", type=int_in(1, 10**6), default=256, help="logging on/off job"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = run_store_bench(
        rows=args.rows, throughput_episodes=args.episodes, train_episodes=args.train_episodes
    )
    run_main(result, args.json)


if __name__ == "__main__":
    main()
