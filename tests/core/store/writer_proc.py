"""A producer process for the store tests: logs synthetic episodes, reporting each one.

    python writer_proc.py DB EPISODES [--sleep S] [--ingest-every S] [--checkpoint-every K]
        [--resume RUN_ID] [--wait-for FILE] [--paced-by FILE]

Prints ``run RUN_ID`` first, then ``logged I`` after episode I is in the spool (flushed),
then ``done``. Episode I is ``synthetic_episode(seed=I)``, so a reader can check it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from core.store.synthetic import synthetic_episode
from core.store.writer import LoggerConfig, RunLogger


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("db")
    p.add_argument("episodes", type=int)
    p.add_argument("--sleep", type=float, default=0.0)
    p.add_argument("--ingest-every", type=float, default=0.05)
    p.add_argument("--checkpoint-every", type=int, default=0)
    p.add_argument("--resume", default=None)
    p.add_argument("--wait-for", default=None, help="start logging once this file exists")
    p.add_argument(
        "--paced-by",
        default=None,
        help="a file where a reader counts its checks: wait for 3 of them halfway and 6 before"
        " closing, so the reads overlap the writes however slowly a loaded machine runs it",
    )
    args = p.parse_args()
    settings = LoggerConfig(ingest_every_s=args.ingest_every)
    if args.resume:
        logger = RunLogger.resume(args.db, args.resume, settings=settings)
    else:
        logger = RunLogger(args.db, "train", {"episodes": args.episodes}, settings=settings)
    print(f"run {logger.run_id}", flush=True)
    if args.wait_for:
        # The reader creates the file once it is up, so the two really overlap however
        # slowly the machine starts processes.
        deadline = time.monotonic() + 120
        while not os.path.exists(args.wait_for) and time.monotonic() < deadline:
            time.sleep(0.02)
    while logger.next_episode < args.episodes:
        if args.paced_by and logger.next_episode == args.episodes // 2:
            wait_for_checks(args.paced_by, 3)
        i = logger.log_episode(synthetic_episode(logger.next_episode))
        logger.log_metrics([{"step": i, "episode": i, "loss": 1.0 / (i + 1)}])
        if args.checkpoint_every and (i + 1) % args.checkpoint_every == 0:
            logger.set_checkpoint(f"/tmp/ckpt-{logger.run_id}-{i}.pt", i)
        print(f"logged {i}", flush=True)
        if args.sleep:
            time.sleep(args.sleep)
    if args.paced_by:
        wait_for_checks(args.paced_by, 6)
    logger.close()
    print("done", flush=True)
    sys.stdout.flush()


def wait_for_checks(path: str, at_least: int) -> None:
    """Until the reader's count in ``path`` reaches ``at_least`` (two minutes at most)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if int(open(path).read() or 0) >= at_least:
                return
        except (FileNotFoundError, ValueError):
            pass
        time.sleep(0.02)


if __name__ == "__main__":
    main()
