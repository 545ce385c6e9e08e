"""``bench weights`` measures the shipped model file against the copy the local recipe
serves: the figures are read from what it measured, and the copy is the same model."""

from __future__ import annotations

import json

from tests.benchmarks.test_speed_benchmarks import bench


def test_the_served_copy_is_measured_against_the_shipped_file() -> None:
    proc = bench(
        "weights", "--rounds", "2", "--prompt-tokens", "64", "--contexts", "16,48",
        "--decode", "4", "--score-tokens", "160", "--threads", "1",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["source"]["file"] == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert out["converted"]["file"] == "SmolLM2-135M-Instruct.Q4_1.as-q8_0.gguf"
    assert out["converted"]["megabytes"] > out["source"]["megabytes"]  # 8 bits a weight, not 4
    keys = {"prompt_tokens_per_s", "decode_ms_at_16", "decode_ms_at_48"}
    for side in ("source", "converted"):
        assert len(out[side]["rounds"]) == 2
        assert set(out[side]["median"]) == keys and min(out[side]["median"].values()) > 0
        for text in ("humaneval", "gsm8k"):
            assert out[side]["perplexity"][text]["tokens"] == 160
    # The same model: Q8_0 holds each Q4_1 block all but exactly.
    for text in ("humaneval", "gsm8k"):
        ours, theirs = (out[s]["perplexity"][text]["perplexity"] for s in ("converted", "source"))
        assert abs(ours / theirs - 1) < 0.02, (text, ours, theirs)


def test_sizes_that_do_not_fit_the_texts_are_one_sentence() -> None:
    for args in (["--contexts", "300,x"], ["--contexts", "1890", "--decode", "200"]):
        proc = bench("weights", *args, "--rounds", "1")
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, proc.stderr
        assert "--contexts" in proc.stderr
