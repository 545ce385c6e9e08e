"""Record real episodes of SmolLM2-135M (llama.cpp, 127.0.0.1) for the calibration tests.

    python -m tests.core.backends.data.record_smollm OUT.duckdb [--episodes N] [--first K]
        [--benchmarks math mcq] [--policies single star ...]

Starts the shipped model's server (the product's local server, ``--backend local``), plays a 3-agent, 2-round team on held-out ``math``
and ``mcq`` tasks with every policy below (the same tasks for each: held-out tasks K, K+1, ..., K+N-1), one call at a time
with completions capped at 48 tokens, and logs one ``eval`` run per (benchmark, policy)
to OUT.duckdb. ``verify-aggregate`` (everyone execute_verify, then aggregate_refine) is
there because no fixed topology verifies. The file the tests read is this store, gzipped
(``smollm_real.duckdb.gz``), recorded on 2026-11-25 with
``--episodes 8 --benchmarks math --policies single star debate random verify-aggregate``
(40 episodes, 8 tasks; ~50 min on the shared 2-core machine).
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from dataclasses import replace

from core.actions import Action
from core.backends.local_server import LocalServerConfig, serve
from core.backends.openai_backend import OpenAIBackend, OpenAIBackendConfig
from core.experiment.evaluate import log_run
from core.team.env import TeamEnv
from core.team.options import TeamOptions
from core.team.plan import RoundPlan
from core.team.topologies import FixedTopology, make_policy

ROLES = ("solver", "analyst", "verifier")
ROUNDS = 2
MAX_TOKENS = 48
POLICIES = ("single", "star", "debate", "full", "random", "verify-aggregate")


class VerifyThenAggregate(FixedTopology):
    name = "verify-aggregate"

    def round_plan(self, n, round_index, obs, memory):
        action = Action.EXECUTE_VERIFY if round_index == 0 else Action.AGGREGATE_REFINE
        return RoundPlan(actions=[int(action)] * n)


def main(
    out: str,
    episodes: int = 8,
    first: int = 0,
    benchmarks: tuple[str, ...] = ("math", "mcq"),
    policies: tuple[str, ...] = POLICIES,
) -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that the server is stopped
    # One thread: on a shared, busy machine two llama.cpp threads spin-wait on each other
    # (measured: one 300-token call took 35 s with 2 threads, 0.6-1.4 s with 1).
    server = serve(LocalServerConfig(n_ctx=2048, n_threads=1))
    base_url, model = server.url, server.model.name
    try:
        for benchmark in benchmarks:
            opts = TeamOptions(
                benchmark=benchmark, backend="openai", model=model, base_url=base_url,
                roles=ROLES, rounds=ROUNDS, concurrency=1, use_cache=False, seed=0,
            )  # fmt: skip
            for name in policies:
                policy = VerifyThenAggregate() if name == "verify-aggregate" else make_policy(name)
                backend = OpenAIBackend(
                    OpenAIBackendConfig(
                        model=model, base_url=base_url, concurrency=1, use_cache=False,
                        max_tokens=MAX_TOKENS, seed=0, timeout_s=120,
                    )
                )  # fmt: skip
                env = TeamEnv(replace(opts), "eval", backend=backend)
                t0 = time.monotonic()
                try:
                    records = env.run(policy, range(first, first + episodes), width=1)
                finally:
                    env.close()
                run_id = log_run(
                    out,
                    "eval",
                    opts,
                    policy.name,
                    opts.seed,
                    records,
                    {"recording": {"max_tokens": MAX_TOKENS}},
                )
                print(
                    f"{benchmark} {name}: {len(records)} episodes in "
                    f"{time.monotonic() - t0:.0f} s -> run {run_id}",
                    flush=True,
                )
    finally:
        server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Record real SmolLM2 episodes.")
    parser.add_argument("out")
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--benchmarks", nargs="+", default=["math", "mcq"])
    parser.add_argument("--policies", nargs="+", default=list(POLICIES), choices=POLICIES)
    a = parser.parse_args()
    main(a.out, a.episodes, a.first, tuple(a.benchmarks), tuple(a.policies))
