"""How the cost grows: learner updates/s and rollout episodes/s against the number of agents
N and of rounds T, with memory.

    agentqmix bench scaling [--quick] [--agents 3,8,16,32,64,128] [--rounds 1,3,6]
        [--seconds 3] [--episodes 64] [--threads 1] [--device cpu] [--json]

Every cell runs in its own process, so that its peak resident memory is its own. Learner
cells: the default network sizes, batch 32, random round graphs of density 0.5 (as
``bench learner``), with the multiply-adds of one update, the rate they were done at, and
the bytes autograd keeps for the backward pass. Rollout cells: the greedy learned policy on
the synthetic society, ``--width`` episodes in lockstep (as ``bench rollouts``); the team
allows at most 64 agents, so larger N has learner figures only.

``--quick``: N = 3, 16, 64 and T = 1, 3, one second per learner cell, 32 episodes per
rollout cell.

Prints one JSON object (with ``--json``; a table otherwise).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from typing import Any

import torch

from benchmarks.common import Parser, float_in, int_in, run_main, user_errors
from core.errors import UserError
from core.team.settings import MAX_AGENTS

AGENTS = (3, 8, 16, 32, 64, 128)
ROUNDS = (1, 3, 6)
QUICK_AGENTS, QUICK_ROUNDS = (3, 16, 64), (1, 3)


def peak_rss_mb() -> float:
    """This process's peak resident set (Linux reports kilobytes)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def saved_for_backward_mb(learner: Any, data: Any) -> float:
    """Megabytes of activations autograd keeps between one loss and its backward (the
    networks' own parameters, which it keeps by reference, not counted)."""
    params = {p.data_ptr() for p in learner.params}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.data_ptr() not in params:
            seen[t.data_ptr()] = max(seen.get(t.data_ptr(), 0), t.numel() * t.element_size())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss, _ = learner.loss(data)
    loss.backward()
    learner.optimiser.zero_grad(set_to_none=True)
    return round(sum(seen.values()) / 2**20, 1)


def learner_cell(n_agents: int, rounds: int, seconds: float, threads: int, device: str) -> dict:
    from benchmarks.learner import build, learner_benchmark, macs_of, update_matmuls
    from core.qmix.seeding import resolve_device

    result = learner_benchmark(
        n_agents=n_agents,
        rounds=rounds,
        seconds=seconds,
        threads=threads,
        device=device,
        with_arithmetic=False,
    )
    learner, data = build(n_agents, 32, rounds, resolve_device(device))
    calls = update_matmuls(learner, data)
    macs = sum(macs_of(op, shapes) * k for (op, shapes, _), k in calls.items())
    return {
        "kind": "learner",
        "n_agents": n_agents,
        "rounds": rounds,
        "device": result["device"],
        "torch_threads": result["torch_threads"],
        "updates_per_s": result["train_steps_per_s"],
        "ms_per_update_median_min": result["ms_per_update_median_min"],
        "macs_per_update": macs,
        "achieved_gmacs_per_s": round(macs * result["train_steps_per_s"] / 1e9, 1),
        "saved_for_backward_mb": saved_for_backward_mb(learner, data),
        "cuda_peak_allocated_mb": result.get("cuda_peak_allocated_mb"),
        "peak_rss_mb": peak_rss_mb(),
        "load_average": result["load_average"],
    }


def rollout_cell(n_agents: int, rounds: int, episodes: int, width: int, device: str) -> dict:
    from benchmarks.rollouts import rollout_benchmark

    result = rollout_benchmark(
        widths=(width,),
        episodes=episodes,
        n_agents=n_agents,
        rounds=rounds,
        device=device,
        repeats=1,
    )
    row = result["widths"][0]
    return {
        "kind": "rollouts",
        "n_agents": n_agents,
        "rounds": rounds,
        "device": result["device"],
        "width": width,
        "episodes": episodes,
        "episodes_per_s": row["episodes_per_s"],
        "agent_turns_per_s": round(row["episodes_per_s"] * n_agents * rounds, 1),
        "replay_buffer_mb_per_1000_episodes": result["replay_buffer_mb_per_1000_episodes"],
        "peak_rss_mb": peak_rss_mb(),
        "load_average": result["load_average"],
    }


def run_cell(argv: list[str]) -> dict:
    """One cell in a fresh process (its own peak memory); its JSON."""
    cmd = [sys.executable, "-m", "benchmarks.scaling", "--cell", *argv]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"scaling cell {argv} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout)


