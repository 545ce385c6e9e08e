"""Time to quality: the cost, in episodes and updates and in wall seconds, until the default
``agentqmix train`` has a good policy.

For each training seed, with logging on and off, a fresh process runs exactly what a user
runs — ``agentqmix train --benchmark mixed --out CKPT [--db DB | --no-log] --seed S`` plus
the flags given in ``--train="..."`` — and the policy's weights are copied after every
``--every-updates``-th learner update (a copy costs ~1 ms) and once more when the command
has returned (its checkpoint). Afterwards, untimed, every copy is played greedily on the
same ``--eval-episodes`` held-out episodes of stream ``--eval-seed`` (a stream not used for
tuning).

Why copies at update counts, not at wall times: the training run itself is fixed by its
seed (the collector child plays each batch with the weights of exactly one iteration
earlier, and the learner makes a fixed number of updates per collected batch:
:mod:`core.qmix.collect`), but copies taken every few seconds fall on different updates
when the machine is busier, and whether a dip of the greedy reward is seen depends on how
densely they fall. Copies at fixed update counts make every figure below but the seconds
the same for the same seed on any machine: the cost to reach and to hold a threshold is a
count of updates and episodes; wall seconds only scale with the machine's speed.

Reported per run: each copy's updates, episodes, wall seconds (from the moment the process
was started, imports included), CPU seconds of the trainer and of its collector child, and
held-out accuracy, tokens and reward; for each threshold the first copy at or above it
(``time_to``) and the copy from which it stayed there to the end (``holds_from``; null:
never) — updates, episodes and seconds. The greedy policy's reward wanders by a few points
between updates, so a first touch can be luck; ``holds_from`` is what a user can count on.
``per_step`` gives the measured rates that turn counts into seconds: wall and CPU seconds
per update (collection and logging included, from the first to the last copy), the
learner's own milliseconds per update, and the seconds before the first update (imports,
set-up) — so wall at a copy ≈ ``start_s + updates × wall_s_per_update``.

``--stop-after-updates N`` ends each run cleanly after N updates with the whole recipe's
schedules (ε, learning rate), so a tuning run can look at the first N updates only.

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
    parser.add_argument("--every-updates", type=int_in(1, 1_000_000), default=25)
    parser.add_argument("--eval-seed", type=int_in(0, 2**62), default=5000)
    parser.add_argument("--eval-episodes", type=int_in(1, 100_000), default=500)
    parser.add_argument("--thresholds", default=",".join(f"{t:g}" for t in THRESHOLDS))
    parser.add_argument("--train", default="", help="more flags for the timed `agentqmix train`")
    parser.add_argument(
        "--stop-after-updates",
        type=int_in(0, 1_000_000),
        default=0,
        help="end each run cleanly after this many updates (0: the whole run); the recipe and "
        "its schedules stay those of the whole run, so a tuning run can stop early",
    )
    parser.add_argument("--json", action="store_true")
    # The timed process's own arguments (run_one passes them).
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--started", type=float_in(0.0, 1e12), help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int_in(0, 2**63 - 1), help=argparse.SUPPRESS)
    # Sleeps after every update: the tests' stand-in for a machine busy elsewhere, under
    # which the same seed must still give the same copies.
    parser.add_argument("--stall-ms", type=float_in(0, 1000), default=0.0, help=argparse.SUPPRESS)
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
            "every_updates": args.every_updates,
            "stop_after_updates": args.stop_after_updates,
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
            "--benchmark", args.benchmark, "--every-updates", str(args.every_updates),
            "--eval-seed", str(args.eval_seed), "--eval-episodes", str(args.eval_episodes),
            f"--train={args.train}", "--stall-ms", str(args.stall_ms),
            "--stop-after-updates", str(args.stop_after_updates),
        ]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"the timed run failed:\n{done.stderr[-3000:]}")
        result = json.loads(out.read_text())
    copies = result["copies"]
    reached, held = {}, {}
    for t in thresholds:
        first = next((c for c in copies if c["mean_reward"] >= t), None)
        reached[f"{t:g}"] = None if first is None else point(first)
        # From which copy on every later one stays at or above t (the greedy policy's
        # reward wanders by a few points between updates; a first touch can be luck).
        below = [i for i, c in enumerate(copies) if c["mean_reward"] < t]
        start = below[-1] + 1 if below else 0
        held[f"{t:g}"] = point(copies[start]) if start < len(copies) else None
    return {
        "seed": seed,
        "log": log,
        "load_before": round(load_before, 2),
        "load_after": round(os.getloadavg()[0], 2),
        **result,
        "per_step": per_step(copies, result["learner_s"]),
        "time_to": reached,
        "holds_from": held,
    }


def point(copy: dict[str, Any]) -> dict[str, Any]:
    """Where a copy stands: its cost in updates and episodes (fixed by the seed), and when."""
    keys = ("updates", "episodes", "wall_s", "cpu_s", "cpu_child_s")
    return {k: copy[k] for k in keys}


def per_step(copies: list[dict[str, Any]], learner_s: float) -> dict[str, float | None]:
    """The rates that turn a cost in updates into seconds on the machine of this run: slopes
    from the first to the last periodic copy (the final one also holds the checkpoint's
    writing), the learner's own time per update, and the seconds before update 0."""
    periodic = copies[:-1] if len(copies) > 2 else copies
    first, last = periodic[0], periodic[-1]
    span = last["updates"] - first["updates"]
    if span <= 0:
        return {"wall_s_per_update": None, "start_s": None}

    def slope(key: str) -> float:
        return (last[key] - first[key]) / span

    return {
        "wall_s_per_update": round(slope("wall_s"), 5),
        "cpu_s_per_update": round(slope("cpu_s"), 5),
        "cpu_child_s_per_update": round(slope("cpu_child_s"), 5),
        "episodes_per_update": round(slope("episodes"), 3),
        "learner_ms_per_update": round(1000 * learner_s / max(copies[-1]["updates"], 1), 2),
        "start_s": round(first["wall_s"] - first["updates"] * slope("wall_s"), 2),
    }


