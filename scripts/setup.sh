#!/usr/bin/env bash
# Installs the project and its dependencies into the current Python environment.
# torch is pinned to 2.13.0: a CPU wheel on machines without a GPU image, the CUDA
# build from PyPI on a Linux machine with a GPU (device=auto then uses it).
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
python -m pip install --quiet --disable-pip-version-check "torch==2.13.0"
python -m pip install --quiet --disable-pip-version-check -e ".${extras:+[$extras]}"