def scaling(
    agents: tuple[int, ...],
    rounds: tuple[int, ...],
    seconds: float,
    episodes: int,
    width: int,
    threads: int,
    device: str,
) -> dict[str, Any]:
    common = ["--threads", str(threads), "--device", device]
    learner, rollouts = [], []
    for t in rounds:
        for n in agents:
            shape = ["--agents", str(n), "--rounds", str(t)]
            learner.append(run_cell(["learner", *shape, "--seconds", str(seconds), *common]))
            if n <= MAX_AGENTS:
                cell = ["rollouts", *shape, "--episodes", str(episodes), "--width", str(width)]
                rollouts.append(run_cell([*cell, *common]))
    return {
        "benchmark": "scaling",
        "device": learner[0]["device"] if learner else device,
        "torch_threads": threads,
        "learner": learner,
        "rollouts": rollouts,
        "rollouts_skipped": [n for n in agents if n > MAX_AGENTS],
        "load_average_end": [round(x, 2) for x in os.getloadavg()],
    }


def table(result: dict[str, Any]) -> str:
    lines = [
        "kind      N    T   per s      ms (median)   GMAC/s  saved MB  peak RSS MB  buffer MB/1k"
    ]
    for row in result["learner"]:
        lines.append(
            f"learner  {row['n_agents']:4d} {row['rounds']:3d} {row['updates_per_s']:9.2f} "
            f"{row['ms_per_update_median_min'][0]:12.1f} {row['achieved_gmacs_per_s']:8.1f} "
            f"{row['saved_for_backward_mb']:9.1f} {row['peak_rss_mb']:11.1f}"
        )
    for row in result["rollouts"]:
        lines.append(
            f"rollouts {row['n_agents']:4d} {row['rounds']:3d} {row['episodes_per_s']:9.1f} "
            f"{'':12} {'':8} {'':9} {row['peak_rss_mb']:11.1f} "
            f"{row['replay_buffer_mb_per_1000_episodes']:12.1f}"
        )
    return "\n".join(lines)


def ints(text: str, flag: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise UserError(f"{flag} must be comma-separated integers, not {text!r}.") from None
    if not values or min(values) < 1:
        raise UserError(f"{flag} must list integers >= 1, not {text!r}.")
    return values


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--cell"]:
        return cell_main(argv[1:])
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--agents", default=None, help="comma-separated N")
    parser.add_argument("--rounds", default=None, help="comma-separated T")
    parser.add_argument("--seconds", type=float_in(0.01, 3600), default=None)
    parser.add_argument("--episodes", type=int_in(1, 10**6), default=None)
    parser.add_argument("--width", type=int_in(1, 4096), default=32)
    parser.add_argument("--threads", type=int_in(1, 256), default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with user_errors():
        from core.qmix.seeding import resolve_device

        resolve_device(args.device)  # here, not in the first cell's process
        agents = ints(args.agents, "--agents") if args.agents else None
        rounds = ints(args.rounds, "--rounds") if args.rounds else None
        result = scaling(
            agents or (QUICK_AGENTS if args.quick else AGENTS),
            rounds or (QUICK_ROUNDS if args.quick else ROUNDS),
            args.seconds or (1.0 if args.quick else 3.0),
            args.episodes or (32 if args.quick else 64),
            args.width,
            args.threads,
            args.device,
        )
    run_main(result, args.json, table(result))
    return None


def cell_main(argv: list[str]) -> None:
    parser = Parser(prog="benchmarks.scaling --cell")
    parser.add_argument("kind", choices=("learner", "rollouts"))
    parser.add_argument("--agents", type=int_in(1, 256), required=True)
    parser.add_argument("--rounds", type=int_in(1, 64), required=True)
    parser.add_argument("--seconds", type=float_in(0.01, 3600), default=3.0)
    parser.add_argument("--episodes", type=int_in(1, 10**6), default=64)
    parser.add_argument("--width", type=int_in(1, 4096), default=32)
    parser.add_argument("--threads", type=int_in(1, 256), default=1)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    with user_errors():
        if args.kind == "learner":
            out = learner_cell(args.agents, args.rounds, args.seconds, args.threads, args.device)
        else:
            out = rollout_cell(args.agents, args.rounds, args.episodes, args.width, args.device)
    sys.stdout.write(json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
