"""execute_verify on code is blind to the scorer (docs/openai.md, What verification sees).

A verifying team plays real episodes against a real chat-completions server on 127.0.0.1,
its code run in the real sandbox. The task's hidden tests either agree with its
docstring's examples or demand something the examples never show: the team's transcript
(every request the server received, every step) is the same either way, and only the
score differs. And the hidden tests are never read during an episode but by the scorer.
"""

from __future__ import annotations

import asyncio
import inspect
import json

from core.actions import Action
from core.backends.openai_backend import OpenAIBackend, OpenAIBackendConfig, examples_confidence
from core.records import EpisodeRecord
from core.tasks.base import Task
from core.team.plan import plan_for
from core.team.runtime import RuntimeConfig, TeamEpisode
from tests.core.backends.fake_openai import FakeOpenAIServer

PROMPT = '''def double_evens(xs: list) -> list:
    """Double the even numbers of xs and keep the odd ones.
    >>> double_evens([1, 2, 3])
    [1, 4, 3]
    >>> double_evens([])
    []
    """
'''
FIXED = "def double_evens(xs):\n    return [2 * x if x % 2 == 0 else x for x in xs]"
BUGGY = "def double_evens(xs):\n    return list(xs)"
AGREE = "def check(candidate):\n    assert candidate([2, 5, 8]) == [4, 5, 16]\n"
# Demands what no example shows (negative evens kept): the fixed code fails it.
DIFFER = "def check(candidate):\n    assert candidate([-2, 4]) == [-2, 8]\n"
WRITTEN = "assert double_evens([2]) == [4]\nassert double_evens([1]) == [1]"
PLANS = [
    [Action.EXECUTE_VERIFY] * 3,
    [Action.AGGREGATE_REFINE, Action.EXECUTE_VERIFY, Action.DEBATE_CHECK],
]


def _task(task_id: str, test: str, sealed: bool = False) -> Task:
    meta = {"prompt": PROMPT, "test": test, "entry_point": "double_evens"}
    meta = SealedMeta(meta) if sealed else meta
    return Task(task_id, "blind", "code", PROMPT, FIXED.split("\n", 1)[1], meta=meta)


def _reply(code: str) -> str:
    return f"Here is the function.\n```python\n{code}\n```\nConfidence: 70"


def responder(messages: list[dict]) -> str:
    """A model that writes buggy code until it has seen code or a failed check; its own
    test cases when asked. A function of the messages alone, as a seeded model is."""
    last = str(messages[-1]["content"])
    if "write up to 5 test cases" in last:
        return WRITTEN
    seen = "\n".join(str(m["content"]) for m in messages[1:])
    return _reply(FIXED if "did not pass" in last or "```python\ndef" in seen else BUGGY)


async def _episode(backend: OpenAIBackend, task: Task) -> EpisodeRecord:
    team = TeamEpisode(
        task, ["coder", "solver", "verifier"], backend, config=RuntimeConfig(n_rounds=2)
    )
    for actions in PLANS:
        await team.play_round(plan_for(actions))
    record = await team.finish()
    await backend.aclose()
    return record


def _play(task: Task, tmp_path, verify_tests: str) -> tuple[EpisodeRecord, list]:
    with FakeOpenAIServer(responder=responder) as srv:
        config = OpenAIBackendConfig(
            model="fake-model",
            base_url=srv.url,
            use_cache=False,
            cache_dir=str(tmp_path / "cache"),
            temperature=0.0,
            verify_tests=verify_tests,
        )
        record = asyncio.run(_episode(OpenAIBackend(config), task))
        # The calls of one layer run concurrently: the server sees them in any order.
        sent = sorted(json.dumps(r["body"]["messages"]) for r in srv.requests)
        return record, [json.loads(m) for m in sent]


