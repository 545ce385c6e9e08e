"""Figure builders on hand-built records: what is drawn is exactly what was logged."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from core.actions import ACTION_NAMES, Action
from core.baselines.names import METHOD_NAMES
from core.records import DECISION_AGENT, AgentStep, EpisodeRecord, Message, RoundRecord
from core.team.topologies import FIXED_TOPOLOGIES
from lab import figures as F
from lab import palette
from lab.stats import ema, wilson_interval, with_intervals

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


def test_graph_draws_one_round_and_has_no_controls_of_its_own():
    rec = _episode()
    for r, rnd in enumerate(rec.rounds):
        fig = F.communication_graph(rec, r)
        # One control (the page's) drives every panel: no frames, Play button or slider here.
        assert not fig.frames and not fig.layout.updatemenus and not fig.layout.sliders
        assert fig.layout.meta["round"] == rnd.round
        assert F.graph_edges(fig) == [tuple(e) for e in rnd.edges]
        assert F.graph_edges(fig, "dropped edges") == [tuple(e) for e in rnd.dropped_edges]
    dropped = F.communication_graph(rec, 0).data[F.GRAPH_TRACES.index("dropped edges")]
    assert dropped.line.dash == "dash"
    # The decision agent's inputs are drawn in the last round only.
    assert F.graph_edges(F.communication_graph(rec, 0), "decision reads") == []
    assert F.graph_edges(F.communication_graph(rec, 1), "decision reads") == [(0, -1), (1, -1)]


def test_graph_colours_nodes_by_action_and_marks_failed_agents():
    rec = _episode()
    r0, r1 = F.communication_graph(rec, 0), F.communication_graph(rec, 1)
    assert F.graph_nodes(r0, "broadcast_all") == [0]
    assert F.graph_nodes(r0, "aggregate_refine") == [2]
    assert F.graph_nodes(r0, "failed") == []
    assert F.graph_nodes(r1, "failed") == [2]
    assert F.graph_nodes(r1, "decision agent") == [-1]
    assert all(name in [t.name for t in r0.data] for name in ACTION_NAMES)


def _points(trace, edge):
    return [
        (x, y)
        for x, y, c in zip(trace.x, trace.y, trace.customdata, strict=True)
        if c is not None and tuple(c) == edge
    ]


def test_decision_agent_sits_off_the_ring_and_its_inputs_pass_no_agent():
    for n in range(1, 9):
        pos = F.graph_positions(n)
        ring = [pos[i] for i in range(n)]
        d = pos[-1]
        assert math.hypot(*d) > 1.5, "D must sit outside the ring of agents"
        # No agent-to-agent chord passes near D (it would read a -> D -> b).
        for i in range(n):
            for j in range(n):
                if i != j:
                    assert F._segment_distance(d, ring[i], ring[j]) > 0.5
        # The path from each agent into D keeps clear of every other agent (node radius 0.13).
        for i in range(n):
            xs, ys = F._decision_path(ring[i], d)
            path = list(zip(xs, ys, strict=True))
            for j in range(n):
                if j != i:
                    gap = min(
                        F._segment_distance(ring[j], a, b)
                        for a, b in zip(path, path[1:], strict=False)
                    )
                    assert gap > 0.25, (n, i, j, gap)
    # Agents keep their places from round to round.
    rec = _episode()
    nodes = []
    for r in range(len(rec.rounds)):
        fig = F.communication_graph(rec, r)
        xy = {}
        for t in fig.data[len(F.GRAPH_TRACES) :]:
            if t.name in ACTION_NAMES:
                xy |= {int(i): (x, y) for i, x, y in zip(t.customdata, t.x, t.y, strict=True)}
        nodes.append(xy)
    assert nodes[0] == nodes[1] and len(set(nodes[0].values())) == 3


def test_kept_and_dropped_edges_between_the_same_agents_do_not_overlap():
    rec = _episode()  # round 0 keeps 0 -> 2 and drops 2 -> 0
    fig = F.communication_graph(rec, 0)
    kept = _points(fig.data[0], (0, 2))
    dropped = _points(fig.data[1], (2, 0))
    mid_kept, mid_dropped = kept[len(kept) // 2], dropped[len(dropped) // 2]
    assert math.dist(mid_kept, mid_dropped) > 0.2
    # Every drawn point of the kept edge is away from the dropped one (they are two curves).
    assert min(math.dist(p, q) for p in kept[2:-2] for q in dropped[2:-2]) > 0.05


def test_hover_names_the_decision_agent_and_the_dropped_edge():
    rec = _episode()
    last = F.communication_graph(rec, 1)
    reads = last.data[F.GRAPH_TRACES.index("decision reads")]
    texts = {t for t in reads.hovertext if t}
    assert all("→ D" in t and "-1" not in t for t in texts)
    assert any(
        t.startswith("0 solver → D: the decision agent read its final answer") for t in texts
    )
    dropped = F.communication_graph(rec, 0).data[1]
    assert any("dropped" in t for t in dropped.hovertext if t)


def test_palettes_never_share_a_colour():
    palettes = [F.ACTION_COLORS, F.AGENT_COLORS, palette.POLICY_PALETTE]
    for k, a in enumerate(palettes):
        for b in palettes[k + 1 :]:
            assert not {c.lower() for c in a} & {c.lower() for c in b}
    # The token chart colours agents from the agent palette, never an action's colour.
    fig = F.tokens_figure(_episode(), 0)
    agent_bars = [t for t in fig.data if t.type == "bar" and t.name[0].isdigit()]
    assert [t.marker.color for t in agent_bars] == list(F.AGENT_COLORS[:3])


# Colour-blind vision, simulated (Machado, Oliveira & Fernandes 2009, severity 1, on linear
# sRGB), and distances in OKLab (x 100): written out here, independent of lab.palette.
CVD = {
    "normal": ((1, 0, 0), (0, 1, 0), (0, 0, 1)),
    "protanopia": ((0.152286, 1.052583, -0.204868), (0.114503, 0.786281, 0.099216),
                   (-0.003882, -0.048116, 1.051998)),
    "deuteranopia": ((0.367322, 0.860646, -0.227968), (0.280085, 0.672501, 0.047413),
                     (-0.011820, 0.042940, 0.968881)),
    "tritanopia": ((1.255528, -0.076749, -0.178779), (-0.078411, 0.930809, 0.147602),
                   (0.004733, 0.691367, 0.303900)),
}  # fmt: skip


def _seen(color: str, vision: str) -> tuple[float, float, float]:
    """``color`` as ``vision`` sees it, in OKLab."""
    srgb = [int(color[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in srgb]
    r, g, b = (min(1.0, max(0.0, sum(m * c for m, c in zip(row, lin, strict=True))))
               for row in CVD[vision])  # fmt: skip
    l_, m_, s_ = (
        (0.4122214708 * r + 0.5363325363 * g + 0.0514459929 * b) ** (1 / 3),
        (0.2119034982 * r + 0.6806995451 * g + 0.1073969566 * b) ** (1 / 3),
        (0.0883024619 * r + 0.2817188376 * g + 0.6299787005 * b) ** (1 / 3),
    )
    return (
        0.2104542553 * l_ + 0.7936177850 * m_ - 0.0040720468 * s_,
        1.9779984951 * l_ - 2.4285922050 * m_ + 0.4505937099 * s_,
        0.0259040371 * l_ + 0.7827717662 * m_ - 0.8086757660 * s_,
    )


def _closest(names: list[str]) -> tuple[float, str]:
    """The smallest distance between two of ``names``' colours in any vision, and where."""
    return min(
        (100 * math.dist(_seen(palette.policy_color(a), v), _seen(palette.policy_color(b), v)),
         f"{a} / {b} ({v})")
        for k, a in enumerate(names) for b in names[k + 1 :] for v in CVD
    )  # fmt: skip


