#!/usr/bin/env bash
# Sets everything up (Python packages, Debian's chromium for the browser test) and runs
# the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev,embeddings
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "chromium is not installed and cannot be installed here; browser tests will be skipped" >&2
  fi
fi
# The layers of docs/architecture.md, enforced (imports only point down).
lint-imports --no-cache
# Two workers (pytest-xdist), each taking whole test files so a file's module fixtures (a
# seeded store, a local model server) are built once: much of the suite waits on servers,
# subprocesses and a browser: on two cores the suite took 800 s with two workers against
# 1,314 s in one process (benchmarks/RESULTS.md, "Test suite time").
# --no-loadscope-reorder keeps the order tests/conftest.py gives (the slowest files first):
# xdist otherwise sorts files by their number of tests, which sent the two browser tests
# (a fifth of the suite's time) to a worker near the end while the other one idled.
# AGENTQMIX_TEST_WORKERS=0 runs everything in this one process.
exec python -m pytest -n "${AGENTQMIX_TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder \
  --durations=25 "$@"
