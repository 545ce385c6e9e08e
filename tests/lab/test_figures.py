"""Figure builders on hand-built records: what is drawn is exactly what was logged."""

from __future__ import annotations

import pandas as pd
import pytest

from core.actions import ACTION_NAMES, Action
from core.records import DECISION_AGENT, AgentStep, EpisodeRecord, Message, RoundRecord
from lab import figures as F

ROLES = ["solver", "coder", "analyst"]


def _step(agent: int, r: int, action: Action, **kw) -> AgentStep:
    return AgentStep(agent=agent, role=ROLES[agent], round=r, action=int(action), **kw)


def _episode() -> EpisodeRecord:
    q = [[0.1, 0.9, -0.2, 0.3, 0.0, -1.0], [0.5, 0.2, 0.7, -0.1, 0.4, 0.0], [0.0] * 6]
    r0 = RoundRecord(
        round=0,
        edges=[(0, 1), (0, 2)],
        dropped_edges=[(2, 0)],
        layers=[[0], [1, 2]],
        steps=[
            _step(
                0,
                0,
                Action.BROADCAST_ALL,
                q_values=q[0],
                greedy=True,
                epsilon=0.2,
                prompt_tokens=100,
                completion_tokens=20,
            ),
            _step(
                1,
                0,
                Action.SOLO_PROCESS,
                q_values=q[1],
                greedy=False,
                epsilon=0.2,
                prompt_tokens=90,
                completion_tokens=10,
            ),
            _step(
                2,
                0,
                Action.AGGREGATE_REFINE,
                q_values=q[2],
                greedy=True,
                epsilon=0.2,
                prompt_tokens=80,
                completion_tokens=5,
            ),
        ],  # fmt: skip
        messages=[
            Message(0, 1, 0, "it is 42", "42", 0.8, 7),
            Message(0, 2, 0, "it is 42", "42", 0.8, 7),
        ],
        q_tot=1.25,
        mixer_weights=[[0.1, 0.2], [0.3, 0.4], [0.5, 0.6]],
        credit=[0.7, 0.2, 0.1],
    )
    r1 = RoundRecord(
        round=1,
        edges=[(1, 0)],
        dropped_edges=[],
        layers=[[1], [0]],
        steps=[
            _step(0, 1, Action.SELECTIVE_QUERY, prompt_tokens=50),
            _step(1, 1, Action.BROADCAST_ALL, prompt_tokens=40),
            _step(2, 1, Action.SOLO_PROCESS, alive=False, fault="crash"),
        ],
    )
    decision = AgentStep(agent=DECISION_AGENT, role="decision", round=2, action=0, answer="42",
                         read_from=[0, 1], prompt_tokens=30)  # fmt: skip
    return EpisodeRecord(
        task_id="t1", benchmark="math", domain="math", difficulty=2, question="6*7?",
        ground_truth="42", roles=ROLES, policy="qmix", seed=3, rounds=[r0, r1],
        decision=decision, team_answer="42", score=1.0, reward=0.9,
        failures=[{"agent": 2, "mode": "crash", "from_round": 1}],
    )  # fmt: skip


def test_graph_has_one_frame_per_round_with_the_logged_edges():
    rec = _episode()
    fig = F.communication_graph(rec)
    assert [f.name for f in fig.frames] == ["0", "1"]
    assert F.frame_edges(fig, 0) == [(0, 1), (0, 2)]
    assert F.frame_edges(fig, 1) == [(1, 0)]
    assert F.frame_edges(fig, 0, "dropped edges") == [(2, 0)]
    assert F.frame_edges(fig, 1, "dropped edges") == []
    dropped = fig.frames[0].data[F.GRAPH_TRACES.index("dropped edges")]
    assert dropped.line.dash == "dash"
    # The decision agent's inputs are drawn in the last round only.
    assert F.frame_edges(fig, 0, "decision reads") == []
    assert F.frame_edges(fig, 1, "decision reads") == [(0, -1), (1, -1)]


def test_graph_colours_nodes_by_action_and_marks_failed_agents():
    fig = F.communication_graph(_episode(), active_round=1)
    assert F.frame_nodes(fig, 0, "broadcast_all") == [0]
    assert F.frame_nodes(fig, 0, "aggregate_refine") == [2]
    assert F.frame_nodes(fig, 0, "failed") == []
    assert F.frame_nodes(fig, 1, "failed") == [2]
    assert F.frame_nodes(fig, 1, "decision agent") == [-1]
    legend = [t.name for t in fig.data]
    assert all(name in legend for name in ACTION_NAMES)
    # The figure opens on the requested round; the slider agrees.
    assert fig.layout.sliders[0].active == 1
    assert (
        F.frame_edges(fig, 1) == [(int(c[0]), int(c[1])) for c in fig.data[0].customdata if c][:1]
    )


