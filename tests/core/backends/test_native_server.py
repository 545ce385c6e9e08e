"""The native engine (llama.cpp's llama-server) with the shipped model: slots, batching,
clean slots per conversation, the run's record of its server (tiny caps, few calls).

The session's server (tests/local_model.py) is the native engine with a slot per agent of
the default team and one for the decision agent; the lifecycle tests (parent killed three
ways) run for both engines in test_local_server.py.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import duckdb
import pytest

from core.backends import local_server as ls
from core.backends import native_server as ns
from core.backends.local_server import LocalServer
from core.errors import UserError
from core.records import DECISION_AGENT, EpisodeRecord
from core.team.env import TeamEnv
from core.team.options import TeamOptions
from core.team.topologies import make_policy
from tests.core.backends.proxy import RecordingProxy, star_eval_through

ROOT = Path(__file__).resolve().parents[3]


def get(server: LocalServer, path: str) -> bytes:
    with urllib.request.urlopen(server.url.removesuffix("/v1") + path, timeout=30) as resp:
        return resp.read()


def test_the_session_server_is_native_with_a_slot_per_agent(local_server: LocalServer) -> None:
    assert local_server.model.config.engine == ls.DEFAULT_ENGINE == "native"
    assert local_server.slots == len(TeamOptions().roles) + 1
    assert get(local_server, "/health")
    slots = json.loads(get(local_server, "/slots"))
    assert [s["id"] for s in slots] == list(range(local_server.slots))
    # Each slot holds a whole context of its own (no pool shared between slots).
    assert {s["n_ctx"] for s in slots} == {local_server.model.config.n_ctx}
    assert b"llamacpp:prompt_tokens_total" in get(local_server, "/metrics")


def test_a_rounds_calls_go_together_each_to_its_agents_slot(
    local_server: LocalServer, proxy: RecordingProxy, tmp_path: Path
) -> None:
    """A CLI run through a recording proxy: the two spokes of a star are in flight
    together, every call names its agent's slot (the decision agent's, when it is asked,
    is the last), every
    call is answered, and the store keeps the usage the server reported; the run records
    its server's engine, slots and threads."""
    db = tmp_path / "native.duckdb"
    proc = star_eval_through(proxy, local_server, db, "solver,analyst,coder")
    assert proc.returncode == 0, proc.stderr[-2000:]
    with duckdb.connect(str(db), read_only=True) as con:
        calls = con.execute(
            "SELECT agent, prompt_tokens, completion_tokens, usage_reported, error "
            "FROM llm_calls ORDER BY seq"
        ).fetchall()
        (config,) = con.execute("SELECT config FROM runs").fetchone()
    assert json.loads(config)["local_server"] == {
        "engine": "native", "slots": local_server.slots, "threads": local_server.threads,
    }  # fmt: skip
    assert len(calls) == len(proxy.usages) >= 3  # three agents (and the decision agent)
    assert all(reported and error is None for *_, reported, error in calls)
    stored = sorted((p, c) for _, p, c, _, _ in calls)
    served = sorted((u["prompt_tokens"], u["completion_tokens"]) for u in proxy.usages)
    assert stored == served
    expected = sorted(ns.slot_of(agent, local_server.slots) for agent, *_ in calls)
    assert sorted(b["id_slot"] for b in proxy.bodies) == expected
    assert {0, 1, 2} <= set(expected)
    assert proxy.most_in_flight >= 2  # the spokes were sent together
    # Every call starts a conversation (one round): the task's opening was computed once,
    # in the spare slot, and restored into each call's slot, which reused it.
    spare = local_server.slots - 1
    assert [b["id_slot"] for b in proxy.openings] == [spare]
    assert proxy.slot_actions.count(f"/slots/{spare}?action=save") == 1
    restored = sorted(int(p.split("/")[2].split("?")[0]) for p in proxy.slot_actions
                      if p.endswith("action=restore"))  # fmt: skip
    assert restored == expected
    assert all(b["cache_prompt"] is True for b in proxy.bodies)
    assert all(u["prompt_tokens_details"]["cached_tokens"] > 0 for u in proxy.usages)


def replies(record: EpisodeRecord) -> list[str]:
    texts = [s.text for r in record.rounds for s in r.steps]
    return texts + ([record.decision.text] if record.decision else [])


