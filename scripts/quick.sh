#!/usr/bin/env bash
# The quick tier, for the inner loop: the layer contracts, then every test but the files
# tests/conftest.py marks slow (SLOW_FILES, a reason beside each: the local model server, the
# browser, Ray, long training, benchmarks end to end...), on two workers as scripts/test.sh
# runs them. No set-up: run
# scripts/test.sh once first. Before a commit is merged the whole suite still runs
# (scripts/test.sh). Extra arguments go to pytest (e.g. tests/core/team -x).
set -euo pipefail
cd "$(dirname "$0")/.."
lint-imports --no-cache
exec python -m pytest -n "${AGENTQMIX_TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder \
  -m "not slow" "$@"
