"""Fixtures every test folder may use."""

from tests.local_model import local_env, local_server

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
)
"""The slowest test files (``pytest --durations``), started first: with two workers taking
whole files (scripts/test.sh), a long file started last would keep one worker busy while
the other idles."""


def pytest_collection_modifyitems(config, items):
    rank = {path: i for i, path in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(HEAVY_FIRST)))
