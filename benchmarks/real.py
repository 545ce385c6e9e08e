"""Real episodes on the local model, both engines side by side: seconds per episode by
topology, prefill and decode tokens/s, cache hits per slot, overhead over raw server calls.

Starts the local model on each engine of ``--engines`` (``native``: llama.cpp's
llama-server, a slot per agent; ``python``: llama-cpp-python's server), plays the same
held-out episodes on each with the default team (4 agents, 3 rounds), cache off, the
engines alternating episode by episode (and which goes first, so that neither always meets
the machine's load first), and records every request with the moments it was sent and
answered. Right after each episode it sends the same requests (same body: messages, cap,
temperature, seed, slot) straight to a second server of the same engine and settings,
each one once the requests that had been answered before it was sent are answered again
(the episode's own order and concurrency, without the team's runtime), and reports the
runtime's overhead: episode wall time over the straight replay's, minus one. The second
server has seen every earlier episode's requests, as the first one has, and none of this
one's. Prints JSON.

    agentqmix bench real [--topologies all|star,chain] [--episodes 3] [--first-episode 0]
                         [--engines native,python] [--benchmark mixed]
                         [--prompt-layout fresh|conversation] [--prompt-style full|compact]

``--first-episode K`` plays held-out episodes K, K+1, ...: ``mixed`` episodes 0-4 hold
multiple choice and maths only; 5, 6 and 9 are code. The JSON gives the median by task
kind as well as over all. The native engine's figures come from its responses'
``timings`` (prefill and decode tokens/s as the server times each request: a request
batched with others shares the time) and ``cached_tokens`` (cache hits per slot), and its
``/metrics`` (slots busy per decode step; per episode, prompt tokens computed and restored,
tokens decoded and decode calls: the ``goals`` block gathers them with the medians and
overheads the issue's goals are judged by). ``completion_tokens_after_confidence_line``
estimates what the replies wrote after the line that ends them as the prompt asks.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import threading
import time
import urllib.request
from dataclasses import asdict, replace
from typing import Any

from benchmarks.common import Parser, int_in, user_errors
from core.backends.local_backend import Openings
from core.backends.local_server import ENGINES, LocalServer, start_unshared
from core.backends.registry import local_model_server, prompt_settings
from core.errors import UserError
from core.records import EpisodeRecord
from core.team.env import TeamEnv
from core.team.options import TeamOptions
from core.team.topologies import FIXED_TOPOLOGIES, make_policy

Sent = tuple[dict[str, Any], float, float]
"""A request as sent: its JSON body, when it was sent and when it was answered."""


class Engine:
    """One engine's team env, the requests its back-end sent, and its replay server."""

    def __init__(self, opts: TeamOptions):
        self.opts = opts
        self.env = TeamEnv(opts, "eval")
        backend = self.backend = self.env.backend
        backend.config.seed = 0  # seeded requests: the replay decodes the same completions
        self.sent: list[Sent] = []
        once = backend._once

        async def recording_once(request: dict[str, Any], *args: Any) -> Any:
            body = {k: request[k] for k in ("model", "messages", "temperature", "max_tokens")}
            t0 = time.perf_counter()
            out = await once(request, *args)
            # After the call: the slot fields say whether the task's opening was restored.
            body |= {"seed": request["seed"], **backend.request_extras(request)}
            if (chat := getattr(backend, "opened", {}).get(body.get("id_slot"))) is not None:
                body["opening"] = chat  # the replay restores it too (not sent in the body)
            self.sent.append((body, t0, time.perf_counter()))
            return out

        backend._once = recording_once
        self.replay_server = start_unshared(local_model_server(opts))
        self.replay_openings = Openings()

    def play(self, topology: str, k: int) -> dict[str, Any]:
        """Episode ``k`` with ``topology``, then its straight replay."""
        start = len(self.sent)
        slots_before = [asdict(s) for s in getattr(self.backend, "slot_stats", [])]
        native = self.opts.local_engine == "native"
        metrics_before = server_metrics(self.backend.server) if native else {}
        t0 = time.perf_counter()
        (record,) = self.env.run(make_policy(topology), [k])
        seconds = time.perf_counter() - t0
        counted = (
            episode_counts(metrics_before, server_metrics(self.backend.server)) if native else {}
        )
        replay = straight(self.replay_server, self.sent[start:], self.replay_openings)
        slots = [
            {k: now[k] - was[k] for k in now}
            for now, was in zip(
                [asdict(s) for s in getattr(self.backend, "slot_stats", [])],
                slots_before,
                strict=True,
            )
        ]
        return {
            "seconds": seconds,
            "replay": replay,
            "kind": record.domain,
            "tokens": record.tokens,
            "completion": sum(c.completion_tokens for c in record.calls),
            "calls": len(self.sent) - start,
            "after_confidence": after_confidence(record),
            "slots": slots,
            "server": counted,
        }

    def close(self) -> None:
        self.env.close()
        self.replay_server.stop()


