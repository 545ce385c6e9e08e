"""Replay's "what it was asked" for the synthetic society: the prompt rebuilt from a stored
episode is the one the openai back-end's builder gives for the turn the agent really had.

Real episodes of the society (every action, every failure mode, an agent sitting a round
out, maths, code and multiple choice) are played, logged to a real store and loaded back as
Replay loads them; a society that keeps the turns it was given is the reference.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from core.actions import Action
from core.backends import prompts
from core.backends.base import AgentTurn, DecisionTurn, TurnResult
from core.backends.society import SimBackend
from core.records import DECISION_AGENT, EpisodeRecord
from core.store import RunLogger, load_episode
from core.tasks.base import Task, task_of
from core.tasks.registry import load_benchmark
from core.team.failures import FailureSpec
from core.team.plan import RoundPlan
from core.team.runtime import RuntimeConfig, TeamEpisode, run_sync
from lab import asked

ROLES = ["solver", "coder", "analyst", "verifier"]
FAILURES = [
    [],
    [FailureSpec(1, "byzantine", 0), FailureSpec(2, "crash", 1)],
    [FailureSpec(3, "timeout", 1), FailureSpec(0, "garbled", 2)],
    [FailureSpec(0, "crash", 0), FailureSpec(1, "crash", 0), FailureSpec(2, "crash", 0)],
]


class KeepingSociety(SimBackend):
    """The synthetic society, unchanged, keeping every turn it is given."""

    def __init__(self) -> None:
        super().__init__()
        self.turns: list[AgentTurn] = []
        self.decisions: list[DecisionTurn] = []

    async def agent_turn(self, turn: AgentTurn) -> TurnResult:
        self.turns.append(turn)
        return await super().agent_turn(turn)

    async def decide(self, turn: DecisionTurn) -> TurnResult:
        self.decisions.append(turn)
        return await super().decide(turn)


def _tasks() -> list[Task]:
    source = load_benchmark("mixed", seed=0)
    by_domain: dict[str, list[Task]] = {}
    for i in range(len(source)):
        task = source.get(i)
        by_domain.setdefault(task.domain, []).append(task)
        if all(len(by_domain.get(d, [])) >= 2 for d in ("math", "code", "mcq")):
            break
    return [t for d in ("math", "code", "mcq") for t in by_domain[d][:2]]


def _play(
    task: Task, failures: list[FailureSpec], seed: int
) -> tuple[EpisodeRecord, KeepingSociety]:
    society = KeepingSociety()
    team = TeamEpisode(
        task, ROLES, society, config=RuntimeConfig(n_rounds=3), failures=failures, seed=seed
    )
    rng = random.Random(seed)
    for r in range(3):
        actions = [rng.randrange(len(Action)) for _ in ROLES]
        # Agent 3 sits the last round out in every other episode: it makes no call there,
        # and the decision agent reads its answer of the round before.
        active = [not (r == 2 and i == 3 and seed % 2) for i in range(len(ROLES))]
        run_sync(team.play_round(RoundPlan(actions=actions, active=active)))
    return run_sync(team.finish()), society


@pytest.fixture(scope="module")
def played(tmp_path_factory) -> list[tuple[EpisodeRecord, KeepingSociety]]:
    db = tmp_path_factory.mktemp("asked") / "store.duckdb"
    games = [
        _play(task, failures, seed)
        for seed, (task, failures) in enumerate((t, f) for t in _tasks() for f in FAILURES)
    ]
    with RunLogger(db, "eval") as log:
        log.log_episodes(record for record, _ in games)
    # Replay reads the episode back from the store; so does this test.
    return [(load_episode(db, log.run_id, i).record, s) for i, (_, s) in enumerate(games)]


def test_the_rebuilt_prompt_is_what_the_openai_builder_gives_for_the_real_turn(played):
    n_turns = n_decisions = 0
    domains = set()
    for record, society in played:
        domains.add(record.domain)
        for turn in society.turns:
            shown = asked.asked(record, turn.round, turn.agent)
            assert shown.kind == asked.REBUILT and shown.note.startswith(asked.REBUILT)
            assert shown.messages == prompts.agent_messages(turn), (record.task_id, turn.round)
            assert shown.call is not None and shown.call.prompt is None  # nothing stored
            n_turns += 1
        for turn in society.decisions:
            shown = asked.asked(record, len(record.rounds), DECISION_AGENT)
            view = DecisionTurn(turn.task, prompts.readable_finals(turn.finals), 0, turn.n_rounds)
            assert shown.kind == asked.REBUILT
            assert shown.messages == prompts.decision_messages(view)
            n_decisions += 1
    assert domains == {"math", "code", "mcq"} and n_turns > 150 and n_decisions > 10


def test_steps_without_a_call_were_asked_nothing(played):
    seen = set()
    for record, society in played:
        called = {(t.round, t.agent) for t in society.turns}
        for rnd in record.rounds:
            for step in rnd.steps:
                shown = asked.asked(record, rnd.round, step.agent)
                if (rnd.round, step.agent) in called:
                    continue
                assert shown.kind == asked.NO_PROMPT and not shown.messages
                assert shown.call is None and "asked nothing" in shown.note
                seen.add("crash" if step.fault == "crash" else "idle")
        if not society.decisions:
            shown = asked.asked(record, len(record.rounds), DECISION_AGENT)
            assert shown.kind == asked.NO_PROMPT and "decision agent made no call" in shown.note
            seen.add("decision")
    assert seen == {"crash", "idle", "decision"}


def test_the_calls_table_lists_each_call_of_the_round_and_the_decision(played):
    record, _ = played[1]
    names = {i: f"agent {i}" for i in range(len(ROLES))} | {DECISION_AGENT: "D"}
    last = len(record.rounds) - 1
    for r in range(len(record.rounds)):
        table = asked.calls_table(record, r, names)
        calls = [c for c in record.calls if c.round == r or (r == last and c.agent < 0)]
        assert table["agent"].tolist() == [names[c.agent] for c in calls]
        assert table["prompt tokens"].tolist() == [c.prompt_tokens for c in calls]
        assert table["completion tokens"].tolist() == [c.completion_tokens for c in calls]
        assert set(table["prompt"]) == {"as the openai back-end would have asked"}
    summary = asked.call_summary(record.calls[0])
    assert f"{record.calls[0].prompt_tokens:,} prompt" in summary and "cache miss" in summary


def test_a_stored_prompt_is_shown_as_sent(played):
    record, _ = played[0]
    call = record.calls[0]
    call.prompt = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    shown = asked.asked(record, call.round, call.agent)
    assert shown.kind == asked.EXACT and shown.messages == call.prompt
    assert call.messages_hash in shown.note and shown.note.startswith(asked.EXACT)
    record.backend, call.prompt = "openai", None  # logged before prompts were stored
    assert asked.asked(record, call.round, call.agent).kind == asked.NO_PROMPT


def test_a_code_task_keeps_its_entry_point(tmp_path: Path):
    task = next(t for t in _tasks() if t.domain == "code")
    record, _ = _play(task, [], 0)
    assert task_of(record).meta["entry_point"] == task.meta["entry_point"]


def test_replay_says_why_the_decision_agent_made_no_call(tmp_path: Path):
    """Under ``--pass-through unanimous`` the society's agreeing finals spare the decision
    call; Replay reads the reason from the stored episode."""
    tasks = [t for t in _tasks() if t.domain == "math"][:12]
    config = RuntimeConfig(n_rounds=1, pass_through="unanimous")
    records = []
    for seed, task in enumerate(tasks):
        episode = TeamEpisode(task, ROLES, SimBackend(), config=config, seed=seed)
        run_sync(episode.play_round(RoundPlan([int(Action.SOLO_PROCESS)] * 4)))
        records.append(run_sync(episode.finish()))
    db = tmp_path / "store.duckdb"
    with RunLogger(db, "eval") as log:
        log.log_episodes(records)
    notes = {}
    for i, record in enumerate(records):
        loaded = load_episode(db, log.run_id, i).record
        assert loaded.pass_through == record.pass_through
        notes[loaded.pass_through] = asked.asked(loaded, 1, DECISION_AGENT).note
    assert "consensus pass-through" in notes["unanimous"]
    assert "decision agent made no call" not in notes[None]  # it was called: a prompt
