"""Figure builders: plain functions from records / DataFrames to Plotly figures.

Nothing here touches Streamlit or the database, so every figure can be built and checked
in a test from a hand-made :class:`~core.records.EpisodeRecord` or DataFrame.

Colours come from :mod:`lab.palette` (an action, an agent and a policy each have one
colour on every page). Figures carry no titles of their own (the page's headings name them),
and legends sit under the plot, so nothing overlaps on a narrow screen.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import networkx as nx
import numpy as np
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio

from core.actions import ACTION_NAMES
from core.records import AgentStep, EpisodeRecord, RoundRecord
from lab.palette import (
    ACTION_COLORS,
    AGENT_COLORS,
    LEARNED_METHODS,
    policy_color,
    shade,
    variant_symbols,
)
from lab.policies import knob_text
from lab.stats import ema

FAILED_COLOR = "#D62728"
DECISION_COLOR = "#222222"
DROPPED_COLOR = "#C0392B"
EDGE_COLOR = "#555555"
NEUTRAL_COLOR = "#5B6770"
"""Bars that are neither an action, an agent nor a policy (the mixer's credit)."""
FONT = dict(family="Inter, Segoe UI, Helvetica, Arial, sans-serif", size=13)

GRAPH_TRACES = ("edges", "dropped edges", "decision reads")
"""Names of the graph figure's first three traces (edge traces; nodes follow)."""

DECISION = "D"
"""How the decision agent (agent -1 in the records) is labelled everywhere."""

_NODE_RADIUS = 0.13
"""How far (layout units) arrows stop short of a node's centre, so the head stays visible."""

_BEND = 0.18
"""How far an agent-to-agent edge bows to its right (fraction of its length): a → b and
b → a (say a kept edge and the dropped one back) then never lie on top of each other."""


def _lean_template(base: str = "plotly_white") -> go.layout.Template:
    # The full template carries defaults for ~25 trace types; a figure copies and validates
    # its template several times on the way to the browser (about a third of a Replay
    # round's cost), so keep only the layout and the trace types drawn here.
    full = pio.templates[base]
    return go.layout.Template(
        layout=full.layout, data={t: getattr(full.data, t) for t in ("bar", "scatter", "heatmap")}
    )


TEMPLATE = _lean_template()
"""``plotly_white`` as it applies to this module's figures (bar, scatter, heatmap traces)."""


def _layout(fig: go.Figure, height: int, legend: bool = True) -> go.Figure:
    # The legend goes at the bottom of the figure, placed against the container (not the
    # plot): Plotly then lifts the plot and its tick labels clear of it, however many rows
    # the legend wraps into on a phone. Above the plot it collides with the modebar.
    fig.update_layout(
        template=TEMPLATE,
        font=FONT,
        height=height,
        margin=dict(l=10, r=10, t=30, b=10),
        showlegend=legend,
        xaxis=dict(automargin=True),
        yaxis=dict(automargin=True),
        legend=dict(
            orientation="h", yref="container", yanchor="bottom", y=0.0, xanchor="left", x=0.0
        ),
    )
    return fig


def round_name(index: int) -> str:
    """``round 1`` for the record's round 0: people count rounds from 1 (so do the prompts)."""
    return f"round {int(index) + 1}"


def agent_labels(roles: Sequence[str]) -> list[str]:
    """``"0 solver"``, ``"1 coder"``...: how agents are named on every axis."""
    return [f"{i} {role}" for i, role in enumerate(roles)]


def agent_name(agent: int, roles: Sequence[str]) -> str:
    """``"2 analyst"`` for an agent, ``"D"`` for the decision agent (-1)."""
    if agent < 0:
        return DECISION
    return agent_labels(roles)[agent] if agent < len(roles) else str(agent)


def failed_silent(step: AgentStep) -> bool:
    """The agent sat the round out (crashed, timed out): its action was forced, not chosen."""
    return not step.alive


def choice(step: AgentStep) -> str:
    """How the step's action came about, in words that are true for that step.

    ``failed (crash)`` for an agent out of the round (its only available action was
    forced: no greedy claim), ``greedy`` / ``explored`` for the learned policy (ε), and
    ``fixed`` for a fixed topology (no Q-values).
    """
    if failed_silent(step):
        return f"failed ({step.fault or 'inactive'})"
    if step.greedy is None or step.q_values is None:
        return "fixed"
    if step.greedy and int(np.argmax(step.q_values)) == step.action:
        return "greedy"
    return "explored"


# --------------------------------------------------------------------- graph


def graph_positions(n_agents: int) -> dict[int, tuple[float, float]]:
    """A fixed layout: agents on a circle (agent 0 on top), the decision agent (-1) below it.

    D sits outside the ring (inside it, an edge 1 → 3 would read as 1 → D → 3) and its
    inputs run around the outside of the ring (:func:`_decision_path`), so no line into D
    crosses an agent. Fixed for the whole episode, so only the edges move between rounds.
    """
    if n_agents == 1:
        pos = {0: (0.0, 1.0)}
    else:
        circle = nx.circular_layout(range(n_agents), scale=1.0)
        # networkx puts agent 0 on the right; turn a quarter so it sits on top.
        pos = {i: (round(-float(xy[1]), 6), round(float(xy[0]), 6)) for i, xy in circle.items()}
    pos[-1] = (0.0, -_DECISION_Y)
    return pos


_DECISION_Y = 1.75
"""D's distance below the ring's centre (the ring has radius 1)."""

_OUTER = 1.35
"""Radius of the lane around the ring that D's inputs follow."""


def _segment_distance(p: tuple[float, float], a: tuple[float, float], b: tuple[float, float]):
    """Distance from point ``p`` to the segment ``a``-``b``."""
    ax, ay, bx, by, px, py = *a, *b, *p
    dx, dy = bx - ax, by - ay
    t = max(0.0, min(1.0, ((px - ax) * dx + (py - ay) * dy) / ((dx * dx + dy * dy) or 1.0)))
    return math.hypot(ax + t * dx - px, ay + t * dy - py)


def _decision_path(a: tuple[float, float], d: tuple[float, float]) -> tuple[list, list]:
    """From agent ``a`` straight out to the lane around the ring, along it to the bottom, then
    down to just short of D: a route that passes no other agent."""
    start = math.atan2(a[1], a[0])
    end = -math.pi / 2
    sweep = (end - start + math.pi) % (2 * math.pi) - math.pi  # the shorter way round
    steps = max(2, int(abs(sweep) / (math.pi / 18)))
    xs, ys = [a[0]], [a[1]]
    for k in range(steps + 1):
        angle = start + sweep * k / steps
        xs.append(_OUTER * math.cos(angle))
        ys.append(_OUTER * math.sin(angle))
    xs.append(d[0])
    ys.append(d[1] + _NODE_RADIUS)
    return xs, ys


def _edge_path(
    a: tuple[float, float], b: tuple[float, float], bend: float, samples: int = 14
) -> tuple[list[float], list[float]]:
    """Points of a quadratic curve from ``a`` to just short of ``b``, bowing to the right of
    the direction of travel by ``bend`` × its length (0 = straight)."""
    dx, dy = b[0] - a[0], b[1] - a[1]
    length = math.hypot(dx, dy) or 1.0
    # Right-hand normal of the direction a -> b.
    cx = (a[0] + b[0]) / 2 + bend * dy
    cy = (a[1] + b[1]) / 2 - bend * dx
    xs, ys = [], []
    for k in range(samples + 1):
        t = k / samples
        x = (1 - t) ** 2 * a[0] + 2 * (1 - t) * t * cx + t * t * b[0]
        y = (1 - t) ** 2 * a[1] + 2 * (1 - t) * t * cy + t * t * b[1]
        if k > 0 and math.hypot(b[0] - x, b[1] - y) < _NODE_RADIUS * min(1.0, length):
            # Stop where the curve enters the target node, so the arrow head shows.
            break
        xs.append(x)
        ys.append(y)
    return xs, ys


def _edge_trace(
    edges: Sequence[tuple[int, int]],
    pos: dict[int, tuple[float, float]],
    name: str,
    color: str,
    dash: str,
    hover: dict[tuple[int, int], str],
    roles: Sequence[str],
    width: float = 2.0,
    bend: float = _BEND,
) -> go.Scatter:
    xs: list[float | None] = []
    ys: list[float | None] = []
    sizes: list[int] = []
    custom: list[list[int] | None] = []
    texts: list[str] = []
    for s, d in edges:
        if d == -1:
            px, py = _decision_path(pos[s], pos[d])
        else:
            px, py = _edge_path(pos[s], pos[d], bend)
        xs += [*px, None]
        ys += [*py, None]
        sizes += [0] * (len(px) - 1) + [13, 0]
        custom += [[s, d]] * len(px) + [None]
        text = hover.get((s, d), f"{agent_name(s, roles)} → {agent_name(d, roles)}")
        texts += [text] * len(px) + [""]
    return go.Scatter(
        x=xs,
        y=ys,
        mode="lines+markers",
        name=name,
        line=dict(color=color, width=width, dash=dash),
        marker=dict(symbol="arrow", angleref="previous", size=sizes, color=color),
        customdata=custom,
        hovertext=texts,
        hoverinfo="text",
        showlegend=True,
        legendgroup=name,
    )


def _message_hover(rnd: RoundRecord, roles: Sequence[str]) -> dict[tuple[int, int], str]:
    out = {}
    for m in rnd.messages:
        answer = m.answer if m.answer is not None else "—"
        out[(m.src, m.dst)] = (
            f"{agent_name(m.src, roles)} → {agent_name(m.dst, roles)}: answer {answer} "
            f"(conf {m.confidence:.2f}, {m.tokens} tok)<br>{_clip_text(m.text, 120)}"
        )
    return out


def _dropped_hover(edges: Sequence[tuple[int, int]], roles: Sequence[str]) -> dict:
    return {
        (s, d): f"{agent_name(s, roles)} → {agent_name(d, roles)}: asked for, dropped to break "
        "a cycle (not read)"
        for s, d in edges
    }


def _decision_hover(record: EpisodeRecord, sources: Sequence[int]) -> dict:
    finals = {}
    if record.rounds:
        finals = {s.agent: s.answer for s in record.rounds[-1].steps}
    return {
        (s, -1): f"{agent_name(s, record.roles)} → {DECISION}: the decision agent read its "
        f"final answer ({finals.get(s) if finals.get(s) is not None else '—'})"
        for s in sources
    }


def _clip_text(text: str, n: int) -> str:
    text = text.replace("\n", " ")
    return text if len(text) <= n else text[: n - 1] + "…"


def _graph_data(
    record: EpisodeRecord, r: int, pos: dict[int, tuple[float, float]]
) -> list[go.Scatter]:
    rnd = record.rounds[r]
    roles = record.roles
    last = r == len(record.rounds) - 1
    sources = list(record.decision.read_from) if (last and record.decision) else []
    data = [
        _edge_trace(rnd.edges, pos, GRAPH_TRACES[0], EDGE_COLOR, "solid",
                    _message_hover(rnd, roles), roles),
        _edge_trace(rnd.dropped_edges, pos, GRAPH_TRACES[1], DROPPED_COLOR, "dash",
                    _dropped_hover(rnd.dropped_edges, roles), roles),
        _edge_trace([(s, -1) for s in sources], pos, GRAPH_TRACES[2], "#999999", "dot",
                    _decision_hover(record, sources), roles, width=1.4),
    ]  # fmt: skip
    steps = {s.agent: s for s in rnd.steps}
    for a, name in enumerate(ACTION_NAMES):
        agents = [i for i in sorted(steps) if steps[i].action == a]
        data.append(
            go.Scatter(
                x=[pos[i][0] for i in agents],
                y=[pos[i][1] for i in agents],
                mode="markers+text",
                name=name,
                marker=dict(size=34, color=ACTION_COLORS[a], line=dict(color="white", width=2)),
                text=[str(i) for i in agents],
                textfont=dict(color="white", size=14),
                customdata=agents,
                hovertext=[_step_hover(steps[i], roles) for i in agents],
                hoverinfo="text",
                legendgroup=name,
            )
        )
    failed = [i for i in sorted(steps) if steps[i].fault is not None or not steps[i].alive]
    data.append(
        go.Scatter(
            x=[pos[i][0] for i in failed],
            y=[pos[i][1] for i in failed],
            mode="markers+text",
            name="failed",
            marker=dict(symbol="circle-open", size=46, color=FAILED_COLOR, line=dict(width=4)),
            text=[f"failed: {steps[i].fault or 'inactive'}" for i in failed],
            textposition="bottom center",
            textfont=dict(color=FAILED_COLOR, size=12),
            customdata=failed,
            hovertext=[f"agent {i}: failed ({steps[i].fault or 'inactive'})" for i in failed],
            hoverinfo="text",
        )
    )
    data.append(_decision_trace(record, last, pos))
    return data


def _decision_trace(record: EpisodeRecord, last: bool, pos: dict) -> go.Scatter:
    d = record.decision
    verdict = ""
    if last and d is not None:
        verdict = f"answer {record.team_answer} · {'right' if record.score > 0 else 'wrong'}"
    return go.Scatter(
        x=[pos[-1][0]],
        y=[pos[-1][1]],
        mode="markers+text",
        name="decision agent",
        marker=dict(symbol="diamond", size=30, color=DECISION_COLOR),
        text=[DECISION],
        textfont=dict(color="white", size=13),
        customdata=[-1],
        hovertext=[
            f"decision agent {DECISION}<br>{verdict}"
            if verdict
            else f"decision agent {DECISION} (reads the final answers after the last round)"
        ],
        hoverinfo="text",
    )


def _step_hover(step: AgentStep, roles: Sequence[str]) -> str:
    parts = [f"<b>agent {agent_name(step.agent, roles)}</b>"]
    how = choice(step)
    if failed_silent(step):
        parts.append(f"{how}: sat the round out ({ACTION_NAMES[step.action]} was forced)")
    else:
        parts.append(f"action: {ACTION_NAMES[step.action]} ({how})")
        if step.fault:
            parts.append(f"fault: {step.fault}")
    parts.append(f"answer: {step.answer if step.answer is not None else '—'}")
    if step.correct is not None:
        parts.append("right" if step.correct else "wrong")
    parts.append(f"read from: {step.read_from or 'nobody'}")
    parts.append(f"tokens: {step.tokens}")
    return "<br>".join(parts)


def communication_graph(
    record: EpisodeRecord, round_index: int = 0, height: int = 460
) -> go.Figure:
    """The communication graph of one round (no animation controls of its own: the page's
    one round control drives this figure and every other panel together).

    Trace order: kept edges, dropped edges (dashed), the decision agent's inputs (last
    round only), one node trace per action (the legend), failed agents (a red ring), the
    decision agent. Each edge point carries ``customdata=[src, dst]`` (-1 = D); node
    points carry the agent index.
    """
    if not record.rounds:
        raise ValueError("episode has no rounds to draw")
    r = min(max(round_index, 0), len(record.rounds) - 1)
    pos = graph_positions(len(record.roles))
    fig = go.Figure(data=_graph_data(record, r, pos))
    fig.update_layout(
        # The lane around the ring (D's inputs) and the failed-agent labels need the margin.
        xaxis=dict(visible=False, range=[-_OUTER - 0.3, _OUTER + 0.3]),
        yaxis=dict(visible=False, range=[-_DECISION_Y - 0.3, 1.4], scaleanchor="x"),
        hovermode="closest",
        meta={"round": record.rounds[r].round},
    )
    return _layout(fig, height)


def graph_edges(fig: go.Figure, trace: str = "edges") -> list[tuple[int, int]]:
    """The edges drawn in a :func:`communication_graph` (for tests and captions)."""
    data = fig.data[GRAPH_TRACES.index(trace)]
    seen: list[tuple[int, int]] = []
    for c in data.customdata or ():
        if c is not None and (int(c[0]), int(c[1])) not in seen:
            seen.append((int(c[0]), int(c[1])))
    return seen


def graph_nodes(fig: go.Figure, name: str) -> list[int]:
    """Agent indices in the node trace called ``name`` (an action name, ``failed``...)."""
    for data in fig.data:
        if data.name == name:
            return [int(i) for i in data.customdata or ()]
    raise KeyError(name)


# --------------------------------------------------------------------- per-round panels


UNCHOSEN_OPACITY = 0.4
"""Q-value bars of the actions an agent did not choose (the chosen one is solid)."""
CHOSEN_OUTLINE = 1.0
"""Outline width of a chosen Q-value bar: thin, so the bar's own colour stays visible."""


def q_values_figure(rnd: RoundRecord, roles: Sequence[str], height: int = 330) -> go.Figure | None:
    """Per-agent Q-values of the six actions (one bar group per agent); None for fixed policies.

    Traces 0-5 are the actions' bars (6-11: their legend swatches, no data). The chosen
    action's bar is outlined (``greedy``), outlined and hatched (``explored``: ε-exploration
    picked it against the argmax) or faded (an agent out of the round: it did not choose);
    the agent's tick label says which (:func:`choice`), under the axis, clear of the bars.
    """
    steps = [s for s in sorted(rnd.steps, key=lambda s: s.agent) if s.q_values is not None]
    if not steps:
        return None
    labels = [agent_name(s.agent, roles) for s in steps]
    fig = go.Figure()
    for a, name in enumerate(ACTION_NAMES):
        chosen = [s.action == a for s in steps]
        picked = [c and not failed_silent(s) for s, c in zip(steps, chosen, strict=True)]
        fig.add_bar(
            x=labels,
            y=[s.q_values[a] for s in steps],
            name=name,
            marker=dict(
                color=ACTION_COLORS[a],
                # The chosen bar solid, the others pale: its colour names the action (a
                # thick outline on a thin bar hid it).
                opacity=[
                    0.25 if failed_silent(s) else 1.0 if p else UNCHOSEN_OPACITY
                    for s, p in zip(steps, picked, strict=True)
                ],
                line=dict(color="black", width=[CHOSEN_OUTLINE if p else 0 for p in picked]),
                pattern=dict(
                    shape=[
                        "/" if p and choice(s) == "explored" else ""
                        for s, p in zip(steps, picked, strict=True)
                    ],
                    fgcolor="black",
                ),
            ),
            customdata=[choice(s) if c else "" for s, c in zip(steps, chosen, strict=True)],
            hovertemplate=f"%{{x}}<br>{name}: %{{y:.3f}} %{{customdata}}<extra></extra>",
            legendgroup=name,
            showlegend=False,
        )
    for a, name in enumerate(ACTION_NAMES):
        # Plain swatches for the legend (a trace's first bar may be outlined or hatched).
        fig.add_bar(x=[None], y=[None], name=name, marker_color=ACTION_COLORS[a], legendgroup=name)
    fig.update_layout(barmode="group", yaxis=dict(title="Q(o, a)"), bargap=0.25)
    fig.update_xaxes(
        tickangle=0,
        tickvals=labels,
        ticktext=[f"{lbl}<br><i>{choice(s)}</i>" for lbl, s in zip(labels, steps, strict=True)],
    )
    return _layout(fig, height)


def q_values_caption(rnd: RoundRecord) -> str:
    eps = next((s.epsilon for s in rnd.steps if s.epsilon is not None), None)
    return (
        "Solid and outlined: the chosen action (pale: the others); hatched: explored"
        + (f" (ε = {eps:.2f})" if eps is not None else "")
        + "; faded: a failed agent (its action was forced, not chosen)."
    )


def credit_figure(
    rnd: RoundRecord,
    roles: Sequence[str],
    height: int = 240,
    labels: Sequence[str] | None = None,
) -> go.Figure | None:
    """The mixer's credit ∂Q_tot/∂Q_i, one bar per agent (named from ``roles``, or
    ``labels``); None without a mixer view."""
    if rnd.credit is None:
        return None
    labels = list(labels or [agent_name(i, roles) for i in range(len(rnd.credit))])
    credit = list(rnd.credit)
    total = sum(credit)
    # A rate, not a share: the credits need not add up to 1; the percentage is each one's
    # part of their sum, which means something only while none is negative (QMIX's never is;
    # the CTDE page's unconstrained mixer's can be, and that is the point it teaches).
    signed = min(credit) < 0
    shares = [math.nan if signed or total <= 0 else c / total for c in credit]
    fig = go.Figure(
        go.Bar(
            x=credit,
            y=labels,
            orientation="h",
            marker_color=[FAILED_COLOR if c < 0 else NEUTRAL_COLOR for c in credit],
            name="credit",
            text=[
                f"{c:.3f}" + ("" if math.isnan(p) else f" ({100 * p:.0f} %)")
                for c, p in zip(credit, shares, strict=True)
            ],
            textposition="outside",
            cliponaxis=False,
            customdata=shares,
            hovertemplate="%{y}: ∂Q_tot/∂Q_i = %{x:.4f}"
            + ("" if signed else " (%{customdata:.1%} of the sum)")
            + "<extra></extra>",
        )
    )
    fig.update_yaxes(autorange="reversed")
    # Room beyond the longest bar on each side for its label (outside the bar, never over
    # the next); a negative credit gets its side of the axis (it drew as an empty row).
    top, bottom = max([*credit, 0.0]), min([*credit, 0.0])
    span = (top - bottom) or 1.0
    fig.update_xaxes(
        title_text="∂Q_tot/∂Q_i",
        range=[
            bottom - 0.9 * span if bottom < 0 else 0,
            top + 0.9 * span if top > 0 else 0.1 * span,
        ],
        zeroline=True,
    )
    return _layout(fig, height, legend=False)


def weights_figure(
    weights: Sequence[Sequence[float]] | None,
    roles: Sequence[str],
    height: int = 240,
    labels: Sequence[str] | None = None,
) -> go.Figure | None:
    """The mixer's first-layer weights ``(N, embed)`` as a heat map (agent × unit).

    QMIX's are ``≥ 0`` (a white-to-blue scale); signed weights (the CTDE page's
    non-monotonic mixer) get a diverging scale centred on 0.
    """
    if weights is None:
        return None
    z = [list(row) for row in weights]
    signed = min(min(row) for row in z) < 0
    fig = go.Figure(
        go.Heatmap(
            z=z,
            y=list(labels or [agent_name(i, roles) for i in range(len(z))]),
            colorscale="RdBu" if signed else "Blues",
            zmid=0 if signed else None,
            name="weights",
            colorbar=dict(thickness=10, len=0.9),
            hovertemplate="%{y}, unit %{x}: %{z:.3f}<extra></extra>",
        )
    )
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(title_text="mixing unit")
    return _layout(fig, height, legend=False)


def tokens_figure(record: EpisodeRecord, active_round: int | None = None, height: int = 300):
    """Tokens of the whole episode: per agent per round (stacked), the decision agent's call,
    and the running total (line). The bars add up to the episode's total; ``active_round``
    is drawn solid, the other rounds faded."""
    x = [round_name(r.round) for r in record.rounds]
    if record.decision is not None:
        x.append(DECISION)
    n = len(record.rounds)

    def opacity(k: int) -> float:
        return 1.0 if active_round is None or k == active_round else 0.35

    fig = go.Figure()
    for i, label in enumerate(agent_labels(record.roles)):
        fig.add_bar(
            x=x[:n],
            y=[_agent_tokens(r, i) for r in record.rounds],
            name=label,
            marker=dict(
                color=AGENT_COLORS[i % len(AGENT_COLORS)],
                opacity=[opacity(k) for k in range(n)],
            ),
            hovertemplate=f"{label}<br>%{{x}}: %{{y:,}} tokens<extra></extra>",
        )
    running, total = [], 0
    for r in record.rounds:
        total += r.tokens
        running.append(total)
    if record.decision is not None:
        fig.add_bar(
            x=[DECISION],
            y=[record.decision.tokens],
            name=f"{DECISION} decision",
            marker=dict(color=DECISION_COLOR, opacity=opacity(n)),
            hovertemplate="decision agent: %{y:,} tokens<extra></extra>",
        )
        running.append(total + record.decision.tokens)
    fig.add_scatter(
        x=x,
        y=running,
        name="running total",
        mode="lines+markers",
        line=dict(color="black", width=1.5, dash="dot"),
        hovertemplate="total so far: %{y:,}<extra></extra>",
    )
    fig.update_layout(barmode="stack", yaxis_title="tokens")
    fig.update_xaxes(type="category")
    return _layout(fig, height)


def _agent_tokens(rnd: RoundRecord, agent: int) -> int:
    return sum(s.tokens for s in rnd.steps if s.agent == agent)


def round_table(record: EpisodeRecord, r: int) -> pd.DataFrame:
    """One row per agent for round ``r`` (and, in the last round, the decision agent D):
    action, how it was chosen, fault, answer, right/wrong, read from, tokens."""
    rnd = record.rounds[r]
    rows = []
    for s in sorted(rnd.steps, key=lambda s: s.agent):
        rows.append(
            {
                "agent": agent_name(s.agent, record.roles),
                "action": ACTION_NAMES[s.action],
                "how": choice(s),
                "fault": s.fault or "",
                "answer": s.answer if s.answer is not None else "—",
                "result": "" if s.correct is None else ("right" if s.correct else "wrong"),
                "confidence": round(s.confidence, 2),
                "read from": ", ".join(map(str, s.read_from)) or "—",
                "tokens": s.tokens,
            }
        )
    d = record.decision
    if d is not None and r == len(record.rounds) - 1:
        rows.append(
            {
                "agent": f"{DECISION} decision",
                "action": "decide",
                "how": "after the last round",
                "fault": "",
                "answer": record.team_answer if record.team_answer is not None else "—",
                "result": "right" if record.score > 0 else "wrong",
                "confidence": round(d.confidence, 2),
                "read from": ", ".join(map(str, d.read_from)) or "—",
                "tokens": d.tokens,
            }
        )
    return pd.DataFrame(rows)


def messages_table(rnd: RoundRecord, roles: Sequence[str] = ()) -> pd.DataFrame:
    """The messages of a round: who read whom, the answer it carried and its text."""
    return pd.DataFrame(
        [
            {
                "edge": f"{m.src} → {m.dst}",
                "answer": m.answer if m.answer is not None else "—",
                "confidence": round(m.confidence, 2),
                "tokens": m.tokens,
                "text": m.text,
            }
            for m in rnd.messages
        ],
        columns=["edge", "answer", "confidence", "tokens", "text"],
    )


def sent_table(record: EpisodeRecord, agents: Sequence[int]) -> pd.DataFrame:
    """What agents ``agents`` produced in each round of ``record``: their step (fault,
    answer, text) and every message they sent, one row per step or message."""
    rows: list[dict] = []
    wanted = set(agents)
    for rnd in record.rounds:
        # A message carries its sender's fault that round (a byzantine agent's messages lie).
        faults = {s.agent: s.fault or "" for s in rnd.steps}
        for s in rnd.steps:
            if s.agent in wanted:
                rows.append(
                    {
                        "round": rnd.round + 1,
                        "agent": f"{s.agent} {s.role}",
                        "what": "its answer" if s.alive else "nothing (silent)",
                        "fault": s.fault or "",
                        "answer": s.answer if s.answer is not None else "—",
                        "text": s.text,
                    }
                )
        for m in rnd.messages:
            if m.src in wanted:
                role = record.roles[m.src] if m.src < len(record.roles) else "?"
                rows.append(
                    {
                        "round": rnd.round + 1,
                        "agent": f"{m.src} {role}",
                        "what": f"message to {m.dst}",
                        "fault": faults.get(m.src, ""),
                        "answer": m.answer if m.answer is not None else "—",
                        "text": m.text,
                    }
                )
    return pd.DataFrame(rows, columns=["round", "agent", "what", "fault", "answer", "text"])


# --------------------------------------------------------------------- runs and comparisons

CURVE_METRICS = (
    ("reward", "reward per episode", "episodes"),
    ("correct", "accuracy", "episodes"),
    ("tokens", "tokens per episode", "episodes"),
    ("loss", "TD loss", "metrics"),
    ("epsilon", "ε (exploration)", "metrics"),
    ("q_tot_mean", "Q_tot (mean)", "metrics"),
)
"""(column, heading, source frame) of each training-curve panel."""

SCHEDULES = frozenset({"epsilon"})
"""Curves that follow a schedule, not noise: drawn as they are, never smoothed (an EMA of a
falling schedule lags above it, a staircase over the line it smooths)."""


def training_curve_figure(
    runs: dict[str, tuple[pd.DataFrame, pd.DataFrame | None]],
    column: str,
    smoothing: float = 0.9,
    height: int = 260,
    methods: dict[str, str] | None = None,
) -> go.Figure | None:
    """One metric of one or more training runs against the episode: the raw values faint
    (legend ``… raw``), their EMA (``smoothing`` in [0, 1), 0 = none) bold (legend
    ``… smoothed``), each run in its method's colour (``methods``: a run's label → ``qmix``
    or a learned-topology method; qmix when not given), one shade per run of a method and
    one dash per run.

    ``runs`` maps a run's label to (per-episode curves, per-update metrics) as returned by
    :func:`core.store.queries.episode_curves` / :func:`~core.store.queries.training_curves`.
    A :data:`SCHEDULES` column is one line per run, unsmoothed. None when no run logged
    ``column`` (a learned-topology method has no ε or Q_tot).
    """
    source = next(src for col, _, src in CURVE_METRICS if col == column)
    methods = {label: (methods or {}).get(label, "qmix") for label in runs}
    fig = go.Figure()
    dashes = ("solid", "dash", "dot", "dashdot")
    for k, (label, (episodes, metrics)) in enumerate(runs.items()):
        df = episodes if source == "episodes" else metrics
        if df is None or df.empty or column not in df or df[column].isna().all():
            continue
        x = df["episode"] if "episode" in df else df["step"]
        y = df[column].astype(float)
        same = [r for r in runs if methods[r] == methods[label]]  # the first listed darkest
        color = shade(policy_color(methods[label]), len(same) - 1 - same.index(label), len(same))
        name = f"{label} · " if len(runs) > 1 else ""
        if column in SCHEDULES:
            fig.add_scatter(
                x=x, y=y, mode="lines", name=f"{name}schedule", legendgroup=label,
                line=dict(color=color, width=2.6, dash=dashes[k % len(dashes)]),
                hovertemplate=f"{label}<br>episode %{{x}}: %{{y:.4g}}<extra></extra>",
            )  # fmt: skip
            continue
        fig.add_scatter(
            x=x, y=y, mode="lines", name=f"{name}raw", legendgroup=label,
            line=dict(color=color, width=1), opacity=0.3, hoverinfo="skip",
        )  # fmt: skip
        smoothed = f"{name}smoothed (EMA {smoothing:g})" if smoothing > 0 else f"{name}unsmoothed"
        fig.add_scatter(
            x=x, y=ema(y, smoothing, at=x), mode="lines", name=smoothed, legendgroup=label,
            line=dict(color=color, width=2.6, dash=dashes[k % len(dashes)]),
            hovertemplate=f"{label}<br>episode %{{x}}: %{{y:.4g}}<extra></extra>",
        )  # fmt: skip
    if not fig.data:
        return None
    if column == "correct":
        fig.update_yaxes(tickformat=".0%", range=[-0.02, 1.02])
    return _layout(fig, height)


def action_mix_figure(df: pd.DataFrame, by: str, height: int = 320) -> go.Figure:
    """Stacked shares of the six actions per ``by`` group (difficulty, round, episode block...).

    ``df`` has columns ``by``, ``action``, ``share`` (as returned by the store's
    ``action_distribution`` / ``action_mix_over_time``).
    """
    fig = go.Figure()
    groups = sorted(df[by].unique()) if not df.empty else []
    for a, name in enumerate(ACTION_NAMES):
        part = (
            df[df["action"] == a].set_index(by)["share"] if not df.empty else pd.Series(dtype=float)
        )
        fig.add_bar(
            x=[_group_label(by, g) for g in groups],
            y=[float(part.get(g, 0.0)) for g in groups],
            name=name,
            marker_color=ACTION_COLORS[a],
            hovertemplate=f"%{{x}}<br>{name}: %{{y:.1%}}<extra></extra>",
        )
    # No x-axis title: the tick labels say what the groups are, and a title under the axis
    # would sit where the legend goes.
    fig.update_layout(barmode="stack", yaxis=dict(title="share", tickformat=".0%", range=[0, 1]))
    fig.update_xaxes(type="category")
    return _layout(fig, height)


def _group_label(by: str, value) -> str:
    # Episode blocks are numbers on a long axis; other groups name themselves.
    if by == "episode":
        return str(value)
    return round_name(value) if by == "round" else f"{by} {value}"


def pareto_front(df: pd.DataFrame, x: str = "mean_tokens", y: str = "accuracy") -> pd.DataFrame:
    """The rows no other row beats: fewer (or equal) tokens *and* higher (or equal) accuracy.

    Sorted by ``x``; a row is on the front if its ``y`` is strictly above every row with
    fewer tokens. Rows of training episodes (``training`` true: :func:`lab.data.aggregate`)
    are never on it: exploring is no policy's result.
    """
    if "training" in df:
        df = df[~df["training"].fillna(False).astype(bool)]
    rows = df.dropna(subset=[x, y]).sort_values([x, y], ascending=[True, False])
    keep, best = [], -math.inf
    for idx, value in zip(rows.index, rows[y], strict=True):
        if value > best:
            keep.append(idx)
            best = value
    return rows.loc[keep]


def engines(df: pd.DataFrame) -> list[str]:
    """The back-end · model labels of ``df``'s points (its ``engine`` column), simulated first."""
    if "engine" not in df or df.empty:
        return []
    return sorted(df["engine"].unique(), key=lambda e: (not e.startswith("simulated"), e))


def _panel_of(df: pd.DataFrame) -> pd.Series | None:
    """Each row's panel: its back-end · model (``engine``), and its decision rule
    (``pass_through``: ``pass-through: unanimous``) when ``df`` holds more than one; None
    when ``df`` names neither."""
    parts = [df["engine"].astype(str)] if "engine" in df else []
    if "pass_through" in df and df["pass_through"].nunique() > 1:
        parts.append("pass-through: " + df["pass_through"].astype(str))
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else parts[0] + " · " + parts[1]


def panel_names(df: pd.DataFrame) -> list[str]:
    """The panels of a trade-off chart of ``df``, simulated first: one per back-end · model,
    and per decision rule when ``df`` holds several — each a trade-off of its own."""
    names = _panel_of(df)
    if names is None or df.empty:
        return []
    return sorted(names.unique(), key=lambda e: (not e.startswith("simulated"), e))


def fronts(df: pd.DataFrame) -> dict[str | None, pd.DataFrame]:
    """The Pareto front of each panel (:func:`panel_names`; ``None``: ``df`` names none).
    Simulated and real tokens and accuracies are not one trade-off, nor are the paper's
    decision agent and the consensus pass-through: a front never mixes them."""
    names, keys = _panel_of(df), panel_names(df)
    if names is None or not keys:
        return {None: pareto_front(df)}
    return {key: pareto_front(df[names == key]) for key in keys}


def _facets(df: pd.DataFrame) -> tuple[go.Figure, list[tuple[pd.DataFrame, int]]]:
    """A figure with one panel per back-end · model (and decision rule) of ``df``
    (:func:`panel_names`; one panel when it names one or none), and each panel's rows with its
    column number."""
    names, keys = _panel_of(df), panel_names(df)
    if names is None or len(keys) <= 1:
        return go.Figure(), [(df, 1)]
    from plotly.subplots import make_subplots

    fig = make_subplots(
        rows=1, cols=len(keys), subplot_titles=keys, shared_yaxes=True, horizontal_spacing=0.06
    )
    return fig, [(df[names == key], k + 1) for k, key in enumerate(keys)]


def _in_panel(panels: list[tuple[pd.DataFrame, int]], col: int) -> dict[str, int]:
    """The ``row``/``col`` keywords of a trace in panel ``col`` (none for a single panel)."""
    return {"row": 1, "col": col} if len(panels) > 1 else {}


def _data_range(lo: pd.Series, hi: pd.Series, pad: float = 0.08) -> list[float]:
    """[low, high] of the values with ``pad`` of their span either side."""
    low, high = float(lo.min()), float(hi.max())
    span = (high - low) or max(abs(high), 1.0) * 0.1
    return [low - pad * span, high + pad * span]


def _label_front(
    fig: go.Figure, front: pd.DataFrame, y_range: list[float], plot_px: int, col: int = 1
) -> None:
    """Name the points of the front (of panel ``col``) with annotations stacked so no two
    overlap.

    The front rises to the right, so above-left of each point nothing dominates it: labels
    sit above their point with a short leader, and each one at least a line (18 px) above
    the previous; a label leans into the chart (right of a point in its left half, left of
    one in its right half), so none is clipped at an edge.
    """
    pts = front.sort_values("accuracy")
    span = y_range[1] - y_range[0] or 1.0
    x_max = max(float(front["mean_tokens"].max()), 1.0) if not front.empty else 1.0
    axis = "" if col == 1 else str(col)
    prev_top = -math.inf
    for x, y, text in zip(pts["mean_tokens"], pts["accuracy"], pts["label"], strict=True):
        py = (y - y_range[0]) / span * plot_px
        rise = max(22.0, prev_top + 18.0 - py)
        prev_top = py + rise
        right_half = x > 0.5 * x_max
        fig.add_annotation(
            x=x, y=y, xref=f"x{axis}", yref=f"y{axis}", text=str(text), showarrow=True,
            arrowhead=0, arrowwidth=1, arrowcolor="#999999", ax=-12 if right_half else 12,
            ay=-rise, xanchor="right" if right_half else "left", yanchor="bottom",
            font=dict(size=12, color="#333333"), bgcolor="rgba(255,255,255,0.8)",
        )  # fmt: skip


def _trade_off_axes(
    fig: go.Figure, df: pd.DataFrame, height: int, panels: list[tuple[pd.DataFrame, int]]
) -> None:
    """Axes of an accuracy-vs-tokens chart: tokens from 0, accuracy over its intervals plus
    room above for the fronts' labels (one shared accuracy axis over every panel)."""
    has_ci = "accuracy_lo" in df
    y_range = _data_range(
        df["accuracy_lo"].fillna(df["accuracy"]) if has_ci else df["accuracy"],
        df["accuracy_hi"].fillna(df["accuracy"]) if has_ci else df["accuracy"],
    )
    panel_fronts = [(pareto_front(panel), col) for panel, col in panels if not panel.empty]
    plot_px = height - 150  # the figure less its margins and a two-row legend
    # Room above the highest label: each front point may sit a line above the one before.
    most = max((len(front) for front, _ in panel_fronts), default=0)
    headroom = (22 + 18 * most) / plot_px * (y_range[1] - y_range[0])
    y_range = [y_range[0], min(y_range[1] + headroom, max(1.08, y_range[1]))]
    for front, col in panel_fronts:
        _label_front(fig, front, y_range, plot_px, col)
    # The headroom may reach past 100 %: no tick there (no accuracy is 105 %).
    span = y_range[1] - y_range[0]
    step = 0.05 if span <= 0.4 else 0.1 if span <= 0.8 else 0.2
    ticks = np.arange(math.ceil(y_range[0] / step) * step, min(y_range[1], 1.0) + 1e-9, step)
    fig.update_xaxes(ticksuffix=" tok", rangemode="tozero", title="mean tokens per episode")
    fig.update_yaxes(tickformat=".0%", range=y_range, tickvals=ticks.round(4))
    fig.update_yaxes(title="accuracy", col=1 if len(panels) > 1 else None)


def _methods(df: pd.DataFrame) -> pd.Series:
    """What colours each row: its ``method`` (:func:`lab.data.with_methods`), else its
    ``policy``."""
    if "method" in df:
        return df["method"].where(df["method"].notna(), df["policy"]).astype(str)
    return df["policy"].astype(str)


def _described(part: pd.DataFrame) -> list[str]:
    """Each row's ``description`` (what the policy is) for its hover, or its label."""
    if "description" not in part:
        return [str(p) for p in part["policy"]]
    return [
        d if isinstance(d, str) else str(p)
        for d, p in zip(part["description"], part["policy"], strict=True)
    ]


def _customdata(part: pd.DataFrame, policy: str) -> np.ndarray:
    """``[run_id, policy, episodes, description]`` of each point (``policy``: the column
    that names the stored policy)."""
    return np.column_stack(
        [
            part[["run_id", policy, "episodes"]].to_numpy(dtype=object),
            np.array(_described(part), dtype=object),
        ]
    )


def pareto_figure(df: pd.DataFrame, height: int = 480) -> go.Figure:
    """Accuracy vs mean tokens, one point per row (a policy in one run), with 95 % intervals
    and the Pareto front, whose points are named (the others in their hover); one panel
    (with its own front) per back-end · model when ``df`` holds more than one (its
    ``engine`` column: simulated and real points never share a front).

    ``df`` has ``label`` (the point's name), ``policy`` (its legend entry), ``run_id``,
    ``policy_id``, ``episodes``, ``accuracy`` and ``mean_tokens``, optionally ``method``
    (its colour, :func:`policy_color`; else ``policy``'s) and ``description`` (what it is:
    family, trained token weight, knob — :func:`lab.data.with_methods`), ``engine`` and the
    interval columns of :func:`lab.stats.with_intervals`. Points of one method from several
    runs or checkpoints differ by marker. Every point carries
    ``customdata = [run_id, policy_id, episodes, description]`` (a click selects the first
    two).
    """
    df = df.assign(method=_methods(df))
    symbols = {
        m: variant_symbols(list(zip(part["run_id"], part["policy"], strict=True)))
        for m, part in df.groupby("method")
    }
    fig, panels = _facets(df)
    shown: set[str] = set()
    training = df["training"].fillna(False).astype(bool) if "training" in df else None
    for panel, col in panels:
        if training is not None:
            _training_traces(fig, panel[training.loc[panel.index]], panels, col, shown)
            panel = panel[~training.loc[panel.index]]
        for policy, part in panel.groupby("policy", sort=True):
            err_x, err_y = _error_bars(part)
            method = str(part["method"].iloc[0])
            fig.add_scatter(
                x=part["mean_tokens"],
                y=part["accuracy"],
                mode="markers",
                name=str(policy),
                legendgroup=str(policy),
                showlegend=policy not in shown,
                marker=dict(
                    size=13,
                    color=policy_color(method),
                    symbol=[
                        symbols[method][k] for k in zip(part["run_id"], part["policy"], strict=True)
                    ],
                    line=dict(color="white", width=1),
                ),
                error_x=err_x,
                error_y=err_y,
                customdata=_customdata(part, "policy_id"),
                hovertext=part["label"],
                hovertemplate=(
                    "<b>%{hovertext}</b><br>%{customdata[3]}<br>tokens %{x:,.0f}"
                    "<br>accuracy %{y:.1%}<br>n = %{customdata[2]} episodes<extra></extra>"
                ),
                **_in_panel(panels, col),
            )
            shown.add(policy)
        line = pareto_front(panel)
        fig.add_scatter(
            x=line["mean_tokens"],
            y=line["accuracy"],
            mode="lines",
            name="Pareto front",
            legendgroup="front",
            showlegend=col == 1,
            line=dict(color="black", dash="dash", shape="hv"),
            hoverinfo="skip",
            **_in_panel(panels, col),
        )
    if not df.empty:
        _trade_off_axes(fig, df, height, panels)
    fig.update_layout(clickmode="event+select", dragmode="zoom")
    return _layout(fig, height)


def _training_traces(
    fig: go.Figure,
    part: pd.DataFrame,
    panels: list[tuple[pd.DataFrame, int]],
    col: int,
    shown: set[str],
) -> None:
    """Training episodes on a trade-off chart: one hollow marker per training run, in its
    method's colour, named ``qmix training (exploring)`` in the legend and the hover (with
    how the method explored): never mistaken for a policy's point, never on the front."""
    for method, runs in part.groupby("method", sort=True):
        name = f"{method} {runs['policy'].iloc[0]}"
        err_x, err_y = _error_bars(runs)
        fig.add_scatter(
            x=runs["mean_tokens"], y=runs["accuracy"], mode="markers", name=name,
            legendgroup=name, showlegend=name not in shown,
            marker=dict(size=12, color=policy_color(str(method)), symbol="circle-open",
                        line=dict(width=2)),
            error_x=err_x, error_y=err_y, customdata=_customdata(runs, "policy_id"),
            hovertext=runs["label"],
            hovertemplate=(
                "<b>%{hovertext}</b><br>%{customdata[3]}<br>tokens %{x:,.0f}"
                "<br>accuracy %{y:.1%}<br>n = %{customdata[2]} episodes<extra></extra>"
            ),
            **_in_panel(panels, col),
        )  # fmt: skip
        shown.add(name)


def point_key(fig: go.Figure, point: dict) -> str | None:
    """``RUN_ID:POLICY`` of a clicked :func:`pareto_figure` point (a Plotly selection event's
    point: its ``customdata``, or its trace and index in ``fig``); None for the front line."""
    custom = point.get("customdata")
    if custom is None:
        try:
            trace = fig.data[int(point["curve_number"])]
            custom = trace.customdata[int(point.get("point_index", point.get("point_number")))]
        except (KeyError, IndexError, TypeError, ValueError):
            return None
    if custom is None or len(custom) < 2:
        return None
    return f"{custom[0]}:{custom[1]}"


def robustness_figure(df: pd.DataFrame, height: int = 380) -> go.Figure:
    """Accuracy vs number of failed agents, one line per policy (``df`` from the store's
    ``robustness``, with the display ``policy`` label; its ``method`` colours the line and
    its ``description`` heads the hover when :func:`lab.data.with_methods` added them), with
    95 % Wilson intervals when the ``accuracy_lo/hi`` columns are there. The y axis spans
    the intervals (not 0-100 %), so close policies stay apart."""
    fig = go.Figure()
    df = df.assign(method=_methods(df))
    for name, part in df.sort_values("n_failed").groupby("policy", sort=True):
        err = None
        if "accuracy_lo" in part:
            err = dict(
                type="data", symmetric=False, thickness=1, width=3,
                array=(part["accuracy_hi"] - part["accuracy"]).fillna(0).tolist(),
                arrayminus=(part["accuracy"] - part["accuracy_lo"]).fillna(0).tolist(),
            )  # fmt: skip
        ns = sorted({int(n) for n in part["episodes"]})
        method = str(part["method"].iloc[0])
        fig.add_scatter(
            x=part["n_failed"],
            y=part["accuracy"],
            mode="lines+markers",
            # The count in the legend when every point has the same n (a measurement does).
            name=f"{name} (n = {ns[0]:,})" if len(ns) == 1 else str(name),
            line=dict(color=policy_color(method), width=3 if method == "qmix" else 2),
            error_y=err,
            customdata=part[["episodes"]].to_numpy(),
            hovertemplate=f"{_described(part)[0]}<br>%{{x}} failed: %{{y:.1%}} "
            "(n = %{customdata[0]})<extra></extra>",
        )
    ns = sorted(int(n) for n in df["n_failed"].unique()) if not df.empty else []
    y_range = [0.0, 1.02]
    if not df.empty:
        lo = df["accuracy_lo"].fillna(df["accuracy"]) if "accuracy_lo" in df else df["accuracy"]
        hi = df["accuracy_hi"].fillna(df["accuracy"]) if "accuracy_hi" in df else df["accuracy"]
        low, high = _data_range(lo, hi, pad=0.05)
        y_range = [max(low, -0.02), min(high, 1.02)]
    fig.update_layout(
        xaxis=dict(tickvals=ns, ticktext=[f"{n} failed" for n in ns]),
        yaxis=dict(title="accuracy", tickformat=".0%", range=y_range),
    )
    return _layout(fig, height)


def _error_bars(part: pd.DataFrame) -> tuple[dict | None, dict | None]:
    """(x, y) 95 % error bars of tokens and accuracy, when the interval columns are there."""
    if "accuracy_lo" not in part:
        return None, None
    bar = dict(type="data", symmetric=False, thickness=1.2, width=3)
    err_y = bar | dict(
        array=(part["accuracy_hi"] - part["accuracy"]).fillna(0).tolist(),
        arrayminus=(part["accuracy"] - part["accuracy_lo"]).fillna(0).tolist(),
    )
    err_x = bar | dict(
        array=(part["tokens_hi"] - part["mean_tokens"]).fillna(0).tolist(),
        arrayminus=(part["mean_tokens"] - part["tokens_lo"]).fillna(0).tolist(),
    )
    return err_x, err_y


def sweep_figure(df: pd.DataFrame, height: int = 500) -> go.Figure:
    """A sweep's trade-off: accuracy vs mean tokens of every learned trial, in its method's
    colour (Agent Q-Mix's or a learned-topology method's), one shade per token weight of the
    method — darker costs tokens more — and one marker per training seed (and knob value),
    against the fixed topologies (diamonds in their own colours), with 95 % intervals and
    the front over all points; the front's points are named, the others in their hover
    (which says what a point is: method, family, trained token weight, knob); one panel
    (with its own front) per back-end · model and per decision rule (``pass_through``: the
    paper's, the consensus pass-through) when ``df`` holds more than one.

    ``df`` as :func:`lab.data.sweep_points` returns it: ``label``, ``policy``,
    ``token_weight`` and ``seed`` (NaN for a fixed topology), ``run_id``, ``episodes``,
    ``accuracy``, ``mean_tokens``, optionally ``method`` (else ``policy``), ``knob`` (a
    dict), ``description``, ``engine``, ``pass_through``, and the interval columns. Points
    carry ``customdata = [run_id, policy, episodes, description]``.
    """
    hover = (
        "<b>%{hovertext}</b><br>%{customdata[3]}<br>tokens %{x:,.0f}<br>accuracy %{y:.1%}"
        "<br>n = %{customdata[2]} episodes<extra></extra>"
    )
    knobs = df["knob"] if "knob" in df else pd.Series([{}] * len(df), index=df.index)
    df = df.assign(
        method=_methods(df),
        knob_text=[knob_text(kn) for kn in knobs],
    )
    learned_all = df[df["token_weight"].notna()]
    weights = {
        m: sorted(part["token_weight"].unique()) for m, part in learned_all.groupby("method")
    }
    symbols = {
        m: variant_symbols(list(zip(part["knob_text"], part["seed"].astype(int), strict=True)))
        for m, part in learned_all.groupby("method")
    }
    order = {m: k for k, m in enumerate(LEARNED_METHODS)}  # qmix first, then the methods

    fig, panels = _facets(df)
    shown: set[str] = set()
    for panel, col in panels:
        where = _in_panel(panels, col)
        learned = panel[panel["token_weight"].notna()]
        fixed = panel[panel["token_weight"].isna()]
        groups = sorted(
            learned.groupby(["method", "knob_text", "token_weight"]),
            key=lambda g: (order.get(g[0][0], len(order)), g[0][0], g[0][1], g[0][2]),
        )
        for (method, knob, w), part in groups:
            k = weights[method].index(w)
            name = f"{method}{f' {knob}' if knob else ''} · token weight {w:g}"
            err_x, err_y = _error_bars(part)
            fig.add_scatter(
                x=part["mean_tokens"], y=part["accuracy"], mode="markers", name=name,
                legendgroup=name, showlegend=name not in shown,
                marker=dict(size=12, color=shade(policy_color(method), k, len(weights[method])),
                            symbol=[symbols[method][key] for key in
                                    zip(part["knob_text"], part["seed"].astype(int), strict=True)],
                            line=dict(color="white", width=1)),
                error_x=err_x, error_y=err_y, hovertext=part["label"],
                customdata=_customdata(part, "policy"), hovertemplate=hover, **where,
            )  # fmt: skip
            shown.add(name)
        for policy, part in fixed.groupby("policy", sort=True):
            err_x, err_y = _error_bars(part)
            fig.add_scatter(
                x=part["mean_tokens"], y=part["accuracy"], mode="markers", name=str(policy),
                legendgroup=str(policy), showlegend=str(policy) not in shown,
                marker=dict(size=11, symbol="diamond", color=policy_color(str(policy)),
                            line=dict(color="white", width=1)),
                error_x=err_x, error_y=err_y, hovertext=part["label"],
                customdata=_customdata(part, "policy"), hovertemplate=hover, **where,
            )  # fmt: skip
            shown.add(str(policy))
        line = pareto_front(panel)
        fig.add_scatter(
            x=line["mean_tokens"], y=line["accuracy"], mode="lines", name="front",
            legendgroup="front", showlegend=col == 1,
            line=dict(color="black", dash="dash", shape="hv"), hoverinfo="skip", **where,
        )  # fmt: skip
    if not df.empty:
        _trade_off_axes(fig, df, height, panels)
    return _layout(fig, height)


def robustness_table(df: pd.DataFrame) -> pd.DataFrame:
    """The robustness points as a table: policy, failed agents, n, right, accuracy and its
    95 % interval (``df`` as for :func:`robustness_figure`)."""
    cols = ["policy", "failed agents", "n", "right", "accuracy", "95 % interval", "mean tokens"]
    if df.empty:
        return pd.DataFrame(columns=cols)
    rows = df.sort_values(["policy", "n_failed"])
    return pd.DataFrame(
        {
            "policy": rows["policy"],
            "failed agents": rows["n_failed"].astype(int),
            "n": rows["episodes"].astype(int),
            "right": rows["n_correct"].astype(int),
            "accuracy": [f"{a:.1%}" for a in rows["accuracy"]],
            "95 % interval": [
                f"{lo:.1%} – {hi:.1%}"
                for lo, hi in zip(rows["accuracy_lo"], rows["accuracy_hi"], strict=True)
            ]
            if "accuracy_lo" in rows
            else "—",
            "mean tokens": rows["mean_tokens"].round(0).astype(int),
        },
        columns=cols,
    ).reset_index(drop=True)


def ctde_sweep_figure(
    grid: Sequence[float], curves: dict[str, Sequence[float]], height: int = 300
) -> go.Figure:
    """Q_tot as each agent's Q-value sweeps ``grid`` (others held)."""
    fig = go.Figure()
    for k, (name, ys) in enumerate(curves.items()):
        fig.add_scatter(
            x=list(grid),
            y=list(ys),
            mode="lines",
            name=name,
            line=dict(color=AGENT_COLORS[k % len(AGENT_COLORS)], width=2),
        )
    fig.update_layout(yaxis_title="Q_tot")  # x: the agent's Q_i (the page's heading says so)
    return _layout(fig, height)


def figure_table(fig: go.Figure) -> pd.DataFrame:
    """Every drawn value of ``fig`` as one long table (the data behind a chart, for its CSV):
    a row per point with its trace's name, x, y, and — where the trace has them — the hover
    text and the error bars; a heat map gives a row per cell (x, y, z)."""
    parts = []
    for trace in fig.data:
        if trace.type == "heatmap":
            z = np.asarray(trace.z, dtype=float)
            ys = list(trace.y) if trace.y is not None else list(range(z.shape[0]))
            xs = list(trace.x) if trace.x is not None else list(range(z.shape[1]))
            parts.append(
                pd.DataFrame(
                    [
                        (trace.name, x, y, z[i, j])
                        for i, y in enumerate(ys)
                        for j, x in enumerate(xs)
                    ],
                    columns=["trace", "x", "y", "z"],
                )
            )
            continue
        if trace.x is None or trace.y is None or all(v is None for v in trace.y):
            continue  # a legend swatch
        part = pd.DataFrame({"trace": trace.name, "x": list(trace.x), "y": list(trace.y)})
        text = trace.hovertext if trace.hovertext is not None else None
        if text is not None and not isinstance(text, str):
            part["label"] = list(text)
        for axis in ("x", "y"):
            err = getattr(trace, f"error_{axis}")
            if err is not None and err.array is not None:
                part[f"{axis}_plus"] = list(err.array)
                part[f"{axis}_minus"] = list(err.arrayminus or err.array)
        parts.append(part)
    return (
        pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["trace", "x", "y"])
    )