def test_two_policies_get_the_same_replies_whatever_order_they_run_in(
    local_server: LocalServer,
) -> None:
    """Temperature 0, two rounds, two tasks: star then chain, and chain then star, on the
    same server, give each policy the same replies; an agent's second-round request found
    its first round in its slot (the reuse the slot is for: the responses' ``cached_tokens``,
    counted by the back-end), and the slot holds its conversation (``/slots``). Each task's
    opening was computed once, and every conversation (every decision among them) started
    from it."""
    opts = TeamOptions(
        backend="local", benchmark="math", roles=("solver", "analyst"), rounds=2,
        max_tokens=6, use_cache=False,
    )  # fmt: skip
    env = TeamEnv(opts, "eval")
    env.backend.config.temperature = 0.0
    try:
        first = {
            p: [replies(r) for r in env.run(make_policy(p), [0, 1])] for p in ("star", "chain")
        }
        then = {p: [replies(r) for r in env.run(make_policy(p), [0, 1])] for p in ("chain", "star")}
        stats, openings = env.backend.slot_stats, env.backend.openings
    finally:
        env.close()
    assert first == then
    assert all(text for episode in first["star"] for text in episode)
    assert stats[0].reused == stats[0].requests > 0 and stats[0].cached_tokens > 0
    assert stats[-1].reused == stats[-1].requests  # any decision, from the opening
    assert openings.computed == 2  # one per task, whatever policy played it first
    # 8 episodes: each agent's first request, and the decision when one was asked.
    assert openings.restored == 8 * 2 + stats[-1].requests
    # The slot keeps its conversation between requests (``/slots`` counts what it holds;
    # its per-request counters reset when a request ends: the reuse is in the responses).
    solver = json.loads(get(local_server, "/slots"))[0]
    assert not solver["is_processing"] and solver["n_prompt_tokens"] > 0


def test_conversation_starts_get_a_clean_slot(local_server: LocalServer) -> None:
    """The slot rule in the request: agent i -> slot i, the decision agent -> the last;
    a request holding an earlier reply reuses its slot's prefix, one that starts a
    conversation does only once its task's opening was restored into its slot."""
    env = TeamEnv(TeamOptions(backend="local", use_cache=False), "eval")
    try:
        backend = env.backend
        start = {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]}
        more = {"messages": [*start["messages"], {"role": "assistant", "content": "a"},
                             {"role": "user", "content": "q2"}]}  # fmt: skip
        assert backend.request_extras({**start, "sample": [7, 2]}) == {
            "id_slot": 2, "cache_prompt": False,
        }  # fmt: skip
        assert backend.request_extras({**more, "sample": [7, 2]})["cache_prompt"] is True
        assert backend.request_extras({**start, "sample": [7, DECISION_AGENT]})["id_slot"] == 4
        assert backend.one_episode_at_a_time and not backend.serial
    finally:
        env.close()
    assert [ns.slot_of(a, 3) for a in (0, 1, 2, 3, DECISION_AGENT)] == [0, 1, 0, 1, 2]


def test_a_missing_build_names_the_setup_and_the_fallback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ns, "NATIVE_BINARY", tmp_path / "llama-server")
    with pytest.raises(
        UserError, match=r"not built .* `bash scripts/setup\.sh`.*--local-engine python"
    ):
        ls.serve(ls.LocalServerConfig(n_ctx=576, slots=2))  # not the session's: it must start


def test_a_bad_engine_is_one_sentence(capsys: pytest.CaptureFixture[str]) -> None:
    from core.cli import main

    code = main(["eval", "--backend", "local", "--local-engine", "cuda", "--benchmark", "math",
                 "--episodes", "1", "--no-log"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "--local-engine must be one of native, python" in err
    assert len(err.strip().splitlines()) == 1


def test_openings_keep_a_few_files_and_reuse_the_least_recently_used() -> None:
    """A new opening takes a free file, then the least recently used one's; a file whose
    opening failed to compute is free again, never handed out twice."""
    from core.backends.local_backend import OPENING_FILES, Openings

    openings = Openings()
    for k in range(OPENING_FILES):
        openings._files[f"task{k}"] = openings._file_for_new()
    assert len(set(openings._files.values())) == OPENING_FILES
    openings._files.move_to_end("task0")  # used again: task1 is now the oldest
    file1 = openings._files["task1"]
    assert openings._file_for_new() == file1 and "task1" not in openings._files
    # That new opening failed (not stored): its file is free, and only it.
    assert openings._file_for_new() == file1
    assert len({*openings._files.values(), file1}) == OPENING_FILES
    assert all(f.startswith("opening-") and f.endswith(".bin") for f in openings._files.values())
    assert Openings()._file_for_new() not in openings._files.values()  # another back-end's