def test_every_method_and_topology_has_its_own_colour_blind_safe_colour():
    learned = ["qmix", *METHOD_NAMES]
    shipped = learned + list(FIXED_TOPOLOGIES)
    # Each has a colour of its own (not one picked from its name, which two may share).
    assert set(shipped) <= set(palette.POLICY_COLORS)
    colors = [palette.policy_color(name).lower() for name in shipped]
    assert len(set(colors)) == len(colors), dict(zip(shipped, colors, strict=True))
    assert palette.LEARNED_METHODS == tuple(learned)
    # The learned methods share every trade-off chart: far apart for every reader; any two
    # policies at least apart enough to tell side by side.
    assert _closest(learned)[0] >= 15, _closest(learned)
    assert _closest(shipped)[0] >= 6, _closest(shipped)


def test_q_values_match_the_log_and_mark_the_choice():
    rec = _episode()
    fig = F.q_values_figure(rec.rounds[0], rec.roles)
    assert [t.name for t in fig.data] == list(ACTION_NAMES) * 2
    assert [t.showlegend for t in fig.data] == [False] * 6 + [None] * 6
    for a, trace in enumerate(fig.data[:6]):
        assert list(trace.y) == [s.q_values[a] for s in rec.rounds[0].steps]
    broadcast = fig.data[int(Action.BROADCAST_ALL)]
    solo = fig.data[int(Action.SOLO_PROCESS)]
    w = F.CHOSEN_OUTLINE
    assert list(broadcast.marker.line.width) == [w, 0, 0]
    assert list(broadcast.customdata) == ["greedy", "", ""]
    assert list(solo.marker.line.width) == [0, w, 0]
    # The chosen bar keeps its colour: solid among pale ones, a thin outline (a 3 px
    # outline on a thin bar showed black, not the action's colour).
    assert w <= 1 and list(broadcast.marker.opacity) == [
        1.0,
        F.UNCHOSEN_OPACITY,
        F.UNCHOSEN_OPACITY,
    ]
    assert list(solo.customdata) == ["", "explored", ""]
    # The choice is named under each agent, never printed over a neighbour's bars.
    assert all(not t.text for t in fig.data)
    ticks = list(fig.layout.xaxis.ticktext)
    assert "greedy" in ticks[0] and "explored" in ticks[1]
    assert list(solo.marker.pattern.shape) == ["", "/", ""]
    # Fixed topologies have no Q-values: no figure.
    assert F.q_values_figure(rec.rounds[1], rec.roles) is None


