"""Fixtures every test folder may use; the order test files run in; which of them are slow."""

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.local_model import local_env, local_server

if "AGENTQMIX_DB" not in os.environ:
    # A command a test runs without --db logs to the default store, ./agentqmix.duckdb of the
    # folder the suite runs in — the store the lab then opens (a fresh clone's lab showed a
    # test's run instead of its first-start demo). Every such write goes here instead.
    _STORE = Path(tempfile.mkdtemp(prefix="agentqmix-tests-"))
    os.environ["AGENTQMIX_DB"] = str(_STORE / "default.duckdb")
    atexit.register(shutil.rmtree, _STORE, ignore_errors=True)

__all__ = ["local_env", "local_server"]

HEAVY_FIRST = (
    "tests/lab/test_browser.py",
    "tests/core/experiment/test_sweep.py",
    "tests/core/test_cli_team.py",
    "tests/core/experiment/test_finetune.py",
    "tests/core/qmix/test_games.py",
    "tests/core/test_cli_foundation.py",
    "tests/core/experiment/test_calibrate.py",
    "tests/core/baselines/test_runs.py",
    "tests/core/test_cli_real.py",
    "tests/core/backends/test_hostile_server.py",
    "tests/core/experiment/test_study.py",
)
"""The slowest test files (``pytest --durations``), started first: with two workers taking
whole files (scripts/test.sh), a long file started last would keep one worker busy while
the other idles."""


SLOW_FILES = {
    "tests/lab/test_browser.py": "a real headless Chromium over a running lab",
    "tests/core/experiment/test_sweep.py": "a local Ray cluster and the local model",
    "tests/core/test_cli_team.py": "training runs as subprocesses, the local model",
    "tests/core/experiment/test_finetune.py": "training runs, the local model",
    "tests/core/qmix/test_games.py": "trains QMIX on the classic games",
    "tests/core/test_cli_foundation.py": "a 1,500-episode training run",
    "tests/core/experiment/test_calibrate.py": "fits a society and plays held-out episodes",
    "tests/core/baselines/test_runs.py": "trains every learned-topology method, a local Ray",
    "tests/core/test_cli_real.py": "the local model end to end",
    "tests/core/backends/test_hostile_server.py": "misbehaving servers waited out",
    "tests/core/backends/test_slow_servers.py": "slow servers waited out",
    "tests/core/backends/test_local_server.py": "starts and stops the local model server",
    "tests/lab/test_jobs.py": "lab jobs on the local model",
    "tests/lab/test_real_demo.py": "the first-start demo's real episodes on the local model",
    "tests/lab/test_pages.py": "every page rendered on a seeded store (Streamlit's AppTest)",
    "tests/lab/test_page_state.py": "pages rerun through their widget states (AppTest)",
    "tests/lab/test_methods_view.py": "a tiny methods contest trained, then its page (AppTest)",
    "tests/lab/test_heldout.py": "a tiny run trained, evaluated by the Train page's job (AppTest)",
    # From the first timing of the quick tier (benchmarks/RESULTS.md, "Quick tier"): its
    # slowest tests, each a long training, a killed-and-resumed run or a benchmark end to end.
    "tests/core/experiment/test_train.py": "trains on the society until it really learns",
    "tests/core/experiment/test_disk_full.py": "training on a disk that fills up, resumed",
    "tests/core/experiment/test_eval_resume.py": "evaluations SIGKILLed or stopped, resumed",
    "tests/core/test_cli_resume.py": "a training run SIGKILLed, then resumed",
    "tests/core/experiment/test_study.py": "a transfer study on the local model, SIGKILLed, resumed",
    "tests/core/baselines/test_learning.py": "every method trained on three seeds",
    "tests/benchmarks/test_speed_benchmarks.py": "the speed benchmarks end to end",
    "tests/benchmarks/test_time_to_quality.py": "training runs timed and their copies evaluated",
    "tests/benchmarks/test_learning_benchmark.py": "trains and evaluates every policy",
    "tests/benchmarks/test_weights_benchmark.py": "serves the local model's weights",
    "tests/benchmarks/test_real_benchmark.py": "real episodes on the local model",
    "tests/benchmarks/test_calibration_real.py": "calibrates a society on recorded episodes",
    "tests/lab/test_demo.py": "the first-start demo trains and evaluates",
    "tests/lab/test_bench.py": "the lab benchmark times every page",
    "tests/lab/test_read_only_store.py": "every page as an unprivileged user",
}
"""Test files marked ``slow`` (the reason beside each): the local model server, the browser,
Ray, long training, killed-and-resumed runs, benchmarks end to end, waited-out servers, the
page renders. ``-m "not slow"`` leaves the
quick tier for the inner loop (scripts/quick.sh); the README's command runs everything."""


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects: it must see the marks added here
def pytest_collection_modifyitems(config, items):
    rank = {path: i for i, path in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(HEAVY_FIRST)))
    for item in items:
        if item.nodeid.split("::")[0] in SLOW_FILES:
            item.add_marker(pytest.mark.slow)
