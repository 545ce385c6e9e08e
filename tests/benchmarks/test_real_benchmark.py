"""``bench real`` plays real episodes on the local model and replays the same requests
straight to the server: the figures it prints are read from what it measured."""

from __future__ import annotations

import json

from tests.benchmarks.test_speed_benchmarks import bench


def test_real_episodes_are_timed_against_a_straight_replay_of_their_calls() -> None:
    proc = bench(
        "real",
        "--topologies",
        "single",
        "--episodes",
        "1",
        "--benchmark",
        "math",
        "--first-episode",
        "2",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["model"].startswith("SmolLM2") and out["agents"] >= 1
    rows = out["topologies"]["single"]
    # Both engines play the same episode, side by side (docs/openai.md, "Engines").
    assert set(rows) == {"native", "python"} == set(out["servers"])
    for engine, row in rows.items():
        assert out["servers"][engine]["engine"] == engine
        assert row["calls"] >= 1 and out["failed_calls"][engine] == 0
        assert row["tokens_per_episode"] > 0 and row["completion_tokens_per_s"] > 0
        (replay,) = row["straight_replay_s"]
        assert replay > 0
        (seconds,) = row["seconds_per_episode"]
        assert row["median_s"] == seconds > 0
        assert row["episode_indices"] == [2, 2]
        assert row["median_s_by_kind"] == {"math": seconds}
        assert row["episodes_by_kind"] == {"math": 1}
        assert abs(row["overhead"] - (seconds / replay - 1)) < 0.02  # both rounded to 0.01 s
        after = row["completion_tokens_after_confidence_line_per_episode"]
        assert 0 <= after <= row["completion_tokens_per_episode"] > 0
    # The native engine's slots are read back: a single agent's one call used a slot.
    assert sum(slot["requests"] for slot in rows["native"]["cache_hits_per_slot"]) >= 1
    # What the goals are judged by, gathered in one place; the native server's own counts.
    goals = out["goals"]
    assert goals["star_goal_median_s"] == 15.0 and goals["overhead_goal"] == 0.05
    assert goals["median_s"]["single"] == {e: row["median_s"] for e, row in rows.items()}
    assert goals["overhead"]["single"] == {e: row["overhead"] for e, row in rows.items()}
    counts = goals["native_per_episode"]["single"]
    assert counts == rows["native"]["server_per_episode"]
    assert counts["prompt_tokens_computed"] > 0 and counts["tokens_decoded"] > 0
    assert counts["decode_calls"] > 0 and counts["busy_slots_per_decode_call"] >= 1
    # The agent's one call started from its task's opening, computed once.
    assert counts["prompt_tokens_restored"] > 0
    opened = out["openings"]["native"]
    assert (opened["computed"], opened["restored"]) == (1, 1)
    assert opened["tokens_computed"] == opened["tokens_restored"] > 0


def test_the_goals_block_gathers_every_topology_and_engine() -> None:
    """``--topologies all --engines native,python``: one median and one overhead per
    topology and engine, the native server's counts per topology (read from ``summary``
    of hand-made runs: two episodes of two topologies)."""
    from benchmarks.real import goals, summary

    def run(seconds: float, engine: str) -> dict:
        counts = {"prompt_tokens_computed": 100.0, "prompt_tokens_restored": 50.0,
                  "tokens_decoded": 40.0, "decode_calls": 30.0,
                  "busy_slots_per_decode_call": 1.5}  # fmt: skip
        return {"seconds": seconds, "replay": seconds / 2, "kind": "math", "tokens": 10,
                "completion": 4, "calls": 2, "after_confidence": 1.0, "slots": [],
                "server": counts if engine == "native" else {}}  # fmt: skip

    out = {
        t: {e: summary([run(s, e), run(s + 2, e)], 0) for e in ("native", "python")}
        for t, s in (("chain", 10.0), ("star", 20.0))
    }
    block = goals(out)
    assert block["median_s"] == {"chain": {"native": 11.0, "python": 11.0},
                                 "star": {"native": 21.0, "python": 21.0}}  # fmt: skip
    assert block["overhead"]["star"] == {"native": 1.0, "python": 1.0}
    assert set(block["native_per_episode"]) == {"chain", "star"}
    assert block["native_per_episode"]["star"]["prompt_tokens_computed"] == 100.0