def test_a_crashed_agent_is_failed_not_greedy():
    # The policy logs greedy=True for a crashed agent (its only available action is the
    # masked argmax), though that action is not the argmax of its Q-values.
    q = [0.1, 2.0, 0.0, 0.0, 0.0, 0.0]
    crashed = _step(1, 0, Action.SOLO_PROCESS, q_values=q, greedy=True, epsilon=0.0,
                    alive=False, fault="crash")  # fmt: skip
    healthy = _step(0, 0, Action.BROADCAST_ALL, q_values=q, greedy=True, epsilon=0.0)
    rnd = RoundRecord(round=0, edges=[], dropped_edges=[], layers=[], steps=[healthy, crashed])
    assert F.choice(crashed) == "failed (crash)" and F.choice(healthy) == "greedy"
    fig = F.q_values_figure(rnd, ROLES)
    solo = fig.data[int(Action.SOLO_PROCESS)]
    assert list(solo.customdata) == ["", "failed (crash)"]
    assert list(solo.marker.line.width) == [0, 0]  # no "chosen" outline for a forced action
    rec = _episode()
    rec.rounds[0] = rnd
    table = F.round_table(rec, 0)
    assert table["how"].tolist() == ["greedy", "failed (crash)"]
    assert "greedy" not in F._step_hover(crashed, ROLES)


def test_credit_and_weights_match_the_log():
    rec = _episode()
    bar = F.credit_figure(rec.rounds[0], rec.roles).data[0]
    assert list(bar.x) == [0.7, 0.2, 0.1]
    heat = F.weights_figure(rec.rounds[0].mixer_weights, rec.roles).data[0]
    assert [list(row) for row in heat.z] == [[0.1, 0.2], [0.3, 0.4], [0.5, 0.6]]
    assert heat.colorscale[0][1] != F.weights_figure([[-1.0, 1.0]], ["a"]).data[0].colorscale[0][1]
    assert F.credit_figure(rec.rounds[1], rec.roles) is None


