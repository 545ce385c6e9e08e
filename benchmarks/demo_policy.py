"""The lab demo's shipped policy, reproduced: retrain it with its command, compare held-out figures.

    agentqmix bench demo-policy [--eval-episodes 1000] [--eval-seed 1000] [--write] --json

``data/demo-policy.pt`` (:data:`lab.demo.SHIPPED_POLICY`) is Agent Q-Mix trained by
``agentqmix train`` with the default recipe (:data:`TRAIN_ARGS`, docs/lab.md). This reruns
that command (``--no-log``: the store plays no part in what is learned), evaluates the new
checkpoint and the shipped one greedily on the same held-out episodes (a stream no
training or tuning used), and prints both, their difference with a paired standard error,
and whether the weights are identical. ``--write`` replaces the shipped file with the new
one, its resume state (optimiser, target networks: 4.4 of its 5.9 MB) left out.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import Parser, int_in, run_main, user_errors
from core.qmix.checkpoint import read_payload, write_payload
from core.store.queries import episode_outcomes
from lab.demo import ROOT, SHIPPED_POLICY

TRAIN_ARGS = ("train", "--benchmark", "mixed", "--seed", "0")
"""The shipped policy's command (after ``agentqmix``): the default recipe, team and seed."""


def strip_resume(src: Path, dst: Path) -> Path:
    """Copy checkpoint ``src`` to ``dst`` without its resume state (only what evaluating needs)."""
    payload = read_payload(src)
    payload["resume"] = None
    return write_payload(dst, payload)


def _cli(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "core.cli", *args], cwd=ROOT, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"agentqmix {' '.join(args)} failed:\n{done.stderr[-2000:]}")
    return done.stdout


def train(out: Path) -> float:
    """Run the shipped policy's command into ``out``; its wall seconds."""
    started = time.perf_counter()
    _cli(*TRAIN_ARGS, "--out", str(out), "--no-log", "--eval-episodes", "0", "--json")
    return time.perf_counter() - started


def evaluate(checkpoint: Path, episodes: int, seed: int, db: Path) -> dict[str, Any]:
    """Greedy held-out evaluation, logged into ``db`` (per-episode rewards for the pairing)."""
    out = json.loads(
        _cli("eval", "--benchmark", "mixed", "--checkpoint", str(checkpoint),
             "--episodes", str(episodes), "--seed", str(seed), "--db", str(db), "--json")
    )  # fmt: skip
    rewards = [e.reward for e in episode_outcomes(db, out["run_id"])]
    keep = ("accuracy", "mean_tokens", "mean_reward", "episodes")
    return {**{k: out[k] for k in keep}, "rewards": rewards}


def same_weights(a: Path, b: Path) -> bool:
    pa, pb = read_payload(a), read_payload(b)
    return all(
        pa[part].keys() == pb[part].keys()
        and all(torch.equal(pa[part][k], pb[part][k]) for k in pa[part])
        for part in ("agent", "mixer")
    )


def compare(new: dict[str, Any], shipped: dict[str, Any]) -> dict[str, float]:
    """Mean reward difference new − shipped and its paired standard error."""
    d = [x - y for x, y in zip(new.pop("rewards"), shipped.pop("rewards"), strict=True)]
    mean = sum(d) / len(d)
    var = sum((v - mean) ** 2 for v in d) / max(len(d) - 1, 1)
    return {"reward_diff": mean, "reward_diff_se": math.sqrt(var / len(d))}


def main(argv: list[str] | None = None) -> None:
    parser = Parser(prog="agentqmix bench demo-policy", description=__doc__.split("\n")[0])
    parser.add_argument("--eval-episodes", type=int_in(1, 100_000), default=1000)
    parser.add_argument("--eval-seed", type=int_in(0, 2**31 - 1), default=1000,
                        help="Held-out stream (not the training seed; default 1000).")  # fmt: skip
    parser.add_argument("--write", action="store_true", help="Replace the shipped file.")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with user_errors(), tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp) / "fresh.pt"
        seconds = train(fresh)
        db = Path(tmp) / "eval.duckdb"
        new = evaluate(fresh, args.eval_episodes, args.eval_seed, db)
        result: dict[str, Any] = {"command": "agentqmix " + " ".join(TRAIN_ARGS),
                                  "train_wall_s": round(seconds, 1),
                                  "eval_seed": args.eval_seed}  # fmt: skip
        if SHIPPED_POLICY.exists():
            shipped = evaluate(SHIPPED_POLICY, args.eval_episodes, args.eval_seed, db)
            result |= {"identical_weights": same_weights(fresh, SHIPPED_POLICY),
                       **compare(new, shipped), "shipped": shipped}  # fmt: skip
        new.pop("rewards", None)
        result["retrained"] = new
        if args.write:
            strip_resume(fresh, SHIPPED_POLICY)
            result["written"] = str(SHIPPED_POLICY)
    run_main(result, args.json)


if __name__ == "__main__":
    main()
