"""The speed benchmarks (issue 13) run end to end with tiny settings and report what they
promise: multiply-adds that agree with torch's own counter, the machine's matmul rate, the
reference learner beside ours, episodes/s per width, a scaling table with memory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

from benchmarks.learner import build, learner_benchmark, macs_of, update_matmuls
from benchmarks.rollouts import rollout_benchmark
from tests.core.torch_threads import one_torch_thread  # noqa: F401

REPO = Path(__file__).resolve().parents[2]


def bench(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "core.cli", "bench", *args]
    env = {"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO, env=env)


def test_multiply_adds_agree_with_torchs_flop_counter():
    for precision in ("fp32", "bf16"):
        learner, data = build(3, 4, 2, torch.device("cpu"), precision=precision)
        calls = update_matmuls(learner, data)
        ours = sum(macs_of(op, shapes) * k for (op, shapes, _), k in calls.items())
        counter = FlopCounterMode(display=False)
        with counter:
            loss, _ = learner.loss(data)
            loss.backward()
        assert ours == counter.get_total_flops() // 2 > 0
        assert {dtype for (_, _, dtype) in calls} == {
            torch.bfloat16 if precision == "bf16" else torch.float32
        }


def test_learner_reports_its_arithmetic_limit():
    report = learner_benchmark(n_agents=3, batch=4, rounds=2, device="cpu", seconds=0.2)
    assert report["device"] == "cpu" and report["updates"] >= 3
    assert report["macs_per_update"] > 0 and report["matmul_gmacs_per_s"] > 0
    # The matmuls alone cannot take longer than the whole update (up to timing noise).
    assert 0 < report["fraction_of_arithmetic_limit"] < 3
    assert len(report["load_average"]) == 3


def test_learner_beside_a_reference_script(tmp_path: Path):
    """--reference runs the script before and after ours and divides; here a stand-in
    script that reports 2 updates/s, and spends CPU in proportion to its updates, stands for
    the published learner."""
    (tmp_path / "ref" / "qmix").mkdir(parents=True)
    script = tmp_path / "reference.py"
    script.write_text(
        "import json, sys\n"
        "args = dict(zip(sys.argv[1::2], sys.argv[2::2]))\n"
        "print('noise from the published code')\n"
        "sum(range(300_000 * int(args['--updates'])))\n"
        "print(json.dumps({'train_steps_per_s': 2.0, 'threads': int(args['--threads']),"
        " 'agents': int(args['--agents'])}))\n"
    )
    flags = "--agents 3 --batch 4 --rounds 2 --seconds 0.2 --threads 1 --device cpu --json"
    ref = ["--reference", str(tmp_path / "ref"), "--reference-script", str(script)]
    done = bench("learner", *flags.split(), *ref)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["reference"]["train_steps_per_s_before_after"] == [2.0, 2.0]
    assert report["reference"]["threads"] == 1
    assert report["speedup_vs_reference"] == round(report["train_steps_per_s"] / 2.0, 1)
    # CPU per update of the stand-in: its runs with 20 updates less its run with one.
    ref_cpu = report["reference"]["cpu_ms_per_update"]
    assert ref_cpu > 0 and report["cpu_ms_per_update"] > 0
    assert report["speedup_vs_reference_cpu"] == round(ref_cpu / report["cpu_ms_per_update"], 1)


def test_a_missing_reference_is_one_sentence_and_exit_2(tmp_path: Path):
    done = bench("learner", "--seconds", "0.1", "--reference", str(tmp_path / "nowhere"))
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in done.stderr


def test_rollouts_per_width():
    report = rollout_benchmark(widths=(1, 4), episodes=4, device="cpu")
    assert report["device"] == "cpu" and report["backend"] == "sim" and report["n_agents"] == 4
    assert [row["width"] for row in report["widths"]] == [1, 4]
    assert all(row["episodes_per_s"] > 0 for row in report["widths"])


def test_scaling_table_with_memory():
    flags = "--agents 3 --rounds 1,2 --seconds 0.2 --episodes 2 --width 2 --json"
    done = bench("scaling", *flags.split())
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["device"] == "cpu"
    assert [(r["n_agents"], r["rounds"]) for r in report["learner"]] == [(3, 1), (3, 2)]
    assert [(r["n_agents"], r["rounds"]) for r in report["rollouts"]] == [(3, 1), (3, 2)]
    one, two = report["learner"]
    assert two["macs_per_update"] > one["macs_per_update"] > 0  # more rounds, more work
    assert two["saved_for_backward_mb"] > one["saved_for_backward_mb"] > 0
    assert all(r["peak_rss_mb"] > 50 for r in report["learner"] + report["rollouts"])


def test_scaling_rejects_a_bad_list_in_one_sentence():
    done = bench("scaling", "--agents", "3,x")
    assert done.returncode == 2
    assert done.stderr.strip() == "error: --agents must be comma-separated integers, not '3,x'."


def test_replay_bytes_is_what_the_buffer_allocates():
    from benchmarks.rollouts import replay_bytes
    from core.qmix.buffer import ReplayBuffer
    from core.qmix.env import EnvShapes

    for n in (2, 9):
        shapes = EnvShapes(
            n_agents=n, n_actions=6, obs_dim=7 + n, state_dim=n * (7 + n) + 3, max_steps=3
        )
        buffer = ReplayBuffer(shapes, capacity=5)
        allocated = sum(v.numel() * v.element_size() for v in vars(buffer.data).values())
        assert replay_bytes(shapes) * 5 == allocated