def test_a_negative_credit_is_drawn_on_its_side_of_the_axis():
    # The CTDE page's unconstrained mixer: agents 1 and 2 pull Q_tot down. Their bars were
    # outside the axis (it started at 0), empty rows, and their "shares" meaningless.
    rnd = _episode().rounds[0]
    rnd.credit = [0.8, -0.3, -0.1]
    fig = F.credit_figure(rnd, ROLES)
    lo, hi = fig.layout.xaxis.range
    assert lo < -0.3 and hi > 0.8
    bar = fig.data[0]
    assert bar.marker.color[1] == bar.marker.color[2] != bar.marker.color[0]
    assert not any("%" in t for t in bar.text)


def test_tokens_add_up_to_the_episode_total_and_tables_include_the_decision():
    rec = _episode()
    for r in range(len(rec.rounds)):
        fig = F.tokens_figure(rec, r)
        bars = [t for t in fig.data if t.type == "bar"]
        assert sum(sum(t.y) for t in bars) == rec.tokens == 425
        total = [t for t in fig.data if t.name == "running total"][0]
        assert list(total.y) == [305, 395, 425]
        # The active round is solid, the others faded.
        first_agent = bars[0]
        assert [o == 1.0 for o in first_agent.marker.opacity] == [k == r for k in range(2)]
    table = F.round_table(rec, 1)
    assert table["agent"].tolist() == ["0 solver", "1 coder", "2 analyst", "D decision"]
    assert table["fault"].tolist() == ["", "", "crash", ""]
    assert table["tokens"].sum() + F.round_table(rec, 0)["tokens"].sum() == rec.tokens
    assert table["result"].tolist()[-1] == "right"
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
    df = df.assign(label=df["policy"], policy_id=df["policy"], run_id="run-1")
    assert F.pareto_front(df)["policy"].tolist() == ["single", "chain", "qmix", "full"]
    fig = F.pareto_figure(df)
    front = [t for t in fig.data if t.name == "Pareto front"][0]
    assert list(front.x) == [100, 300, 400, 900]


def test_pareto_points_keep_runs_apart_and_carry_their_intervals():
    df = pd.DataFrame(
        {
            "label": ["qmix · eval-a1", "qmix · eval-b2", "full · compare-c3"],
            "policy": ["qmix", "qmix", "full"],
            "policy_id": ["qmix", "qmix", "full"],
            "run_id": ["eval-x-a1", "eval-y-b2", "compare-z-c3"],
            "episodes": [10, 40, 20],
            "n_correct": [8, 20, 15],
            "accuracy": [0.8, 0.5, 0.75],
            "mean_tokens": [100.0, 120.0, 300.0],
            "std_tokens": [10.0, 10.0, 30.0],
            "mean_reward": [0.7, 0.4, 0.6],
            "std_reward": [0.1, 0.1, 0.1],
        }
    )
    fig = F.pareto_figure(with_intervals(df))
    qmix = [t for t in fig.data if t.name == "qmix"][0]
    assert len(qmix.x) == 2  # two checkpoints, two points
    assert [tuple(c[:2]) for c in qmix.customdata] == [("eval-x-a1", "qmix"), ("eval-y-b2", "qmix")]
    lo, hi = wilson_interval(8, 10)
    assert qmix.error_y.array[0] == pytest.approx(hi - 0.8)
    assert qmix.error_y.arrayminus[0] == pytest.approx(0.8 - lo)
    assert F.point_key(fig, {"curve_number": fig.data.index(qmix), "point_index": 1}) == (
        "eval-y-b2:qmix"
    )
    assert F.point_key(fig, {"customdata": ["compare-z-c3", "full", 20]}) == "compare-z-c3:full"