def summary(runs: list[dict[str, Any]], thresholds: list[float]) -> dict[str, Any]:
    """Per logging mode: each threshold's cost and time per seed, and the final rewards."""
    out: dict[str, Any] = {}
    for log in (True, False):
        mine = [r for r in runs if r["log"] is log]
        if not mine:
            continue
        row: dict[str, Any] = {
            "command_wall_s": [r["command_wall_s"] for r in mine],
            "final_reward": [r["copies"][-1]["mean_reward"] for r in mine],
            "wall_s_per_update": [r["per_step"]["wall_s_per_update"] for r in mine],
        }
        for t in thresholds:
            for name in ("time_to", "holds_from"):
                points = [r[name][f"{t:g}"] for r in mine]
                for key in ("updates", "episodes", "wall_s"):
                    row[f"{name}_{t:g}_{key}"] = [p and p[key] for p in points]
        out["logging_on" if log else "logging_off"] = row
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
    learner_s = [0.0]

    def copying(self: QLearner, batch: Any) -> dict[str, float]:
        began = time.perf_counter()
        stats = train(self, batch)
        learner_s[0] += time.perf_counter() - began
        time.sleep(args.stall_ms / 1000)
        if self.updates % args.every_updates == 0:
            copies.append(
                {
                    **moment(args.started),
                    "updates": self.updates,
                    # The training loop adds the episode count to this very dict after the
                    # update returns (core.qmix.training); read at the end.
                    "stats": stats,
                    # The greedy policy: the online weights, or their average (policy_ema).
                    "weights": [clone(self.policy_agent), clone(self.policy_mixer)],
                }
            )
        updates_done[0] = self.updates
        return stats

    updates_done = [0]
    QLearner.train = copying  # type: ignore[method-assign]
    if args.stop_after_updates:
        stop_after(args.stop_after_updates, updates_done)
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
        for copy in copies:
            copy["episodes"] = int(copy.pop("stats")["episode"])
        updates = final.resume["updates"] if final.resume else None
        if copies and copies[-1]["updates"] == updates:
            copies.pop()  # the same weights as the checkpoint's; keep the later moment
        copies.append(
            {
                **moment(args.started),
                "wall_s": wall,
                "updates": updates,
                "episodes": final.meta.get("episodes"),
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
    result = {"command_wall_s": round(wall, 2), "learner_s": learner_s[0], "copies": copies}
    args.worker.write_text(json.dumps(result))


def stop_after(limit: int, updates_done: list[int]) -> None:
    """Make the training loop of this process end cleanly (as a Stop button does) once
    ``updates_done[0]`` reaches ``limit``: the run keeps its whole recipe's schedules."""
    from core.qmix import training

    loop = training._train

    def stopping(venv: Any, config: Any, hooks: Any, *rest: Any, **kw: Any) -> Any:
        asked = hooks.should_stop
        hooks.should_stop = lambda: updates_done[0] >= limit or asked()
        return loop(venv, config, hooks, *rest, **kw)

    training._train = stopping


def clone(module: Any) -> dict[str, Any]:
    """A copy of ``module``'s weights on the CPU."""
    return {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}


def moment(started: float) -> dict[str, float]:
    """Wall seconds since ``started``; CPU seconds of this process (the learner, logging)
    and of its children (the collector), apart: on two cores they overlap."""
    wall = time.time() - started
    mine = sum(os.times()[:2])
    return {"wall_s": wall, "cpu_s": round(mine, 2), "cpu_child_s": children_cpu_seconds()}


def children_cpu_seconds() -> float:
    """CPU seconds of this process's children: those already ended and the live ones."""
    import multiprocessing

    total = sum(os.times()[2:4])
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
