#!/usr/bin/env bash
# Sets everything up and opens the lab on the embedded default (the synthetic society).
# The local model's llama.cpp build runs in the background; the lab shows when it is ready.
set -euo pipefail
cd "$(dirname "$0")/.."
AGENTQMIX_LOCAL_SETUP=background bash scripts/setup.sh
exec agentqmix lab "$@"