def test_training_curves_overlay_runs_and_smooth():
    a = pd.DataFrame({"episode": [0, 1, 2], "reward": [0.0, 1.0, 0.0], "correct": [0, 1, 1],
                      "tokens": [10, 20, 30]})  # fmt: skip
    b = pd.DataFrame({"episode": [0, 1], "reward": [1.0, 1.0], "correct": [1, 1],
                      "tokens": [5, 5]})  # fmt: skip
    m = pd.DataFrame({"step": [0, 1], "episode": [0, 1], "loss": [4.0, 0.0]})
    fig = F.training_curve_figure({"A": (a, m), "B": (b, None)}, "reward", smoothing=0.5)
    # Raw and smoothed are both named in the legend; the smoothed line is the bold one.
    assert [t.name for t in fig.data] == [
        "A · raw", "A · smoothed (EMA 0.5)", "B · raw", "B · smoothed (EMA 0.5)"
    ]  # fmt: skip
    smooth = fig.data[1::2]
    assert all(s.line.width > r.line.width for s, r in zip(smooth, fig.data[::2], strict=True))
    assert fig.data[0].opacity < 0.5 and fig.layout.showlegend
    assert list(smooth[0].y) == pytest.approx(list(ema([0.0, 1.0, 0.0], 0.5)))
    loss = F.training_curve_figure({"A": (a, m), "B": (b, None)}, "loss", smoothing=0.0)
    assert [list(t.y) for t in loss.data] == [[4.0, 0.0], [4.0, 0.0]]
    # Runs of Agent Q-Mix default to its colour (one shade per run); a learned-topology
    # method's run is drawn in that method's colour, never in qmix's.
    assert {t.line.color for t in fig.data} == {
        palette.shade(palette.policy_color("qmix"), k, 2) for k in range(2)
    }
    mixed = F.training_curve_figure(
        {"A": (a, m), "B": (b, None)}, "reward", methods={"A": "qmix", "B": "gptswarm"}
    )
    assert [t.line.color for t in mixed.data] == [palette.policy_color("qmix")] * 2 + [
        palette.policy_color("gptswarm")
    ] * 2


def test_a_schedule_is_drawn_as_it_is_and_a_missing_metric_is_no_figure():
    m = pd.DataFrame(
        {"step": range(6), "episode": range(6), "epsilon": [1.0, 0.8, 0.6, 0.4, 0.2, 0.05]}
    )
    fig = F.training_curve_figure({"A": (pd.DataFrame(), m)}, "epsilon", smoothing=0.9)
    # One line, the schedule itself (its EMA lagged above it, a staircase over the line).
    assert len(fig.data) == 1 and list(fig.data[0].y) == list(m["epsilon"])
    # AgentPrune logs no ε or Q_tot: no empty axes (the page says why instead).
    prune = pd.DataFrame({"step": [0, 1], "episode": [0, 1], "loss": [1.0, 0.5],
                          "epsilon": [None, None]})  # fmt: skip
    assert F.training_curve_figure({"P": (pd.DataFrame(), prune)}, "epsilon") is None
    assert F.training_curve_figure({"P": (pd.DataFrame(), prune)}, "q_tot_mean") is None


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
    # Every point of a measurement has the same n: the legend says it.
    qmix = [t for t in fig.data if t.name == "qmix (n = 5)"][0]
    assert list(qmix.x) == [0, 1] and list(qmix.y) == [0.8, 0.6]
    # The axis spans the data, not 0-100 %: 60-80 % is not squeezed into a fifth of it.
    lo, hi = fig.layout.yaxis.range
    assert 0.5 < lo < 0.6 and 0.8 < hi < 0.9
    rob["episodes"] = [5, 5, 7]
    rob["n_correct"] = [3, 4, 5]
    rob = rob.assign(mean_tokens=[90.0, 100.0, 120.0], std_tokens=1.0, mean_reward=0.5,
                     std_reward=0.1)  # fmt: skip
    table = F.robustness_table(with_intervals(rob))
    assert table["n"].tolist() == [7, 5, 5] and table["right"].tolist() == [5, 4, 3]
    assert table["95 % interval"].iloc[1] == "37.6% – 96.4%"  # Wilson, 4 of 5


