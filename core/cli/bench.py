"""``agentqmix bench NAME``: the benchmarks of ``benchmarks/``, each run as its own process."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from core.cli.app import app
from core.cli.output import console
from core.errors import UserError

BENCHMARKS: dict[str, str] = {
    "learner": "learner updates/s, multiply-adds and the machine's matmul rate",
    "store": "logging throughput, one-episode load latency, training slowdown from logging",
    "lab": "page render times and replay-slider latency on a large store",
    "openai-concurrency": "seconds per episode against a local server with fixed latency",
    "sim-calibration": "accuracy and tokens per fixed topology and difficulty (the simulator)",
    "calibration-real": "simulated vs real per action and policy on held-out real episodes",
    "actions-by-difficulty": "what a trained policy does on easy and hard tasks",
    "graphs-per-query": "distinct round-0 graphs a learned policy plays over held-out tasks",
    "headroom": "the oracle, a hand-written adaptive plan and the best fixed plan per task",
    "graph-headroom": "best graph per domain/difficulty against the best single graph (held out)",
    "fuzz-checker": "the maths checker on random explosive expressions (time per check)",
    "humaneval-checker": "every HumanEval reference passes and an exit-0 forgery fails",
    "extraction": "our answer reader vs math-verify: precision/recall on the labelled fixture, recorded replies, hostile answers",
    "learning": "learned policy vs every fixed topology on held-out episodes, paired SEs",
    "rollouts": "rollout episodes/s of the learned policy on the simulator, per lockstep width",
    "scaling": "learner updates/s and rollout episodes/s against agents N and rounds T, memory",
    "games": "the classic-games suite's claims on several seeds (docs/games.md)",
    "time-to-quality": "updates, episodes and wall seconds until training holds held-out reward thresholds",
    "real": "local model: seconds per episode by topology, tokens/s, runtime overhead",
    "weights": "local model: the shipped Q4_1 file against its Q8_0 copy (speed, perplexity)",
    "baselines": "learned-topology methods vs Agent Q-Mix and fixed topologies: paired SEs, graphs",
    "methods": "the methods contest: both protocols, equal tuning, several seeds, bootstrap CIs",
    "demo-policy": "the lab demo's shipped policy retrained by its command, held-out figures compared",
    "by-difficulty": "logged eval runs: accuracy with Wilson intervals by benchmark and difficulty",
}
"""``agentqmix bench NAME``: the modules of ``benchmarks/`` (``benchmarks.<name>``), run as
their own process so that the lab's benchmark never loads the lab into ``core``."""


@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    add_help_option=False,
    help="Benchmarks that print JSON: "
    + "; ".join(f"{name} ({what})" for name, what in BENCHMARKS.items())
    + ". `agentqmix bench NAME --help` lists a benchmark's options.",
)
def bench(
    ctx: typer.Context,
    name: Annotated[str | None, typer.Argument(help="Which benchmark.")] = None,
) -> None:
    import os
    import subprocess

    if name is None or name in ("--help", "-h"):
        console.print("benchmarks (agentqmix bench NAME [OPTIONS]):")
        for key, what in BENCHMARKS.items():
            console.print(f"  {key:<24} {what}", highlight=False)
        return
    if name not in BENCHMARKS:
        raise UserError(f"no benchmark {name!r}; choose one of {', '.join(BENCHMARKS)}.")
    module = "benchmarks." + name.replace("-", "_")
    # The benchmarks of this checkout, not of whichever one is installed.
    root = str(Path(__file__).resolve().parents[2])
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": path}
    raise typer.Exit(subprocess.call([sys.executable, "-m", module, *ctx.args], env=env))
