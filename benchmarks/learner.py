"""Learner updates per second at the default network sizes, on random episodes; the
multiply-adds of one update and this machine's dense-matmul rate at the same shapes, so the
rate can be read against its arithmetic limit; optionally the published implementation,
timed in the same run.

    agentqmix bench learner [--agents 3] [--batch 32] [--rounds 3] [--seconds 5] [--threads 0]
        [--device auto] [--precision fp32] [--reference DIR [--reference-script PATH]] [--json]

``--reference DIR`` runs ``bench_reference_learner.py`` (the project's side tools, not part of
it) on the published code unpacked in DIR, right before and right after ours, with the same
agents, batch, rounds and threads, and reports both rates and our rate over the faster one.
It also reports both learners' CPU milliseconds per update and their ratio, the figure a
machine busy with other work distorts least (wall rates there depend on who else runs):
ours from the process's CPU clock around each update, the published one's as the CPU time
of its process with ``--reference-updates`` updates minus that of a run with one update
(the same imports and set-up), divided by the difference.

Prints one JSON object (with ``--json``; a line otherwise).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from benchmarks.common import Parser, float_in, int_in, run_main, user_errors
from core.errors import UserError
from core.qmix.buffer import EpisodeBatch
from core.qmix.config import PRECISIONS
from core.qmix.encoders import AgentNetConfig, AgentNetwork
from core.qmix.learner import LearnerConfig, QLearner
from core.qmix.mixers import MIXERS, MixerConfig, make_mixer
from core.qmix.seeding import resolve_device, seed_everything, torch_threads

OBS_DIM = 96
"""The team's observation width at the defaults (hash embedding 96 + 4 agents + 3 rounds + 30,
rounded): the learner's cost hardly depends on it."""
REFERENCE_SCRIPT = "../shared/tools/bench_reference_learner.py"
MATMULS = ("mm", "addmm", "bmm")


def random_batch(
    batch: int,
    rounds: int,
    n_agents: int,
    obs_dim: int,
    state_dim: int,
    n_actions: int,
    density: float,
) -> EpisodeBatch:
    """A batch of random episodes with random round graphs of the given edge density."""
    t = rounds
    adj = torch.rand(batch, t + 1, n_agents, n_agents) < density
    adj &= ~torch.eye(n_agents, dtype=torch.bool)
    return EpisodeBatch(
        obs=torch.randn(batch, t + 1, n_agents, obs_dim),
        state=torch.randn(batch, t + 1, state_dim),
        adj=adj,
        avail=torch.ones(batch, t + 1, n_agents, n_actions, dtype=torch.bool),
        actions=torch.randint(0, n_actions, (batch, t, n_agents)),
        reward=torch.randn(batch, t),
        terminated=torch.zeros(batch, t).index_fill_(1, torch.tensor([t - 1]), 1.0),
        filled=torch.ones(batch, t),
    )


def build(
    n_agents: int,
    batch: int,
    rounds: int,
    device: torch.device,
    mixer: str = "qmix",
    precision: str = "fp32",
    n_actions: int = 6,
    density: float = 0.5,
) -> tuple[QLearner, EpisodeBatch]:
    """A learner at the default network sizes and one random batch, on ``device``."""
    seed_everything(0)
    state_dim = n_agents * OBS_DIM + 16
    agent = AgentNetwork(OBS_DIM, n_agents, n_actions, AgentNetConfig()).to(device)
    mix = make_mixer(n_agents, state_dim, MixerConfig(kind=mixer)).to(device)
    learner = QLearner(agent, mix, LearnerConfig(batch_size=batch, precision=precision))
    data = random_batch(batch, rounds, n_agents, OBS_DIM, state_dim, n_actions, density)
    return learner, data.to(device)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def time_updates(
    learner: QLearner, data: EpisodeBatch, seconds: float, device: torch.device
) -> tuple[list[float], list[float]]:
    """Wall and CPU seconds (all of this process's threads) of each of back-to-back updates
    for about ``seconds`` (at least 3)."""
    for _ in range(3):  # warm-up
        learner.train(data)
    times: list[float] = []
    cpu: list[float] = []
    start = time.perf_counter()
    while time.perf_counter() - start < seconds or len(times) < 3:
        sync(device)
        t0, c0 = time.perf_counter(), time.process_time()
        learner.train(data)
        sync(device)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return times, cpu


