"""Time to quality: wall seconds until the default ``agentqmix train`` has a good policy.

For each training seed, with logging on and off, a fresh process runs exactly what a user
runs — ``agentqmix train --benchmark mixed --out CKPT [--db DB | --no-log] --seed S`` plus
the flags given in ``--train="..."`` — and the policy's weights are copied every ``--every-s``
seconds of wall time while it trains (at an update, between updates; a copy costs ~1 ms),
and once more when the command has returned (its checkpoint). Afterwards, untimed, every
copy is played greedily on the same ``--eval-episodes`` held-out episodes of stream
``--eval-seed`` (a stream not used for tuning). Reported per run: the wall time of the
whole command (from the moment its process was started, imports included), each copy's
held-out accuracy, tokens and reward, the wall time at which the held-out reward first
reached each threshold (``time_to``) and the one from which it stayed there to the end
(``holds_from``; null: never). The greedy policy's reward wanders by a few points between
updates, so a first touch can be luck; ``holds_from`` is what a user can count on. ``cpu_s`` at each copy is the CPU time of the command
and of its collector child, a figure a loaded machine distorts less than wall time.

    agentqmix bench time-to-quality --seeds 0,1,2 --eval-seed 5000 --json
    agentqmix bench time-to-quality --seeds 100 --eval-seed 300 --log on --train="--td-lambda 0.5"
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import Parser, float_in, int_in, run_main

THRESHOLDS = (0.85, 0.88, 0.90)


def main(argv: list[str] | None = None) -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2", help="training seeds")
    parser.add_argument("--log", choices=("both", "on", "off"), default="both")
    parser.add_argument("--benchmark", default="mixed")
    parser.add_argument("--every-s", type=float_in(0.5, 600), default=2.5)
    parser.add_argument("--eval-seed", type=int_in(0, 2**62), default=5000)
    parser.add_argument("--eval-episodes", type=int_in(1, 100_000), default=500)
    parser.add_argument("--thresholds", default=",".join(f"{t:g}" for t in THRESHOLDS))
    parser.add_argument("--train", default="", help="more flags for the timed `agentqmix train`")
    parser.add_argument("--json", action="store_true")
    # The timed process's own arguments (run_one passes them).
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--started", type=float_in(0.0, 1e12), help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int_in(0, 2**63 - 1), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker is not None:
        worker(args, shlex.split(args.train))
        return
    try:
        seeds = [int(s) for s in args.seeds.split(",")]
        thresholds = [float(t) for t in args.thresholds.split(",")]
    except ValueError:
        parser.error("--seeds and --thresholds take comma-separated numbers")
    logs = {"both": (True, False), "on": (True,), "off": (False,)}[args.log]
    runs = [run_one(args, seed, log, thresholds) for seed in seeds for log in logs]
    run_main(
        {
            "command": f"agentqmix train --benchmark {args.benchmark} {args.train}".strip(),
            "eval_seed": args.eval_seed,
            "eval_episodes": args.eval_episodes,
            "every_s": args.every_s,
            "thresholds": thresholds,
            "load_average": os.getloadavg(),
            "runs": runs,
            "summary": summary(runs, thresholds),
        },
        args.json,
    )


def run_one(args: Any, seed: int, log: bool, thresholds: list[float]) -> dict[str, Any]:
    """One timed ``agentqmix train`` in a fresh process, then its copies evaluated."""
    with tempfile.TemporaryDirectory(prefix="ttq-") as tmp:
        out = Path(tmp) / "result.json"
        load_before = os.getloadavg()[0]
        started = time.time()
        cmd = [
            sys.executable, "-m", "benchmarks.time_to_quality", "--worker", str(out),
            "--started", repr(started), "--seed", str(seed), "--log", "on" if log else "off",
            "--benchmark", args.benchmark, "--every-s", str(args.every_s),
            "--eval-seed", str(args.eval_seed), "--eval-episodes", str(args.eval_episodes),
            f"--train={args.train}",
        ]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"the timed run failed:\n{done.stderr[-3000:]}")
        result = json.loads(out.read_text())
    reached, held = {}, {}
    copies = result["copies"]
    for t in thresholds:
        first = next((c for c in copies if c["mean_reward"] >= t), None)
        reached[f"{t:g}"] = None if first is None else first["wall_s"]
        # From which copy on every later one stays at or above t (the greedy policy's
        # reward wanders by a few points between updates; a first touch can be luck).
        below = [i for i, c in enumerate(copies) if c["mean_reward"] < t]
        start = below[-1] + 1 if below else 0
        held[f"{t:g}"] = copies[start]["wall_s"] if start < len(copies) else None
    return {
        "seed": seed,
        "log": log,
        "load_before": round(load_before, 2),
        "load_after": round(os.getloadavg()[0], 2),
        **result,
        "time_to": reached,
        "holds_from": held,
    }


def summary(runs: list[dict[str, Any]], thresholds: list[float]) -> dict[str, Any]:
    """Per logging mode: each threshold's time per seed, and the final rewards."""
    out: dict[str, Any] = {}
    for log in (True, False):
        mine = [r for r in runs if r["log"] is log]
        if not mine:
            continue
        out["logging_on" if log else "logging_off"] = {
            "command_wall_s": [r["command_wall_s"] for r in mine],
            "final_reward": [r["copies"][-1]["mean_reward"] for r in mine],
            **{f"time_to_{t:g}": [r["time_to"][f"{t:g}"] for r in mine] for t in thresholds},
            **{f"holds_from_{t:g}": [r["holds_from"][f"{t:g}"] for r in mine] for t in thresholds},
        }
    return out


