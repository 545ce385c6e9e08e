#!/usr/bin/env bash
# Installs the project and its dependencies into the current Python environment.
# torch is pinned to 2.13.0: a CPU wheel on machines without a GPU image, the CUDA
# build from PyPI on a Linux machine with a GPU (device=auto then uses it).
# bubblewrap (Debian's package) is the sandbox for generated code; without it, commands
# that would run generated code refuse (core/sandbox.py) unless --sandbox process is given.
#
# The local model (llama.cpp, built from source: ~5 minutes once) comes last:
# AGENTQMIX_LOCAL_SETUP=now (default) installs it here with progress lines;
# =background starts that install in the background and returns at once (the lab does
# this: its first page must not wait; it shows "local model: installing..." until done).
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
# Every step says what it does, and pip shows what it fetches and installs: a first set-up
# takes minutes, and a newcomer must never wonder whether it hangs.
started=$SECONDS
say() { echo "setup [$((SECONDS - started)) s]: $*"; }
pip_install() { python -m pip install --disable-pip-version-check --progress-bar on "$@"; }
if python -c 'import torch, sys; sys.exit(torch.__version__.split("+")[0] != "2.13.0")' 2>/dev/null; then
  say "torch 2.13.0 is installed"
else
  say "installing torch 2.13.0 (a large download the first time: a few minutes)"
  pip_install "torch==2.13.0"
fi
say "installing the project and its dependencies (pyproject.toml${extras:+, extras: $extras})"
pip_install -e ".${extras:+[$extras]}"
if ! command -v bwrap >/dev/null 2>&1; then
  say "installing bubblewrap (the sandbox for generated code)"
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null
  else
    echo "bubblewrap (bwrap) is not installed and cannot be installed here (needs root and" \
      "apt-get); code benchmarks (humaneval) will refuse to run until it is, or run in the" \
      "weaker sandbox with --sandbox process" >&2
  fi
fi
case "${AGENTQMIX_LOCAL_SETUP:-now}" in
  now) bash scripts/setup_local.sh ;;
  background)
    state="${XDG_CACHE_HOME:-$HOME/.cache}/agentqmix"
    mkdir -p "$state"
    pidfile="$state/local-setup.pid"
    if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
      echo "local model: still installing in the background (log: $state/local-setup.log)"
    else
      nohup bash scripts/setup_local.sh >"$state/local-setup.log" 2>&1 </dev/null &
      echo $! >"$pidfile"
      echo "local model: installing in the background (log: $state/local-setup.log)"
    fi
    ;;
  *) echo "AGENTQMIX_LOCAL_SETUP must be now or background" >&2; exit 2 ;;
esac
say "done"
