"""Wall time per episode of the OpenAI back-end against a server with fixed latency.

Runs real episodes (the one rollout path: rounds of ``--in-flight`` episodes in lockstep,
layers gathered, decision agent) of 4 agents x 3 rounds against the fake chat-completions server on
127.0.0.1 (100 ms per reply by default), through the real ``openai`` client, for
``--concurrency`` 1, 2, 4, 8 and 1 or 4 episodes in flight. Prints JSON.

    agentqmix bench openai-concurrency [--latency-ms 100] [--episodes 4]
"""

from __future__ import annotations

import json
import tempfile
import time

from benchmarks.common import Parser, float_in, int_in, user_errors
from core.tasks.base import Task, TaskList
from core.team.env import TeamEnv
from core.team.options import TeamOptions
from core.team.topologies import make_policy
from tests.core.backends.fake_openai import FakeOpenAIServer


def tasks(n: int) -> list[Task]:
    return [
        Task(
            f"bench-{i}",
            "math",
            "math",
            f"What is {i + 3} * {i + 7} + {i}?",
            str((i + 3) * (i + 7) + i),
        )
        for i in range(n)
    ]


def measure(url: str, policy_name: str, concurrency: int, in_flight: int, n_episodes: int) -> dict:
    opts = TeamOptions(
        backend="openai", model="fake", base_url=url, use_cache=False, concurrency=concurrency
    )
    env = TeamEnv(opts, source=TaskList(tasks(n_episodes), "bench"))
    t0 = time.perf_counter()
    records = env.run(make_policy(policy_name), range(n_episodes), width=in_flight)
    wall = time.perf_counter() - t0
    failed = env.backend.stats["failed_calls"]
    env.close()
    calls = sum(len(r.calls) for r in records)
    return {
        "policy": policy_name,
        "concurrency": concurrency,
        "episodes_in_flight": in_flight,
        "episodes": n_episodes,
        "wall_s": round(wall, 3),
        "wall_per_episode_s": round(wall / n_episodes, 3),
        "calls": calls,
        "calls_per_s": round(calls / wall, 1),
        "accuracy": sum(r.score for r in records) / n_episodes,
        "failed_calls": failed,
    }


def main() -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency-ms", type=float_in(0.0, 60_000.0), default=100.0)
    parser.add_argument("--episodes", type=int_in(1, 10_000), default=4)
    parser.add_argument("--policies", default="debate,full")
    args = parser.parse_args()
    with user_errors():  # an unknown topology, before the server starts
        for policy in args.policies.split(","):
            make_policy(policy)
    rows = []
    with tempfile.TemporaryDirectory(), FakeOpenAIServer(latency_s=args.latency_ms / 1000) as srv:
        for policy in args.policies.split(","):
            for in_flight in (1, 4):
                for concurrency in (1, 2, 4, 8):
                    rows.append(measure(srv.url, policy, concurrency, in_flight, args.episodes))
    print(
        json.dumps(
            {"latency_ms": args.latency_ms, "agents": 4, "rounds": 3, "results": rows}, indent=1
        )
    )


if __name__ == "__main__":
    main()