# ------------------------------------------------------------------ arithmetic of one update


class MatmulLog(TorchDispatchMode):
    """Records every dense matmul torch runs: ``(op, shapes of its operands, dtype) -> count``."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[tuple[str, tuple[tuple[int, ...], ...], torch.dtype]] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name in MATMULS:
            operands = args[1:3] if name == "addmm" else args[:2]
            key = (name, tuple(tuple(a.shape) for a in operands), operands[0].dtype)
            self.calls[key] += 1
        return func(*args, **(kwargs or {}))


def macs_of(op: str, shapes: tuple[tuple[int, ...], ...]) -> int:
    """Multiply-adds of one matmul: ``(m, k) @ (k, n)`` is ``m*k*n``; bmm adds the batch."""
    a, b = shapes
    batch = a[0] if op == "bmm" else 1
    return batch * a[-2] * a[-1] * b[-1]


def update_matmuls(learner: QLearner, data: EpisodeBatch) -> Counter:
    """The matmuls of one update (forward, backward and target pass)."""
    with MatmulLog() as log:
        loss, _ = learner.loss(data)
        loss.backward()
    learner.optimiser.zero_grad(set_to_none=True)
    return log.calls


def matmul_seconds(
    op: str, shapes: tuple[tuple[int, ...], ...], dtype: torch.dtype, device: torch.device
) -> float:
    """Best-of-3 seconds of one matmul of these shapes on fresh contiguous operands."""
    a, b = (torch.randn(s, device=device).to(dtype) for s in shapes)
    matmul = torch.bmm if op == "bmm" else torch.mm
    matmul(a, b)
    reps = max(3, min(2000, int(2e7 / max(1, macs_of(op, shapes)))))
    best = float("inf")
    for _ in range(3):
        sync(device)
        start = time.perf_counter()
        for _ in range(reps):
            matmul(a, b)
        sync(device)
        best = min(best, (time.perf_counter() - start) / reps)
    return best


def arithmetic(learner: QLearner, data: EpisodeBatch, device: torch.device) -> dict[str, Any]:
    """Multiply-adds per update, and how long this machine's dense matmuls alone take for
    them: the update's arithmetic limit."""
    calls = update_matmuls(learner, data)
    macs = sum(macs_of(op, shapes) * k for (op, shapes, _), k in calls.items())
    floor = sum(
        matmul_seconds(op, shapes, dtype, device) * k for (op, shapes, dtype), k in calls.items()
    )
    return {
        "macs_per_update": macs,
        "matmul_calls_per_update": sum(calls.values()),
        "matmul_gmacs_per_s": round(macs / floor / 1e9, 1),
        "arithmetic_floor_ms": round(floor * 1000, 2),
        "arithmetic_limit_updates_per_s": round(1 / floor, 1),
    }


# ------------------------------------------------------------------------- the reference


def reference_rate(
    ref_dir: str, script: str, n_agents: int, batch: int, rounds: int, threads: int, updates: int
) -> dict[str, Any]:
    """Run the published learner's timing script once; its JSON line."""
    if not Path(script).is_file():
        raise UserError(f"--reference-script {script} does not exist.")
    if not (Path(ref_dir) / "qmix").is_dir():
        raise UserError(f"--reference {ref_dir} holds no qmix/ folder of the published code.")
    cmd = [sys.executable, script, "--ref", ref_dir, "--agents", str(n_agents)]
    cmd += ["--batch", str(batch), "--rounds", str(rounds), "--threads", str(threads)]
    cmd += ["--updates", str(updates)]
    cpu_before = children_cpu()
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if done.returncode != 0 or not lines:
        raise UserError(f"the reference learner failed: {done.stderr.strip()[-300:]}")
    return {**json.loads(lines[-1]), "process_cpu_s": children_cpu() - cpu_before}


