"""Failures: the parser, the curriculum and what every mode does to an episode."""

from __future__ import annotations

import asyncio
import random

import pytest

from core.actions import Action
from core.backends.society import SimBackend
from core.errors import UserError
from core.team.failures import FailureSpec, parse_failures, sample_failures
from core.team.plan import RoundPlan
from core.team.runtime import RuntimeConfig, TeamEpisode
from tests.core.team.conftest import LatencyBackend, make_task

ROLES = ["solver", "coder", "analyst", "verifier"]
A = int(Action.AGGREGATE_REFINE)


def run(backend, failures, rounds=3, actions=None, seed=0, task=None):
    episode = TeamEpisode(
        task or make_task(),
        ROLES,
        backend,
        config=RuntimeConfig(n_rounds=rounds),
        failures=failures,
        seed=seed,
    )

    async def go():
        for _ in range(rounds):
            await episode.play_round(RoundPlan(actions=actions or [A] * 4))
        return await episode.finish()

    return asyncio.run(go())


def test_parser_accepts_indices_roles_and_rounds():
    specs = parse_failures("0:crash@1, verifier:BYZANTINE ,Coder:garbled@2", ROLES, n_rounds=3)
    assert specs == [
        FailureSpec(0, "crash", 1),
        FailureSpec(3, "byzantine", 0),
        FailureSpec(1, "garbled", 2),
    ]
    assert parse_failures("", ROLES) == []


@pytest.mark.parametrize(
    "text",
    [
        "0",
        "0:explode",
        "9:crash",
        "boss:crash",
        "0:crash@x",
        "0:crash@5",
        "0:crash,0:timeout",
        ":crash",
    ],
)
def test_parser_rejects_bad_text_with_one_sentence(text):
    with pytest.raises(UserError) as err:
        parse_failures(text, ROLES, n_rounds=3)
    message = str(err.value)
    assert message.endswith(".") and "\n" not in message


def test_curriculum_never_fails_everyone_and_follows_the_probability():
    rng = random.Random(0)
    draws = [sample_failures(4, 3, 0.9, rng) for _ in range(500)]
    assert all(len(d) < 4 for d in draws)
    assert all(0 <= f.from_round < 3 for d in draws for f in d)
    assert {f.mode for d in draws for f in d} == {"crash", "timeout", "byzantine", "garbled"}
    light = [len(sample_failures(4, 3, 0.1, rng)) for _ in range(2000)]
    assert 0.3 < sum(light) / 2000 < 0.5  # 4 agents x 0.1
    assert sample_failures(4, 3, 0.0, rng) == []


def test_crash_is_silent_from_its_round():
    backend = LatencyBackend(latency=0.0)
    record = run(backend, [FailureSpec(2, "crash", 1)])
    assert record.rounds[0].steps[2].alive and record.rounds[0].steps[2].tokens > 0
    for r in (1, 2):
        step = record.rounds[r].steps[2]
        assert not step.alive and step.fault == "crash" and step.tokens == 0 and step.answer is None
        assert all(2 not in e for e in record.rounds[r].edges)
    assert not any(c.agent == 2 and c.round >= 1 for c in record.calls)
    assert 2 not in record.decision.read_from
    assert record.failures == [{"agent": 2, "mode": "crash", "from_round": 1}]


def test_timeout_spends_prompt_tokens_but_gives_nothing():
    backend = LatencyBackend(latency=0.0)
    record = run(backend, [FailureSpec(1, "timeout", 0)])
    for r in record.rounds:
        step = r.steps[1]
        assert not step.alive and step.fault == "timeout" and step.answer is None
        assert step.prompt_tokens == 10 and step.completion_tokens == 0
        assert all(1 not in e for e in r.edges)
    calls = [c for c in record.calls if c.agent == 1]
    assert len(calls) == 3 and all(c.error == "timeout" and c.completion_tokens == 0 for c in calls)
    assert 1 not in record.decision.read_from
    assert record.tokens == sum(c.prompt_tokens + c.completion_tokens for c in record.calls)


def test_byzantine_answers_confidently_wrong_and_misleads_readers():
    backend = SimBackend("flash-lite")
    task = make_task(4, difficulty=1)
    record = run(backend, [FailureSpec(0, "byzantine", 0)], task=task)
    for r in record.rounds:
        step = r.steps[0]
        assert step.fault == "byzantine" and step.correct is False and step.confidence > 0.85

    # Over many seeds, a byzantine broadcaster drags down an easy task that honest agents solve.
    def accuracy(failures):
        return (
            sum(
                run(backend, failures, seed=s, task=task, actions=[1, 3, 3, 3]).score
                for s in range(60)
            )
            / 60
        )

    assert accuracy([FailureSpec(0, "byzantine", 0)]) < accuracy([]) - 0.2


def test_garbled_output_is_unreadable():
    backend = LatencyBackend(latency=0.0)
    record = run(
        backend, [FailureSpec(3, "garbled", 2)], actions=[A, A, A, int(Action.BROADCAST_ALL)]
    )
    ok, bad = record.rounds[1].steps[3], record.rounds[2].steps[3]
    assert ok.answer == "3" and ok.fault is None
    assert bad.alive and bad.fault == "garbled" and bad.answer is None and bad.tokens > 0
    assert bad.text != "Answer: 3" and sorted(bad.text) != sorted("Answer: 3")
    # Its message still travels, but carries no answer; the decision does not read it.
    sent = [m for m in record.rounds[2].messages if m.src == 3]
    assert sent and all(m.answer is None for m in sent)
    assert 3 not in record.decision.read_from