def test_sweep_figure_sets_learned_trials_against_fixed_topologies():
    df = pd.DataFrame(
        {"run_id": ["e1", "e2", "e3", "e4"], "policy": ["qmix", "qmix", "qmix", "full"],
         "token_weight": [0.1, 0.1, 1.0, math.nan], "seed": [0, 1, 0, math.nan],
         "label": ["w=0.1 · seed 0", "w=0.1 · seed 1", "w=1 · seed 0", "full"],
         "episodes": [20, 20, 20, 20], "n_correct": [16, 14, 10, 15],
         "accuracy": [0.8, 0.7, 0.5, 0.75], "mean_tokens": [900.0, 800.0, 300.0, 1500.0],
         "std_tokens": [50.0] * 4, "mean_reward": [0.5] * 4, "std_reward": [0.1] * 4}
    )  # fmt: skip
    fig = F.sweep_figure(with_intervals(df))
    names = [t.name for t in fig.data]
    assert names == ["qmix · token weight 0.1", "qmix · token weight 1", "full", "front"]
    # Token weights differ by shade, seeds by marker; a fixed topology has its own colour.
    assert fig.data[0].marker.color != fig.data[1].marker.color
    assert list(fig.data[0].marker.symbol) == ["circle", "square"]
    assert fig.data[2].marker.color == palette.policy_color("full")
    # Only the front is named on the chart (the rest in the hover), labels stacked apart.
    assert [a.text for a in fig.layout.annotations] == [
        "w=1 · seed 0", "w=0.1 · seed 1", "w=0.1 · seed 0"
    ]  # fmt: skip
    rises = [-a.ay for a in fig.layout.annotations]
    assert all(r >= 22 for r in rises)
    lo, hi = wilson_interval(16, 20)
    assert fig.data[0].error_y.array[0] == pytest.approx(hi - 0.8)
    assert fig.data[0].error_y.arrayminus[0] == pytest.approx(0.8 - lo)
    # The front: nothing cheaper is as accurate (full costs more than w=0.1 · seed 0 for less).
    assert list(fig.data[3].x) == [300.0, 800.0, 900.0]


def test_each_learned_method_of_a_sweep_keeps_its_own_colour():
    # Agent Q-Mix and two learned-topology methods at two token weights: each method's
    # points in its own colour (shaded by token weight), never in qmix's.
    rows = [("qmix", 0.1, {}), ("qmix", 1.0, {}), ("agentprune", 0.1, {"prune_ratio": 0.3}),
            ("agentprune", 1.0, {"prune_ratio": 0.3}), ("agentprune", 1.0, {"prune_ratio": 0.5}),
            ("gdesigner", 0.1, {}), (None, math.nan, {})]  # fmt: skip
    df = pd.DataFrame(
        {"run_id": [f"e{k}" for k in range(7)], "policy": [m or "star" for m, _, _ in rows],
         "token_weight": [w for _, w, _ in rows], "knob": [kn for _, _, kn in rows],
         "seed": [0] * 6 + [math.nan], "label": [f"p{k}" for k in range(7)],
         "description": [f"what p{k} is" for k in range(7)], "episodes": [20] * 7,
         "n_correct": [10] * 7, "accuracy": [0.5] * 7,
         "mean_tokens": [100.0 * (k + 1) for k in range(7)], "std_tokens": [5.0] * 7,
         "mean_reward": [0.5] * 7, "std_reward": [0.1] * 7}
    )  # fmt: skip
    fig = F.sweep_figure(with_intervals(df))
    points = {t.name: t for t in fig.data if t.mode == "markers"}
    assert list(points) == [
        "qmix · token weight 0.1", "qmix · token weight 1",
        "agentprune prune_ratio=0.3 · token weight 0.1",
        "agentprune prune_ratio=0.3 · token weight 1",
        "agentprune prune_ratio=0.5 · token weight 1", "gdesigner · token weight 0.1", "star",
    ]  # fmt: skip
    qmix = {palette.shade(palette.policy_color("qmix"), k, 2) for k in range(2)}
    prune = [palette.shade(palette.policy_color("agentprune"), k, 2) for k in range(2)]
    assert {points[n].marker.color for n in points if n.startswith("qmix")} == qmix
    assert [points[f"agentprune prune_ratio=0.3 · token weight {w}"].marker.color
            for w in ("0.1", "1")] == prune  # fmt: skip
    assert points["gdesigner · token weight 0.1"].marker.color == palette.policy_color("gdesigner")
    for name, trace in points.items():
        if not name.startswith("qmix"):
            assert trace.marker.color not in qmix, name
    # Two knob values of one method at one weight: one shade, two markers.
    assert points["agentprune prune_ratio=0.5 · token weight 1"].marker.symbol != (
        points["agentprune prune_ratio=0.3 · token weight 1"].marker.symbol
    )
    # The hover says what a point is (lab.data.sweep_points writes the description).
    assert [c[3] for c in points["gdesigner · token weight 0.1"].customdata] == ["what p5 is"]
    assert "%{customdata[3]}" in points["star"].hovertemplate