def children_cpu() -> float:
    """CPU seconds of this process's ended children (user + system)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


# ---------------------------------------------------------------------------------- main


def learner_benchmark(
    n_agents: int = 3,
    batch: int = 32,
    rounds: int = 3,
    device: str = "auto",
    seconds: float = 5.0,
    mixer: str = "qmix",
    threads: int = 0,
    precision: str = "fp32",
    density: float = 0.5,
    with_arithmetic: bool = True,
) -> dict[str, Any]:
    """Learner updates per second at the default network sizes on random data."""
    with torch_threads(threads):
        dev = resolve_device(device)
        learner, data = build(n_agents, batch, rounds, dev, mixer, precision, density=density)
        load_before = os.getloadavg()
        times, cpu = time_updates(learner, data, seconds, dev)
        steps, elapsed = len(times), sum(times)
        result: dict[str, Any] = {
            "benchmark": "learner",
            "n_agents": n_agents,
            "batch": batch,
            "rounds": rounds,
            "device": str(dev),
            "precision": precision,
            "mixer": mixer,
            "edge_density": density,
            "torch_threads": torch.get_num_threads(),
            "updates": steps,
            "seconds": round(elapsed, 3),
            "train_steps_per_s": round(steps / elapsed, 2),
            "ms_per_update": round(1000 * elapsed / steps, 2),
            # On a shared machine the fastest updates are the ones nobody interrupted.
            "ms_per_update_median_min": [
                round(1000 * sorted(times)[steps // 2], 2),
                round(1000 * min(times), 2),
            ],
            "cpu_ms_per_update": round(1000 * sorted(cpu)[steps // 2], 2),
            "load_average": [round(x, 2) for x in load_before],
        }
        if dev.type == "cuda":
            result["cuda_peak_allocated_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
        if with_arithmetic:
            result.update(arithmetic(learner, data, dev))
            result["fraction_of_arithmetic_limit"] = round(
                result["arithmetic_floor_ms"] / result["ms_per_update"], 2
            )
        return result


def main(argv: list[str] | None = None) -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int_in(1, 256), default=3)
    parser.add_argument("--batch", type=int_in(1, 4096), default=32)
    parser.add_argument("--rounds", type=int_in(1, 64), default=3)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--seconds", type=float_in(0.01, 3600), default=5.0)
    parser.add_argument("--threads", type=int_in(0, 256), default=0, help="0 = torch's default")
    parser.add_argument("--mixer", default="qmix", choices=list(MIXERS))
    parser.add_argument("--precision", default="fp32", choices=PRECISIONS)
    parser.add_argument("--reference", metavar="DIR", help="published code (qmix/, utils/)")
    parser.add_argument("--reference-script", default=REFERENCE_SCRIPT, metavar="PATH")
    parser.add_argument("--reference-updates", type=int_in(2, 10_000), default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with user_errors():
        report(args)


def report(args: argparse.Namespace) -> None:
    """Ours, between two runs of the published learner when ``--reference`` is given."""

    def reference(updates: int = args.reference_updates) -> dict[str, Any]:
        threads = args.threads or torch.get_num_threads()
        shape = (args.agents, args.batch, args.rounds, threads, updates)
        return reference_rate(args.reference, args.reference_script, *shape)

    before = reference() if args.reference else None
    result = learner_benchmark(
        n_agents=args.agents,
        batch=args.batch,
        rounds=args.rounds,
        device=args.device,
        seconds=args.seconds,
        threads=args.threads,
        mixer=args.mixer,
        precision=args.precision,
    )
    if before is not None:
        after = reference()
        rates = [before["train_steps_per_s"], after["train_steps_per_s"]]
        result["reference"] = {
            "train_steps_per_s_before_after": [round(r, 3) for r in rates],
            "threads": before["threads"],
            "load_average_after": [round(x, 2) for x in os.getloadavg()],
        }
        # Against the faster reference run: a run the machine's load slowed must not flatter us.
        result["speedup_vs_reference"] = round(result["train_steps_per_s"] / max(rates), 1)
        # The least disturbed of the two long runs, less a one-update run's imports and set-up.
        extra = min(before["process_cpu_s"], after["process_cpu_s"]) - reference(1)["process_cpu_s"]
        ref_cpu_ms = 1000 * extra / (args.reference_updates - 1) if extra > 0 else None
        result["reference"]["cpu_ms_per_update"] = ref_cpu_ms and round(ref_cpu_ms, 2)
        result["speedup_vs_reference_cpu"] = ref_cpu_ms and round(
            ref_cpu_ms / result["cpu_ms_per_update"], 1
        )
    line = f"{result['train_steps_per_s']} learner updates/s on {result['device']}"
    run_main(result, args.json, line)


if __name__ == "__main__":
    main()
