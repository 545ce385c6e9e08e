"""Real episodes end to end (issue 18, item 3): a policy trained on the simulator and every
fixed topology play GSM8K on the local model (llama.cpp serving the shipped SmolLM2-135M),
logged with the exact prompts, the server's token usage and each call's latency. The
commands run in this process (:func:`run_json`, the code the console script runs), on the
session's server: a subprocess per command paid ~3 CPU-seconds of imports."""

from __future__ import annotations

import json

import duckdb

from core.team.topologies import FIXED_TOPOLOGIES
from tests.core.test_cli_team import TINY, run_json

TEAM = ["--benchmark", "gsm8k", "--agents", "solver,analyst", "--rounds", "1"]


def test_a_simulator_policy_and_every_fixed_topology_play_gsm8k_on_the_local_model(
    tmp_path, local_server
):
    db, ckpt = tmp_path / "real.duckdb", tmp_path / "sim.pt"
    trained = run_json(
        "train", *TEAM, "--episodes", "16", "--out", str(ckpt), "--no-log", "--json", *TINY
    )
    assert trained["episodes"] == 16 and ckpt.is_file()
    table = run_json(
        "compare", *TEAM, "--backend", "local", "--checkpoint", str(ckpt),
        "--episodes", "1", "--max-tokens", "8", "--no-cache", "--db", str(db), "--json",
    )  # fmt: skip
    assert local_server.gone() is None  # the session's server: not the command's to stop
    assert {p["policy"] for p in table["policies"]} == {"qmix", *FIXED_TOPOLOGIES}

    con = duckdb.connect(str(db), read_only=True)
    episodes = con.execute(
        "SELECT e.policy, e.backend, e.model, e.tokens, "
        "sum(c.prompt_tokens + c.completion_tokens), count(c.seq), "
        "bool_and(c.usage_reported AND c.latency_s > 0 AND c.messages_hash IS NOT NULL "
        "AND NOT c.cache_hit AND c.error IS NULL) "
        "FROM episodes e JOIN llm_calls c USING (run_id, episode) GROUP BY ALL"
    ).fetchall()
    assert {row[0] for row in episodes} == {"qmix", *FIXED_TOPOLOGIES}
    for policy, backend, model, tokens, call_tokens, calls, real in episodes:
        assert backend == "local" and model.startswith("SmolLM2-135M"), policy
        assert calls >= 1 and real, policy  # every call went to the server, and says so
        assert tokens == call_tokens, policy  # the episode's tokens are the server's usage
    # The exact prompts are stored, each asking the episode's GSM8K problem.
    asked = con.execute(
        "SELECT e.question, p.messages FROM llm_calls c "
        "JOIN prompts p ON p.messages_hash = c.messages_hash JOIN episodes e USING (run_id, episode)"
    ).fetchall()
    assert len(asked) == sum(row[5] for row in episodes)
    for question, messages in asked:
        assert question in " ".join(m["content"] for m in json.loads(messages))
