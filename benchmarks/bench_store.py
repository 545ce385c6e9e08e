"""Episode-store benchmark: logging throughput, episode load latency, training slowdown.

Same as ``agentqmix bench store --json``; prints JSON.
"""

import json
import sys

from core.store.bench import run_store_bench

if __name__ == "__main__":
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    print(json.dumps(run_store_bench(rows=rows), indent=2))