def test_simulated_and_real_points_never_share_a_front():
    # The real model is cheap and bad, the simulator dear and good: one front would read
    # "the real model dominates the cheap end", a comparison no one made.
    df = pd.DataFrame(
        {"run_id": ["s1", "s2", "r1", "r2"], "policy": ["qmix", "full", "qmix", "full"],
         "policy_id": ["qmix", "full", "qmix", "full"],
         "engine": ["simulated", "simulated", "openai · smollm2", "openai · smollm2"],
         "label": ["qmix · s1", "full · s2", "qmix · r1", "full · r2"], "episodes": [20] * 4,
         "n_correct": [16, 18, 2, 1], "accuracy": [0.8, 0.9, 0.1, 0.05],
         "mean_tokens": [900.0, 1500.0, 4000.0, 6000.0], "std_tokens": [50.0] * 4,
         "mean_reward": [0.5] * 4, "std_reward": [0.1] * 4}
    )  # fmt: skip
    assert F.engines(df) == ["simulated", "openai · smollm2"]
    fronts = F.fronts(df)
    assert fronts["simulated"]["run_id"].tolist() == ["s1", "s2"]
    assert fronts["openai · smollm2"]["run_id"].tolist() == ["r1"]
    for fig in (F.pareto_figure(with_intervals(df)), F.sweep_figure(with_intervals(
        df.assign(token_weight=[0.1, math.nan, 0.1, math.nan], seed=[0, math.nan, 0, math.nan])
    ))):  # fmt: skip
        titles = [a.text for a in fig.layout.annotations if a.xref == "paper"]
        assert titles == ["simulated", "openai · smollm2"]  # each panel names its engine
        # Each front's points are named in their own panel.
        named = {(a.xref, a.text) for a in fig.layout.annotations if a.xref != "paper"}
        assert {(x, t.split(" · ")[-1][0]) for x, t in named} <= {("x", "s"), ("x2", "r")}
        assert {x for x, _ in named} == {"x", "x2"}
        lines = [t for t in fig.data if t.mode == "lines"]
        assert [(t.xaxis, list(t.x)) for t in lines] == [
            ("x", [900.0, 1500.0]),
            ("x2", [4000.0]),
        ]
        for t in fig.data:  # every real point is in the real panel
            if t.mode != "lines":
                assert {c[0][0] for c in t.customdata} == ({"s"} if t.xaxis == "x" else {"r"})
    one = F.pareto_figure(df[df["engine"] == "simulated"])
    assert not [a for a in one.layout.annotations if a.xref == "paper"]  # one panel, no title
    assert F.fronts(df.drop(columns="engine")).keys() == {None}


def test_graph_rejects_an_episode_without_rounds():
    rec = _episode()
    rec.rounds = []
    with pytest.raises(ValueError, match="no rounds"):
        F.communication_graph(rec)


def test_figures_have_no_titles_and_legends_sit_under_the_plot():
    # Plotly titles and a legend above the plot collide on a 390 px screen; the page's
    # headings name the charts instead.
    rec = _episode()
    figs = [F.communication_graph(rec, 0), F.q_values_figure(rec.rounds[0], rec.roles),
            F.tokens_figure(rec, 0), F.credit_figure(rec.rounds[0], rec.roles)]  # fmt: skip
    for fig in figs:
        assert not (fig.layout.title and fig.layout.title.text)
        assert fig.layout.legend.yref == "container" and fig.layout.legend.y == 0


