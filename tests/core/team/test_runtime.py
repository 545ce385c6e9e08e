"""The team runtime: layer order and concurrency, cycles, tokens, determinism, decision."""

from __future__ import annotations

import asyncio

import pytest

from core.actions import Action
from core.backends.base import AgentTurn, TurnResult
from core.backends.society import SimBackend
from core.errors import UserError
from core.records import EpisodeRecord
from core.team.env import TeamEnv
from core.team.failures import FailureSpec
from core.team.options import TeamOptions
from core.team.plan import RoundPlan
from core.team.runtime import KEPT_TEXT, RuntimeConfig, TeamEpisode, reward
from core.team.topologies import FIXED_TOPOLOGIES, make_policy
from tests.core.team.conftest import LatencyBackend, make_task

ROLES = ("solver", "coder", "analyst", "verifier")
B, A, S = int(Action.BROADCAST_ALL), int(Action.AGGREGATE_REFINE), int(Action.SOLO_PROCESS)


def play(episode: TeamEpisode, plans: list[RoundPlan]):
    async def go():
        for plan in plans:
            await episode.play_round(plan)
        return await episode.finish()

    return asyncio.run(go())


def test_layers_run_in_order_and_one_layer_runs_concurrently():
    backend = LatencyBackend(latency=0.1)
    # 0 and 1 work alone (layer 0); 2 and 3 aggregate (3 also reads 2 by the cycle rule).
    episode = TeamEpisode(make_task(), ROLES, backend, config=RuntimeConfig(n_rounds=1))
    plan = RoundPlan(actions=[S, S, A, A])
    record = play(episode, [plan])
    layers = record.rounds[0].layers
    assert layers == [[0, 1], [2], [3]]
    span = {a: (s, e) for a, _, s, e in backend.spans}
    # Agents 0 and 1 overlap in time: the second starts before the first ends.
    assert max(span[0][0], span[1][0]) < min(span[0][1], span[1][1])
    # Each later layer starts only after every agent it reads has finished.
    assert span[2][0] >= max(span[0][1], span[1][1])
    assert span[3][0] >= span[2][1]
    # Agent 3 read everyone before it, in source order, with this round's answers.
    inbox = next(t.inbox for t in backend.turns if t.agent == 3)
    assert [m.src for m in inbox] == [0, 1, 2]
    assert [m.answer for m in inbox] == ["0", "1", "2"]


def test_temporal_edge_and_messages_are_recorded():
    backend = LatencyBackend(latency=0.0)
    config = RuntimeConfig(n_rounds=2, idle="call")  # round 1's solo agents are called
    episode = TeamEpisode(make_task(), ROLES, backend, config=config)
    record = play(episode, [RoundPlan(actions=[A] * 4), RoundPlan(actions=[S] * 4)])
    second = [t for t in backend.turns if t.round == 1]
    assert all(t.previous is not None and t.previous.round == 0 for t in second)
    assert all(t.previous.agent == t.agent for t in second)
    r0 = record.rounds[0]
    assert {(m.src, m.dst) for m in r0.messages} == set(r0.edges)
    assert r0.steps[3].read_from == [0, 1, 2]
    assert r0.steps[3].agreement == 0.0  # agent 3 answers "3", nobody it read did


def test_cycles_are_broken_and_recorded():
    backend = LatencyBackend(latency=0.0)
    episode = TeamEpisode(make_task(), ROLES, backend, config=RuntimeConfig(n_rounds=1))
    ring = [(0, 1), (1, 2), (2, 3), (3, 0)]
    record = play(episode, [RoundPlan(actions=[int(Action.SELECTIVE_QUERY)] * 4, edges=ring)])
    assert record.rounds[0].dropped_edges == [(3, 0)]
    assert record.rounds[0].edges == [(0, 1), (1, 2), (2, 3)]
    assert record.rounds[0].layers == [[0], [1], [2], [3]]