def _transcript(record: EpisodeRecord) -> str:
    """Everything the team said and was told, minus the scorer's marks and wall times."""
    steps = [
        (s.agent, s.round, s.action, s.answer, s.confidence, s.text, s.verified, s.read_from)
        for rnd in record.rounds
        for s in rnd.steps
    ]
    calls = [
        (c.agent, c.round, c.prompt, c.prompt_tokens, c.completion_tokens) for c in record.calls
    ]
    decision = record.decision
    return json.dumps([steps, calls, decision.answer, decision.text], sort_keys=True)


def test_the_transcript_is_the_same_whatever_the_hidden_tests_say(tmp_path):
    for recipe in ("examples", "examples+written"):
        agree, sent_agree = _play(_task("agree", AGREE), tmp_path, recipe)
        differ, sent_differ = _play(_task("differ", DIFFER), tmp_path, recipe)
        assert sent_agree == sent_differ
        assert _transcript(agree) == _transcript(differ)
        assert (agree.score, differ.score) == (1.0, 0.0)
        # The check was real: the buggy first code failed an example, and the report (its
        # own test cases too, when the recipe asks) went back for a revision.
        feedback = [m[-1]["content"] for m in sent_agree if "did not pass" in m[-1]["content"]]
        assert len(feedback) == 3 and "expected [1, 4, 3]" in feedback[0]
        written = "double_evens([2])" in feedback[0]
        assert written == (recipe == "examples+written")
        assert ("2 of 4 examples failed." if written else "1 of 2 examples failed.") in feedback[0]
        everything = json.dumps(sent_agree + sent_differ)
        assert "[-2, 8]" not in everything and "[4, 5, 16]" not in everything


class SealedMeta(dict):
    """A code task's meta whose hidden tests only the scorer (``check_code``) may read: any
    other read is recorded and raises."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.reads: list[str] = []

    def _guard(self, key):
        if key == "test" and not any(f.function == "check_code" for f in inspect.stack()):
            self.reads.append(inspect.stack()[2].function)
            raise AssertionError("the hidden tests were read outside the scorer")

    def __getitem__(self, key):
        self._guard(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        self._guard(key)
        return super().get(key, default)

    def items(self):
        self._guard("test")
        return super().items()

    def values(self):
        self._guard("test")
        return super().values()


def test_the_hidden_tests_are_read_by_the_scorer_alone(tmp_path):
    task = _task("sealed", AGREE, sealed=True)
    sealed = task.meta
    record, sent = _play(task, tmp_path, "examples+written")
    assert sealed.reads == []
    assert record.score == 1.0  # the scorer did read them
    verified = [s for rnd in record.rounds for s in rnd.steps if s.verified]
    assert len(verified) == 4 and not any(s.fault for rnd in record.rounds for s in rnd.steps)
    # Code that passes all four examples (two its own) earns the four-example confidence.
    passed = [s for s in record.rounds[1].steps if s.action == Action.EXECUTE_VERIFY]
    assert passed[0].confidence == examples_confidence(4) == 0.8
    assert sum("did not pass" in m[-1]["content"] for m in sent) == 3


def test_maths_verification_never_sees_the_ground_truth(tmp_path):
    """execute_verify on maths re-derives with the model alone: two tasks that differ only
    in their ground truth get the same requests, and only the score differs."""
    records, sent = [], []
    for truth in ("33", "34"):
        task = Task(f"m{truth}", "blind", "math", "What is 12 + 7 * 3?", truth)
        with FakeOpenAIServer() as srv:
            config = OpenAIBackendConfig(
                model="fake-model", base_url=srv.url, use_cache=False, temperature=0.0
            )
            records.append(asyncio.run(_episode(OpenAIBackend(config), task)))
            sent.append(sorted(json.dumps(r["body"]["messages"]) for r in srv.requests))
    assert sent[0] == sent[1] and any("Verify your answer" in m for m in sent[0])
    assert _transcript(records[0]) == _transcript(records[1])
    assert [r.score for r in records] == [1.0, 0.0]