CONFIDENCE_LINE = re.compile(r"(?im)^.*confidence\s*[:：=]?\s*\**\s*\d+.*$")


def after_confidence(record: EpisodeRecord) -> float:
    """Completion tokens written after a reply's first ``Confidence: N`` line (the reply's
    end as the prompt asks for it), estimated per reply from its share of characters: what
    a stop at that line would not decode. A reply that reads as its step's text (a check
    appended) counts as one."""
    steps = [s for r in record.rounds for s in r.steps]
    steps += [record.decision] if record.decision else []
    total = 0.0
    for step in steps:
        found = CONFIDENCE_LINE.search(step.text or "")
        if found and step.text:
            total += step.completion_tokens * (len(step.text) - found.end()) / len(step.text)
    return total


def episode_counts(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """What the native server did over one episode, from its ``/metrics`` before and after:
    prompt tokens computed and restored from a cache (its own or a restored opening),
    tokens decoded, ``llama_decode`` calls (prompt batches and decode steps) and the slots
    busy per call."""
    delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    busy = {k: v.get("n_busy_slots_per_decode", 0.0) * v.get("n_decode_total", 0.0)
            for k, v in (("before", before), ("after", after))}  # fmt: skip
    calls = delta.get("n_decode_total", 0.0)
    return {
        "prompt_tokens_computed": delta.get("prompt_tokens_total", 0.0),
        "prompt_tokens_restored": delta.get("prompt_tokens_cached_total", 0.0),
        "tokens_decoded": delta.get("tokens_predicted_total", 0.0),
        "decode_calls": calls,
        "busy_slots_per_decode_call": (busy["after"] - busy["before"]) / calls if calls else 0.0,
    }


def straight(server: LocalServer, sent: list[Sent], openings: Openings) -> float:
    """Wall time of ``sent`` replayed straight to the server: each request once every
    request answered before it was first sent is answered again (one at a time when they
    were sent one at a time, together when they were in flight together), a conversation
    start after restoring its task's opening into its slot as the back-end does
    (``openings``: the replay server's own)."""
    done = [threading.Event() for _ in sent]
    errors: list[BaseException] = []
    base_url = server.url

    def send(i: int) -> None:
        body = dict(sent[i][0])
        try:
            if (chat := body.pop("opening", None)) is not None:
                root, spare = base_url.removesuffix("/v1"), server.slots - 1
                openings.open(root, chat, body["id_slot"], spare, 600.0)
            req = urllib.request.Request(
                f"{base_url}/chat/completions",
                data=json.dumps(body).encode(),
                headers={"Content-Type": "application/json"},
            )
            with urllib.request.urlopen(req, timeout=600) as resp:
                resp.read()
        except BaseException as err:  # reported by the caller's thread
            errors.append(err)
        finally:
            done[i].set()

    order = sorted(range(len(sent)), key=lambda i: sent[i][1])
    threads = []
    t0 = time.perf_counter()
    for j in order:
        for i in order:
            if sent[i][2] <= sent[j][1]:
                done[i].wait()
        threads.append(threading.Thread(target=send, args=(j,)))
        threads[-1].start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(f"a replayed request failed: {errors[0]}")
    return time.perf_counter() - t0


def summary(runs: list[dict[str, Any]], first: int) -> dict[str, Any]:
    """One engine's figures over one topology's episodes."""
    seconds = [r["seconds"] for r in runs]
    replays = [r["replay"] for r in runs]
    by_kind: dict[str, list[float]] = {}
    for r in runs:
        by_kind.setdefault(r["kind"], []).append(r["seconds"])
    wall = sum(seconds)
    row: dict[str, Any] = {
        "episodes": len(runs),
        "episode_indices": [first, first + len(runs) - 1],
        "seconds_per_episode": [round(s, 2) for s in seconds],
        "median_s": round(statistics.median(seconds), 2),
        # A code episode writes whole functions: a median over maths alone says nothing of it.
        "median_s_by_kind": {k: round(statistics.median(s), 2) for k, s in sorted(by_kind.items())},
        "episodes_by_kind": {k: len(s) for k, s in sorted(by_kind.items())},
        "calls": sum(r["calls"] for r in runs),
        "tokens_per_episode": round(sum(r["tokens"] for r in runs) / len(runs)),
        "completion_tokens_per_episode": round(sum(r["completion"] for r in runs) / len(runs)),
        "completion_tokens_after_confidence_line_per_episode": round(
            sum(r["after_confidence"] for r in runs) / len(runs)
        ),
        "completion_tokens_per_s": round(sum(r["completion"] for r in runs) / wall, 1),
        "tokens_per_s": round(sum(r["tokens"] for r in runs) / wall, 1),
        "straight_replay_s": [round(r, 2) for r in replays],
        "overhead": round(wall / sum(replays) - 1, 4),
        "overhead_per_episode": [
            round(w / r - 1, 4) for w, r in zip(seconds, replays, strict=True)
        ],
    }
    counts = [r["server"] for r in runs if r["server"]]
    if counts:  # the native server's own counts, per episode
        row["server_per_episode"] = {
            k: round(statistics.mean(c[k] for c in counts), 2) for k in counts[0]
        }
    slots = [r["slots"] for r in runs if r["slots"]]
    if slots:
        per_slot = [
            {k: sum(s[i][k] for s in slots) for k in slots[0][i]} for i in range(len(slots[0]))
        ]
        prompt_ms = sum(s["prompt_ms"] for s in per_slot)
        computed = sum(s["prompt_tokens"] - s["cached_tokens"] for s in per_slot)
        decode_ms = sum(s["predicted_ms"] for s in per_slot)
        decoded = sum(s["predicted_tokens"] for s in per_slot)
        row["prefill_tokens_per_s"] = round(1000 * computed / prompt_ms, 1) if prompt_ms else None
        row["decode_tokens_per_s"] = round(1000 * decoded / decode_ms, 1) if decode_ms else None
        row["cache_hits_per_slot"] = [
            {
                "slot": i,
                "requests": s["requests"],
                "reused": s["reused"],
                "cached_tokens": s["cached_tokens"],
                "prompt_tokens": s["prompt_tokens"],
            }
            for i, s in enumerate(per_slot)
        ]
    return row


STAR_GOAL_S = 15.0
"""Issue 34's goal: a default star episode's median seconds on two cores."""
OVERHEAD_GOAL = 0.05
"""Issue 34's goal: the team runtime's overhead over the straight replay of its requests."""


def goals(out: dict[str, dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """The figures issue 34's goals are judged by, by topology and engine: median seconds
    per episode, the runtime's overhead, and (native) prompt tokens computed and restored
    and tokens decoded per episode."""
    by = {
        key: {t: {e: row[key] for e, row in rows.items()} for t, rows in out.items()}
        for key in ("median_s", "overhead")
    }
    native = {
        t: rows["native"]["server_per_episode"]
        for t, rows in out.items()
        if "server_per_episode" in rows.get("native", {})
    }
    return {
        "star_goal_median_s": STAR_GOAL_S,
        "overhead_goal": OVERHEAD_GOAL,
        "median_s": by["median_s"],
        "overhead": by["overhead"],
        "native_per_episode": native,
    }


def server_metrics(server: LocalServer) -> dict[str, float]:
    """The native engine's ``/metrics`` (Prometheus text), as ``name -> value``."""
    base = server.url.removesuffix("/v1")
    with urllib.request.urlopen(f"{base}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("llamacpp:"):
            name, value = line.split()
            out[name.removeprefix("llamacpp:")] = float(value)
    return out


def play(
    opts: TeamOptions, engines: list[str], topologies: list[str], episodes: int, first: int = 0
) -> dict[str, Any]:
    """Every topology's episodes on every engine, alternating; the figures by topology."""
    teams = {e: Engine(replace(opts, local_engine=e)) for e in engines}
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {
        t: {e: [] for e in engines} for t in topologies
    }
    try:
        turn = 0
        for name in topologies:
            for k in range(first, first + episodes):
                order = engines if turn % 2 == 0 else engines[::-1]
                turn += 1
                for e in order:
                    runs[name][e].append(teams[e].play(name, k))
        out: dict[str, Any] = {
            name: {e: summary(runs[name][e], first) for e in engines} for name in topologies
        }
        servers = {e: t.backend.server for e, t in teams.items()}
        identity = {
            e: {"engine": e, "slots": s.slots, "threads": s.threads} for e, s in servers.items()
        }
        metrics = {e: server_metrics(s) for e, s in servers.items() if e == "native"}
        failed = {e: t.backend.stats["failed_calls"] for e, t in teams.items()}
        openings = {
            e: {
                k: getattr(t.backend.openings, k)
                for k in ("computed", "restored", "tokens_computed", "tokens_restored")
            }
            for e, t in teams.items()
            if e == "native"
        }
    finally:
        for team in teams.values():
            team.close()
    return {
        "goals": goals(out),
        "servers": identity,
        "openings": openings,
        "native_metrics": metrics,
        "failed_calls": failed,
        "topologies": out,
    }


def main() -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--topologies", default="star", help="comma-separated, or all")
    parser.add_argument("--episodes", type=int_in(1, 1000), default=3)
    parser.add_argument("--first-episode", type=int_in(0, 1_000_000), default=0)
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--benchmark", default="mixed")
    parser.add_argument("--model-file", default=None)
    parser.add_argument("--prompt-layout", default=None, help="default: the local recipe's")
    parser.add_argument("--prompt-style", default=None, help="default: the local recipe's")
    args = parser.parse_args()
    with user_errors():
        topologies = (
            list(FIXED_TOPOLOGIES) if args.topologies == "all" else args.topologies.split(",")
        )
        for t in topologies:
            make_policy(t)  # an unknown name is one sentence before any server starts
        engines = args.engines.split(",")
        if (
            not engines
            or any(e not in ENGINES for e in engines)
            or len(set(engines)) < len(engines)
        ):
            raise UserError(f"--engines must name some of {', '.join(ENGINES)}, each once.")
        opts = TeamOptions(
            backend="local",
            benchmark=args.benchmark,
            model_file=args.model_file,
            use_cache=False,
            prompt_layout=args.prompt_layout,
            prompt_style=args.prompt_style,
        )
        opts.validate()
        result = play(opts, engines, topologies, args.episodes, args.first_episode)
    print(
        json.dumps(
            {
                "model": opts.model_name(),
                "benchmark": args.benchmark,
                "agents": len(opts.roles),
                "rounds": opts.rounds,
                "prompting": prompt_settings(opts),
                "cpus": os.cpu_count(),
                "load_average": os.getloadavg(),
                **result,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