def test_token_accounting_sums():
    backend = SimBackend("flash-lite")
    episode = TeamEpisode(make_task(3, difficulty=4), ROLES, backend, seed=5)
    record = play(
        episode,
        [
            RoundPlan(actions=[A, B, 2, 5]),
            RoundPlan(actions=[4, 3, 3, 0]),
            RoundPlan(actions=[A] * 4),
        ],
    )
    steps = sum(s.tokens for r in record.rounds for s in r.steps)
    calls = sum(c.prompt_tokens + c.completion_tokens for c in record.calls)
    assert record.tokens == steps + record.decision.tokens == calls
    assert record.tokens == sum(r.tokens for r in record.rounds) + record.decision.tokens
    assert len(record.calls) == 12 + 1
    # A message costs its reader the sender's completion: prompts grow with what is read.
    for r in record.rounds:
        for m in r.messages:
            assert m.tokens == r.steps[m.src].completion_tokens
    expected = 1.0 * record.score - 0.1 * min(record.tokens / 16000.0, 1.0)
    assert abs(record.reward - expected) < 1e-9
    assert reward(1.0, 10**9, RuntimeConfig()) == 0.9


def test_prompt_tokens_grow_with_in_degree():
    backend = SimBackend("flash-lite")
    task = make_task(1, difficulty=3)
    lone = play(
        TeamEpisode(task, ROLES, backend, config=RuntimeConfig(n_rounds=1), seed=1),
        [RoundPlan(actions=[S] * 4)],
    )
    mesh = play(
        TeamEpisode(task, ROLES, backend, config=RuntimeConfig(n_rounds=1), seed=1),
        [RoundPlan(actions=[A] * 4)],
    )
    assert mesh.rounds[0].steps[3].prompt_tokens > lone.rounds[0].steps[3].prompt_tokens + 100
    assert mesh.rounds[0].steps[0].prompt_tokens == lone.rounds[0].steps[0].prompt_tokens


def test_same_seed_same_record_whatever_the_width_and_order():
    env = TeamEnv(TeamOptions(benchmark="hand"), source=_Source())

    def run(width: int, order: list[int]):
        records = env.run(make_policy("random"), order, width=width)
        return {env.job(k).seed: r.to_dict() for k, r in zip(order, records, strict=True)}

    first = run(1, list(range(12)))
    again = run(8, list(reversed(range(12))))
    assert first == again
    assert len({r["seed"] for r in first.values()}) == 12
    job = env.job(0)
    plans = [RoundPlan(actions=[A, S, A, S])] * 3
    one, other = (
        play(TeamEpisode(job.task, ROLES, SimBackend("flash-lite"), seed=seed), plans)
        for seed in (job.seed, job.seed + 1)
    )
    assert one.to_dict() != other.to_dict()
    env.close()


def test_policy_view_is_copied_into_the_record():
    backend = LatencyBackend(latency=0.0)
    episode = TeamEpisode(make_task(), ROLES, backend, config=RuntimeConfig(n_rounds=1))
    q = [[float(i + a) for a in range(6)] for i in range(4)]
    plan = RoundPlan(
        actions=[S] * 4,
        q_values=q,
        greedy=[True, False, True, True],
        epsilon=0.25,
        q_tot=1.5,
        mixer_weights=[[0.1, 0.2]] * 4,
        credit=[0.5, 0.1, 0.2, 0.2],
    )
    record = play(episode, [plan])
    step = record.rounds[0].steps[1]
    assert step.q_values == q[1] and step.greedy is False and step.epsilon == 0.25
    assert record.rounds[0].q_tot == 1.5 and record.rounds[0].credit == [0.5, 0.1, 0.2, 0.2]
    restored = type(record).from_dict(record.to_dict())
    assert restored.to_dict() == record.to_dict()


def test_decision_reads_live_finals_and_single_answer_is_passed_through():
    backend = LatencyBackend(latency=0.0)
    record = play(
        TeamEpisode(make_task(), ROLES, backend, config=RuntimeConfig(n_rounds=1)),
        [RoundPlan(actions=[S] * 4)],
    )
    assert record.decision.agent == -1 and record.decision.read_from == [0, 1, 2, 3]
    assert record.team_answer == "0" and record.decision.prompt_tokens == 20 + 7 * 4

    alone = play(
        TeamEpisode(make_task(), ROLES, backend, config=RuntimeConfig(n_rounds=2)),
        [
            RoundPlan(actions=[S] * 4, active=[False, True, False, False]),
            RoundPlan(actions=[S] * 4, active=[False] * 4),
        ],
    )
    assert alone.team_answer == "1" and alone.decision.tokens == 0
    assert len(alone.calls) == 1
    # Inactive agents spend nothing; agent 1 carries its answer into round 1.
    assert alone.rounds[1].steps[1].answer == "1" and alone.rounds[1].tokens == 0