def test_layout_is_fixed_across_rounds():
    fig = F.communication_graph(_episode())
    pos = []
    for frame in fig.frames:
        nodes = {}
        for trace in frame.data[len(F.GRAPH_TRACES) :]:
            if trace.name in ACTION_NAMES:
                nodes |= {
                    int(i): (x, y)
                    for i, x, y in zip(trace.customdata, trace.x, trace.y, strict=True)
                }
        pos.append(nodes)
    assert pos[0] == pos[1]
    assert len(set(pos[0].values())) == 3


def test_q_values_match_the_log_and_mark_the_choice():
    rec = _episode()
    fig = F.q_values_figure(rec.rounds[0], rec.roles)
    assert [t.name for t in fig.data] == list(ACTION_NAMES)
    for a, trace in enumerate(fig.data):
        assert list(trace.y) == [s.q_values[a] for s in rec.rounds[0].steps]
    broadcast = fig.data[int(Action.BROADCAST_ALL)]
    solo = fig.data[int(Action.SOLO_PROCESS)]
    assert list(broadcast.marker.line.width) == [3, 0, 0]
    assert list(broadcast.text) == ["greedy", "", ""]
    assert list(solo.marker.line.width) == [0, 3, 0]
    assert list(solo.text) == ["", "explored", ""]
    assert list(solo.marker.pattern.shape) == ["", "/", ""]
    # Fixed topologies have no Q-values: no figure.
    assert F.q_values_figure(rec.rounds[1], rec.roles) is None


def test_mixer_figure_matches_credit_and_weights():
    rec = _episode()
    fig = F.mixer_figure(rec.rounds[0], rec.roles)
    bar, heat = fig.data
    assert list(bar.x) == [0.7, 0.2, 0.1]
    assert [list(row) for row in heat.z] == [[0.1, 0.2], [0.3, 0.4], [0.5, 0.6]]
    assert F.mixer_figure(rec.rounds[1], rec.roles) is None


def test_tokens_and_tables():
    rec = _episode()
    fig = F.tokens_figure(rec)
    total = [t for t in fig.data if t.name == "running total"][0]
    assert list(total.y) == [305, 395, 425]
    table = F.round_table(rec, 1)
    assert table["fault"].tolist() == ["", "", "crash"]
    assert F.messages_table(rec.rounds[0])["edge"].tolist() == ["0 → 1", "0 → 2"]


def test_pareto_front_keeps_only_undominated_policies():
    df = pd.DataFrame(
        {
            "policy": ["single", "chain", "full", "qmix", "debate"],
            "mean_tokens": [100, 300, 900, 400, 800],
            "accuracy": [0.5, 0.6, 0.8, 0.78, 0.7],
            "episodes": [10] * 5,
        }
    )
    assert F.pareto_front(df)["policy"].tolist() == ["single", "chain", "qmix", "full"]
    fig = F.pareto_figure(df)
    front = [t for t in fig.data if t.name == "Pareto front"][0]
    assert list(front.x) == [100, 300, 400, 900]


def test_action_mix_and_robustness_figures():
    mix = pd.DataFrame({"round": [0, 0, 1], "action": [0, 1, 1], "share": [0.25, 0.75, 1.0]})
    fig = F.action_mix_figure(mix, "round")
    assert list(fig.data[1].y) == [0.75, 1.0]
    assert list(fig.data[0].y) == [0.25, 0.0]
    rob = pd.DataFrame(
        {"policy": ["qmix", "qmix", "full"], "n_failed": [1, 0, 0], "accuracy": [0.6, 0.8, 0.7],
         "episodes": [5, 5, 5]}
    )  # fmt: skip
    fig = F.robustness_figure(rob)
    qmix = [t for t in fig.data if t.name == "qmix"][0]
    assert list(qmix.x) == [0, 1] and list(qmix.y) == [0.8, 0.6]


def test_graph_rejects_an_episode_without_rounds():
    rec = _episode()
    rec.rounds = []
    with pytest.raises(ValueError, match="no rounds"):
        F.communication_graph(rec)
