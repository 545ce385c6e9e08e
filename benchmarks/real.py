"""Real episodes on the local model: seconds per episode by topology, tokens/s, overhead.

Starts the llama.cpp server (``--backend local``, SmolLM2-135M-Instruct by default), plays
``--episodes`` held-out episodes per fixed topology with the default team (4 agents, 3
rounds), cache off, and records every request in the order it was sent. It then sends the
same requests (same messages, cap, temperature and seed) straight to a second server of
the same model and settings, one at a time in the same order, right after each episode
(both then meet the same load on a shared machine), and reports the team runtime's
overhead: episode wall time over the straight replay's wall time, minus one. The second
server has seen every earlier episode's requests, as the first one has, and none of this
one's: replayed on the first, each request would find its whole prompt in the prompt
cache the episode filled. Prints JSON.

    agentqmix bench real [--topologies star,chain] [--episodes 3] [--first-episode 0]
                         [--benchmark mixed] [--prompt-layout fresh|conversation]

``--first-episode K`` plays held-out episodes K, K+1, ...: ``mixed`` episodes 0-4 hold
multiple choice and maths only; 5, 6 and 9 are code. The JSON gives the median by task
kind as well as over all.
"""

from __future__ import annotations

import json
import os
import statistics
import time
import urllib.request
from typing import Any

from benchmarks.common import Parser, int_in, user_errors
from core.backends.local_server import start_unshared
from core.backends.registry import local_model_server
from core.team.env import TeamEnv
from core.team.options import TeamOptions
from core.team.topologies import make_policy


def play(opts: TeamOptions, topologies: list[str], episodes: int, first: int = 0) -> dict[str, Any]:
    env = TeamEnv(opts, "eval")
    backend = env.backend
    backend.config.seed = 0  # seeded requests: the replay decodes the same completions
    sent: list[dict[str, Any]] = []
    once = backend._once

    async def recording_once(request: dict[str, Any], *args: Any) -> Any:
        sent.append(request)
        return await once(request, *args)

    backend._once = recording_once
    rows: dict[str, Any] = {}
    replay_server = start_unshared(local_model_server(opts.model_file))
    try:
        for name in topologies:
            sent_before = len(sent)
            seconds, replays, tokens, completion = [], [], 0, 0
            by_kind: dict[str, list[float]] = {}
            for k in range(first, first + episodes):
                start = len(sent)
                t0 = time.perf_counter()
                (record,) = env.run(make_policy(name), [k])
                seconds.append(time.perf_counter() - t0)
                by_kind.setdefault(record.domain, []).append(seconds[-1])
                # Right after the episode, so that both see the same load on a shared machine.
                replays.append(straight(replay_server.url, sent[start:]))
                tokens += record.tokens
                completion += sum(c.completion_tokens for c in record.calls)
            wall, replay = sum(seconds), sum(replays)
            rows[name] = {
                "episodes": episodes,
                "seconds_per_episode": [round(s, 2) for s in seconds],
                "episode_indices": [first, first + episodes - 1],
                "median_s": round(statistics.median(seconds), 2),
                # A code episode writes whole functions: a median over maths alone says
                # nothing about it.
                "median_s_by_kind": {
                    kind: round(statistics.median(s), 2) for kind, s in sorted(by_kind.items())
                },
                "episodes_by_kind": {kind: len(s) for kind, s in sorted(by_kind.items())},
                "calls": len(sent) - sent_before,
                "tokens_per_episode": round(tokens / episodes),
                "completion_tokens_per_s": round(completion / wall, 1),
                "tokens_per_s": round(tokens / wall, 1),
                "straight_replay_s": [round(r, 2) for r in replays],
                "overhead": round(wall / replay - 1, 4),
                "overhead_per_episode": [
                    round(w / r - 1, 4) for w, r in zip(seconds, replays, strict=True)
                ],
                "failed_calls": backend.stats["failed_calls"],
            }
    finally:
        env.close()
        replay_server.stop()
    return rows


def straight(base_url: str, requests: list[dict[str, Any]]) -> float:
    """Wall time of ``requests`` sent straight to the server, one at a time, in order."""
    t0 = time.perf_counter()
    for r in requests:
        body = {k: r[k] for k in ("model", "messages", "temperature", "max_tokens", "seed")}
        req = urllib.request.Request(
            f"{base_url}/chat/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=600) as resp:
            resp.read()
    return time.perf_counter() - t0


def main() -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--topologies", default="star")
    parser.add_argument("--episodes", type=int_in(1, 1000), default=3)
    parser.add_argument("--first-episode", type=int_in(0, 1_000_000), default=0)
    parser.add_argument("--benchmark", default="mixed")
    parser.add_argument("--model-file", default=None)
    parser.add_argument("--prompt-layout", default=None, help="default: the local recipe's")
    args = parser.parse_args()
    with user_errors():
        opts = TeamOptions(
            backend="local",
            benchmark=args.benchmark,
            model_file=args.model_file,
            use_cache=False,
            prompt_layout=args.prompt_layout,
        )
        opts.validate()
        for name in args.topologies.split(","):
            make_policy(name)  # an unknown topology, before the model server starts
        rows = play(opts, args.topologies.split(","), args.episodes, args.first_episode)
    print(
        json.dumps(
            {
                "model": opts.model_name(),
                "benchmark": args.benchmark,
                "agents": len(opts.roles),
                "rounds": opts.rounds,
                "prompting": opts.run_config()["prompting"],
                "cpus": os.cpu_count(),
                "load_average": os.getloadavg(),
                "topologies": rows,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