class _Source:
    name = "hand"

    def __len__(self) -> int:
        return 40

    def get(self, index: int):
        return make_task(index, difficulty=1 + index % 5)


V = int(Action.EXECUTE_VERIFY)


def test_idle_agents_keep_their_answer_without_a_call():
    backend = SimBackend("flash-lite")
    task = make_task(2, difficulty=2)
    episode = TeamEpisode(task, ROLES, backend, config=RuntimeConfig(n_rounds=3), seed=3)
    # Round 1: everyone solo, nobody reads or is read -> all idle. Round 2: agent 0
    # verifies (no edge, but not solo), agents 1-3 stay idle.
    record = play(
        episode, [RoundPlan(actions=[S] * 4), RoundPlan(actions=[S] * 4), RoundPlan([V, S, S, S])]
    )
    r0, r1, r2 = record.rounds
    for step, before in zip(r1.steps, r0.steps, strict=True):
        assert (step.tokens, step.text, step.alive) == (0, KEPT_TEXT, True)
        assert (step.answer, step.confidence, step.correct) == (
            before.answer,
            before.confidence,
            before.correct,
        )
    assert [s.tokens == 0 for s in r2.steps] == [False, True, True, True]
    assert sorted((c.round, c.agent) for c in record.calls if c.agent >= 0) == [
        (0, 0),
        (0, 1),
        (0, 2),
        (0, 3),
        (2, 0),
    ]
    steps = sum(s.tokens for r in record.rounds for s in r.steps)
    assert record.tokens == steps + record.decision.tokens


def test_a_call_after_kept_rounds_remembers_the_turn_that_answered():
    backend = LatencyBackend(latency=0.0)
    episode = TeamEpisode(make_task(), ROLES, backend, config=RuntimeConfig(n_rounds=3))
    play(episode, [RoundPlan([S] * 4), RoundPlan([S] * 4), RoundPlan([V, S, S, S])])
    late = [t for t in backend.turns if t.round > 0]
    assert [(t.agent, t.round) for t in late] == [(0, 2)]
    assert late[0].previous.round == 0 and late[0].previous.completion_tokens == 7


def test_an_agent_that_is_read_or_faulty_is_not_idle():
    backend = LatencyBackend(latency=0.0)
    byzantine = [FailureSpec(agent=3, mode="byzantine", from_round=1)]
    episode = TeamEpisode(
        make_task(), ROLES, backend, config=RuntimeConfig(n_rounds=2), failures=byzantine
    )
    # Round 1: agent 0 aggregates, so 1 and 2 (solo) are read and speak; 3 turned byzantine.
    play(episode, [RoundPlan([S] * 4), RoundPlan([A, S, S, S], edges=[(1, 0), (2, 0)])])
    assert sorted(t.agent for t in backend.turns if t.round == 1) == [0, 1, 2, 3]


def test_fixed_topologies_but_random_play_the_same_with_either_idle_rule():
    records = {}
    for idle in ("keep", "call"):
        env = TeamEnv(TeamOptions(idle=idle, concurrency=4))
        try:
            for name in FIXED_TOPOLOGIES:
                records[idle, name] = env.run(make_policy(name), range(6))
        finally:
            env.close()
    for name in FIXED_TOPOLOGIES:
        keep, call = records["keep", name], records["call", name]
        if name == "random":
            # Random picks solo with no edge now and then: those calls are saved.
            assert sum(r.tokens for r in keep) < sum(r.tokens for r in call)
            continue
        assert [(r.team_answer, r.tokens, r.reward) for r in keep] == [
            (r.team_answer, r.tokens, r.reward) for r in call
        ], name


class _AgreeingBackend(LatencyBackend):
    """Every agent gives the task's right answer, "12"; the decision agent (when called)
    picks the lowest agent's, like its parent."""

    async def agent_turn(self, turn: AgentTurn) -> TurnResult:
        result = await super().agent_turn(turn)
        return TurnResult(text="Answer: 12", answer="12", confidence=0.5, call=result.call)


