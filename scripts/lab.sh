#!/usr/bin/env bash
# Sets everything up and opens the lab on the embedded default (the synthetic society).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec agentqmix lab "$@"
