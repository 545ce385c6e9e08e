"""Lab benchmark: every page's render time and the Replay round slider on 100,000 episodes.

    python benchmarks/bench_lab.py [--episodes 100000] [--db PATH]

Prints JSON (see ``lab.bench``). ``--db PATH`` keeps the built store and reuses it next time.
"""

import argparse
import json

from streamlit.logger import set_log_level

from lab.bench import run_lab_bench

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=100_000)
    parser.add_argument("--db", default=None, help="store to build once and reuse")
    args = parser.parse_args()
    # Clearing Streamlit's caches outside a script run logs harmless "no ScriptRunContext" lines.
    set_log_level("error")
    print(json.dumps(run_lab_bench(args.episodes, db=args.db), indent=2))