def test_a_policy_has_one_colour_on_every_chart():
    agg = pd.DataFrame(
        {"run_id": ["eval-a-1", "eval-b-2", "compare-c-3", "compare-c-3"],
         "policy": ["qmix", "qmix", "star", "full"], "policy_id": ["qmix", "qmix", "star", "full"],
         "label": ["qmix · eval-1", "qmix · eval-2", "star · compare-3", "full · compare-3"],
         "episodes": [10] * 4, "accuracy": [0.9, 0.8, 0.7, 0.95],
         "mean_tokens": [100.0, 90.0, 50.0, 400.0]}
    )  # fmt: skip
    pareto = F.pareto_figure(agg)
    rob = pd.DataFrame({"policy": ["star", "qmix"], "n_failed": [0, 0], "accuracy": [0.5, 0.6],
                        "episodes": [5, 5]})  # fmt: skip
    robust = F.robustness_figure(rob)
    for name in ("qmix", "star"):
        in_pareto = next(t for t in pareto.data if t.name == name).marker.color
        in_robust = next(t for t in robust.data if t.name.startswith(name)).line.color
        assert in_pareto == in_robust == palette.policy_color(name)
    # Two qmix runs: one colour, two markers.
    qmix = next(t for t in pareto.data if t.name == "qmix")
    assert len(set(qmix.marker.symbol)) == 2
    # A learned-topology method's point is in its method's colour whatever its label
    # (two checkpoints of one method in one run), told apart by marker, and names itself.
    labels = ["gdesigner w=0.1 sparsity_weight=0.01 #1", "gdesigner w=0.1 sparsity_weight=0.01 #2"]
    methods = agg.assign(
        policy=["qmix", *labels, "full"], policy_id=["qmix", *labels, "full"],
        method=["qmix", "gdesigner", "gdesigner", "full"],
        description=["qmix (learned)", "gdesigner (learned) · trained at token weight 0.1",
                     "gdesigner (learned) · trained at token weight 0.1", "full (fixed topology)"],
    )  # fmt: skip
    pareto = F.pareto_figure(methods)
    gd = [t for t in pareto.data if t.name in labels]
    assert [t.marker.color for t in gd] == [palette.policy_color("gdesigner")] * 2
    assert gd[0].marker.symbol != gd[1].marker.symbol
    assert gd[0].customdata[0][3] == "gdesigner (learned) · trained at token weight 0.1"
    rob = pd.DataFrame({"policy": labels, "method": ["gdesigner"] * 2, "n_failed": [0, 0],
                        "accuracy": [0.5, 0.6], "episodes": [5, 5]})  # fmt: skip
    assert {t.line.color for t in F.robustness_figure(rob).data} == {
        palette.policy_color("gdesigner")
    }
    # A policy the project does not name gets a colour from its name, every time.
    assert palette.policy_color("my-baseline") == palette.policy_color("my-baseline")
    assert palette.policy_color("my-baseline") in palette.OTHER_POLICY_COLORS


def test_front_labels_never_overlap_and_lean_into_the_chart():
    # Four front points a hair apart in accuracy: the labels still stack a line apart.
    agg = pd.DataFrame(
        {"run_id": list("abcd"), "policy": ["single", "chain", "ring", "qmix"],
         "policy_id": ["single", "chain", "ring", "qmix"], "label": list("ABCD"),
         "episodes": [10] * 4, "accuracy": [0.80, 0.801, 0.802, 0.803],
         "mean_tokens": [10.0, 400.0, 900.0, 1600.0]}
    )  # fmt: skip
    fig = F.pareto_figure(agg)
    notes = sorted(fig.layout.annotations, key=lambda a: a.y)
    y0, y1 = fig.layout.yaxis.range
    px = (fig.layout.height - 150) / (y1 - y0)
    tops = [(a.y - y0) * px - a.ay for a in notes]
    assert all(b - a >= 18 for a, b in zip(tops, tops[1:], strict=False))
    assert [a.xanchor for a in notes] == ["left", "left", "right", "right"]