def test_unanimous_pass_through_spares_the_decision_call_only_when_every_answer_agrees():
    def episode(backend, rule: str) -> EpisodeRecord:
        config = RuntimeConfig(n_rounds=1, pass_through=rule)
        return play(TeamEpisode(make_task(), ROLES, backend, config=config), [RoundPlan([S] * 4)])

    called = episode(_AgreeingBackend(latency=0.0), "off")
    passed = episode(_AgreeingBackend(latency=0.0), "unanimous")
    assert called.pass_through is None and len(called.calls) == 5 and called.decision.tokens > 0
    assert passed.pass_through == "unanimous" and len(passed.calls) == 4
    assert (passed.team_answer, passed.score, passed.decision.tokens) == ("12", 1.0, 0)
    assert passed.tokens == called.tokens - called.decision.tokens
    assert passed.decision.agreement == 1.0 and passed.reward > called.reward
    # Agents that disagree are still read by a called decision agent.
    split = episode(LatencyBackend(latency=0.0), "unanimous")
    assert split.pass_through is None and len(split.calls) == 5 and split.team_answer == "0"
    # One rule and one error for a setting wherever it is checked (core/team/settings.py).
    with pytest.raises(UserError, match="--pass-through must be one of off, unanimous"):
        RuntimeConfig(pass_through="majority").validate()


def test_temporal_edges_carry_last_rounds_answers():
    backend = LatencyBackend(latency=0.0)
    config = RuntimeConfig(n_rounds=2)
    fails = [FailureSpec(1, "crash", 1)]
    episode = TeamEpisode(make_task(), ROLES, backend, config=config, failures=fails)
    temporal = [(0, 3), (1, 3), (2, 3), (3, 3), (0, 2)]
    record = play(
        episode,
        [
            RoundPlan(actions=[S] * 4, temporal=temporal),  # round 0: nothing to carry yet
            RoundPlan(actions=[S, S, S, A], edges=[], temporal=temporal, active=[1, 1, 0, 1]),
        ],
    )
    first = [t for t in backend.turns if t.round == 0]
    assert all(not t.earlier for t in first)
    turn = next(t for t in backend.turns if t.round == 1 and t.agent == 3)
    # 1 crashed in round 1 (sends nothing), 2 is inactive but its round-0 answer is history;
    # the self-edge is memory, not a message.
    assert [(m.src, m.answer) for m in turn.earlier] == [(0, "0"), (2, "2")]
    assert turn.inbox == []
    r1 = record.rounds[1]
    assert r1.edges == []
    assert {(m.src, m.dst) for m in r1.messages} == {(0, 3), (2, 3)}
    assert r1.steps[3].read_from == [0, 2]
    # 2 is inactive in round 1: it reads nothing and makes no call.
    assert not any(t.agent == 2 and t.round == 1 for t in backend.turns)
    # 0 is solo with no edge: the idle rule keeps its answer (temporal out-edges read history).
    assert r1.steps[0].text == KEPT_TEXT


def test_temporal_reads_cost_prompt_tokens_and_reach_the_prompt():
    from core.backends.prompts import agent_messages

    def tokens(temporal):
        episode = TeamEpisode(
            make_task(2, difficulty=4), ROLES, SimBackend("flash-lite"),
            config=RuntimeConfig(n_rounds=2), seed=3,
        )  # fmt: skip
        rec = play(
            episode, [RoundPlan(actions=[S] * 4), RoundPlan([A] * 4, edges=[], temporal=temporal)]
        )
        return rec.rounds[1].steps[3]

    alone, reading = tokens(None), tokens([(0, 3), (1, 3)])
    assert reading.read_from == [0, 1]
    assert reading.prompt_tokens > alone.prompt_tokens
    backend = LatencyBackend(latency=0.0)
    episode = TeamEpisode(make_task(), ROLES, backend, config=RuntimeConfig(n_rounds=2))
    play(episode, [RoundPlan(actions=[S] * 4), RoundPlan([A] * 4, edges=[], temporal=[(1, 0)])])
    turn = next(t for t in backend.turns if t.round == 1 and t.agent == 0)
    text = agent_messages(turn)[1]["content"]
    assert "Answers your teammates gave in round 1" in text and "Agent 1 (answer: 1" in text
