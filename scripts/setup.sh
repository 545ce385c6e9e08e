#!/usr/bin/env bash
# Installs the project and its dependencies into the current Python environment.
# torch is pinned to 2.13.0: a CPU wheel on machines without a GPU image, the CUDA
# build from PyPI on a Linux machine with a GPU (device=auto then uses it).
# bubblewrap (Debian's package) is the sandbox for generated code; without it, commands
# that would run generated code refuse (core/sandbox.py) unless --sandbox process is given.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
python -m pip install --quiet --disable-pip-version-check "torch==2.13.0"
python -m pip install --quiet --disable-pip-version-check -e ".${extras:+[$extras]}"
if ! command -v bwrap >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null
  else
    echo "bubblewrap (bwrap) is not installed and cannot be installed here (needs root and" \
      "apt-get); code benchmarks (humaneval) will refuse to run until it is, or run in the" \
      "weaker sandbox with --sandbox process" >&2
  fi
fi