# --------------------------------------------------------------------------- the timed process


def worker(args: Any, extra: list[str]) -> None:
    """Run ``agentqmix train`` here with the learner's weights copied on the way; then
    evaluate every copy (untimed) and write the result to ``args.worker``."""
    import torch

    from core import cli
    from core.experiment import options_from_dict, run_policy
    from core.qmix.checkpoint import load_checkpoint
    from core.qmix.learner import QLearner
    from core.qmix.policy import QMixPolicy
    from core.team.summary import summarize_records

    copies: list[dict[str, Any]] = []
    train = QLearner.train
    last = [0.0]

    def copying(self: QLearner, batch: Any) -> dict[str, float]:
        stats = train(self, batch)
        now = time.time()
        if now - last[0] >= args.every_s:
            last[0] = now
            copies.append(
                {
                    "wall_s": now - args.started,
                    "cpu_s": cpu_seconds(),
                    "updates": self.updates,
                    "weights": [clone(self.agent), clone(self.mixer)],
                }
            )
        return stats

    QLearner.train = copying  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory(prefix="ttq-run-") as tmp:
        ckpt = Path(tmp) / "policy.pt"
        store = ["--db", str(Path(tmp) / "store.duckdb")] if args.log == "on" else ["--no-log"]
        argv = ["train", "--benchmark", args.benchmark, "--out", str(ckpt)]
        argv += ["--seed", str(args.seed), *store, "--json", *extra]
        code = cli.main(argv)
        wall = time.time() - args.started
        if code != 0:
            raise SystemExit(f"agentqmix {' '.join(argv)} exited with {code}")
        final = load_checkpoint(ckpt, "cpu")
        copies.append(
            {
                "wall_s": wall,
                "cpu_s": cpu_seconds(),
                "updates": final.resume["updates"] if final.resume else None,
                "weights": [clone(final.agent), clone(final.mixer)],
            }
        )
        QLearner.train = train  # type: ignore[method-assign]
    torch.set_num_threads(1)
    opts = options_from_dict(final.env["team"])
    for copy in copies:
        for module, weights in zip((final.agent, final.mixer), copy.pop("weights"), strict=True):
            module.load_state_dict(weights)
        policy = QMixPolicy(final.agent, final.mixer, torch.device("cpu"), epsilon=0.0)
        held_out = summarize_records(run_policy(opts, policy, args.eval_episodes, args.eval_seed))
        copy.update({k: held_out[k] for k in ("accuracy", "mean_tokens", "mean_reward")})
        copy["wall_s"] = round(copy["wall_s"], 2)
    args.worker.write_text(json.dumps({"command_wall_s": round(wall, 2), "copies": copies}))


def clone(module: Any) -> dict[str, Any]:
    """A copy of ``module``'s weights on the CPU."""
    return {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}


def cpu_seconds() -> float:
    """CPU seconds of this process and its live children (the collector)."""
    import multiprocessing

    total = sum(os.times()[:4])  # this process and its children already ended
    tick = os.sysconf("SC_CLK_TCK")
    for child in multiprocessing.active_children():
        try:
            fields = Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError, ValueError):
            continue
    return round(total, 2)


if __name__ == "__main__":
    main()
