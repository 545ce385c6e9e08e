"""Figure builders: plain functions from records / DataFrames to Plotly figures.

Nothing here touches Streamlit or the database, so every figure can be built and checked
in a test from a hand-made :class:`~core.records.EpisodeRecord` or DataFrame. One colour
per action everywhere (graph nodes, Q-value bars, action mixes), so a reader learns the
palette once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import networkx as nx
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio
from plotly.subplots import make_subplots

from core.actions import ACTION_NAMES
from core.records import EpisodeRecord, RoundRecord

ACTION_COLORS: tuple[str, ...] = (
    "#4C78A8",  # solo_process
    "#F58518",  # broadcast_all
    "#54A24B",  # selective_query
    "#B279A2",  # aggregate_refine
    "#72B7B2",  # execute_verify
    "#E45756",  # debate_check
)
"""Colour of each action, indexed like :data:`core.actions.ACTION_NAMES`."""

POLICY_PALETTE = (
    "#1F77B4",
    "#FF7F0E",
    "#2CA02C",
    "#D62728",
    "#9467BD",
    "#8C564B",
    "#E377C2",
    "#7F7F7F",
    "#BCBD22",
    "#17BECF",
)
FAILED_COLOR = "#D62728"
DECISION_COLOR = "#222222"
DROPPED_COLOR = "#C0392B"
EDGE_COLOR = "#555555"
FONT = dict(family="Inter, Segoe UI, Helvetica, Arial, sans-serif", size=13)

GRAPH_TRACES = ("edges", "dropped edges", "decision reads")
"""Names of the graph figure's first three traces (edge traces; nodes follow)."""

_NODE_RADIUS = 0.11
"""How far (layout units) arrows stop short of a node's centre, so the head stays visible."""


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


def _layout(fig: go.Figure, height: int, title: str | None = None) -> go.Figure:
    # Title on the first line, the legend on the line below it, the plot under both.
    fig.update_layout(
        template=TEMPLATE,
        font=FONT,
        height=height,
        margin=dict(l=10, r=10, t=85 if title else 40, b=10),
        title=dict(text=title, x=0.0, xanchor="left", y=0.985, yanchor="top", yref="container")
        if title
        else None,
        legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="left", x=0.0),
    )
    return fig


def agent_labels(roles: Sequence[str]) -> list[str]:
    """``"0 solver"``, ``"1 coder"``...: how agents are named on every axis."""
    return [f"{i} {role}" for i, role in enumerate(roles)]


# --------------------------------------------------------------------- graph


def graph_positions(n_agents: int) -> dict[int, tuple[float, float]]:
    """A fixed layout: agents on a circle (agent 0 on top), the decision agent (-1) in the centre.

    Fixed for the whole episode so that only the edges move between rounds.
    """
    if n_agents == 1:
        pos = {0: (0.0, 1.0)}
    else:
        circle = nx.circular_layout(range(n_agents), scale=1.0)
        # networkx puts agent 0 on the right; turn a quarter so it sits on top.
        pos = {i: (round(-float(xy[1]), 6), round(float(xy[0]), 6)) for i, xy in circle.items()}
    pos[-1] = (0.0, 0.0)
    return pos


def _shortened(a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
    dx, dy = b[0] - a[0], b[1] - a[1]
    length = math.hypot(dx, dy) or 1.0
    k = max(length - _NODE_RADIUS, 0.0) / length
    return a[0] + dx * k, a[1] + dy * k


def _edge_trace(
    edges: Sequence[tuple[int, int]],
    pos: dict[int, tuple[float, float]],
    name: str,
    color: str,
    dash: str,
    hover: dict[tuple[int, int], str],
    width: float = 2.0,
) -> go.Scatter:
    xs: list[float | None] = []
    ys: list[float | None] = []
    sizes: list[int] = []
    custom: list[list[int] | None] = []
    texts: list[str] = []
    for s, d in edges:
        end = _shortened(pos[s], pos[d])
        xs += [pos[s][0], end[0], None]
        ys += [pos[s][1], end[1], None]
        sizes += [0, 13, 0]
        custom += [[s, d], [s, d], None]
        text = hover.get((s, d), f"{s} → {d}")
        texts += [text, text, ""]
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


def _message_hover(rnd: RoundRecord) -> dict[tuple[int, int], str]:
    out = {}
    for m in rnd.messages:
        answer = m.answer if m.answer is not None else "—"
        out[(m.src, m.dst)] = (
            f"{m.src} → {m.dst}: answer {answer} (conf {m.confidence:.2f}, {m.tokens} tok)"
            f"<br>{_clip_text(m.text, 120)}"
        )
    return out


def _clip_text(text: str, n: int) -> str:
    text = text.replace("\n", " ")
    return text if len(text) <= n else text[: n - 1] + "…"


def _graph_frame_data(
    record: EpisodeRecord, r: int, pos: dict[int, tuple[float, float]]
) -> list[go.Scatter]:
    rnd = record.rounds[r]
    hover = _message_hover(rnd)
    last = r == len(record.rounds) - 1
    decision_edges = (
        [(s, -1) for s in record.decision.read_from] if (last and record.decision) else []
    )
    data = [
        _edge_trace(rnd.edges, pos, GRAPH_TRACES[0], EDGE_COLOR, "solid", hover),
        _edge_trace(rnd.dropped_edges, pos, GRAPH_TRACES[1], DROPPED_COLOR, "dash", {}),
        _edge_trace(decision_edges, pos, GRAPH_TRACES[2], "#AAAAAA", "dot", {}, width=1.2),
    ]
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
                hovertext=[_step_hover(steps[i], record.roles) for i in agents],
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
            text=[f"✕ {steps[i].fault or 'inactive'}" for i in failed],
            textposition="bottom center",
            textfont=dict(color=FAILED_COLOR, size=12),
            customdata=failed,
            hovertext=[f"agent {i}: {steps[i].fault or 'inactive'}" for i in failed],
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
        text=["D"],
        textfont=dict(color="white", size=13),
        customdata=[-1],
        hovertext=[
            f"decision agent<br>{verdict}" if verdict else "decision agent (after the last round)"
        ],
        hoverinfo="text",
    )


def _step_hover(step, roles: Sequence[str]) -> str:
    role = roles[step.agent] if 0 <= step.agent < len(roles) else step.role
    parts = [f"<b>agent {step.agent} · {role}</b>", f"action: {ACTION_NAMES[step.action]}"]
    if step.greedy is not None:
        parts.append("greedy" if step.greedy else "explored (ε)")
    if step.fault:
        parts.append(f"fault: {step.fault}")
    parts.append(f"answer: {step.answer if step.answer is not None else '—'}")
    if step.correct is not None:
        parts.append("right" if step.correct else "wrong")
    parts.append(f"read from: {step.read_from or 'nobody'}")
    parts.append(f"tokens: {step.tokens}")
    return "<br>".join(parts)


def communication_graph(
    record: EpisodeRecord, active_round: int = 0, height: int = 430
) -> go.Figure:
    """The episode's communication graph, animated: one Plotly frame per round.

    Trace order in every frame: kept edges, dropped edges (dashed), the decision agent's
    inputs (last round only), one node trace per action (the legend), failed agents
    (a red ✕), the decision agent. Each edge point carries ``customdata=[src, dst]``;
    node points carry the agent index. ``active_round`` is the frame shown first.
    """
    if not record.rounds:
        raise ValueError("episode has no rounds to draw")
    active_round = min(max(active_round, 0), len(record.rounds) - 1)
    pos = graph_positions(len(record.roles))
    frames = [
        go.Frame(data=_graph_frame_data(record, r, pos), name=str(rnd.round))
        for r, rnd in enumerate(record.rounds)
    ]
    fig = go.Figure(data=frames[active_round].data, frames=frames)
    slider_steps = [
        dict(
            method="animate",
            label=f.name,
            args=[[f.name], dict(mode="immediate", frame=dict(duration=0, redraw=True))],
        )
        for f in frames
    ]
    fig.update_layout(
        xaxis=dict(visible=False, range=[-1.35, 1.35]),
        yaxis=dict(visible=False, range=[-1.3, 1.3], scaleanchor="x"),
        hovermode="closest",
        updatemenus=[
            dict(
                type="buttons",
                direction="left",
                x=0.0,
                y=-0.02,
                xanchor="left",
                yanchor="top",
                showactive=False,
                buttons=[
                    dict(
                        label="▶ Play",
                        method="animate",
                        args=[
                            None,
                            dict(
                                frame=dict(duration=900, redraw=True),
                                transition=dict(duration=0),
                                fromcurrent=True,
                                mode="immediate",
                            ),
                        ],
                    ),
                    dict(
                        label="❚❚ Pause",
                        method="animate",
                        args=[[None], dict(frame=dict(duration=0, redraw=False), mode="immediate")],
                    ),
                ],
            )
        ],
        sliders=[
            dict(
                active=active_round,
                currentvalue=dict(prefix="round "),
                x=0.34,
                len=0.66,
                y=-0.02,
                yanchor="top",
                pad=dict(t=0),
                steps=slider_steps,
            )
        ],
    )
    _layout(fig, height)
    fig.update_layout(margin=dict(l=10, r=10, t=40, b=70))
    return fig


def frame_edges(fig: go.Figure, frame: int, trace: str = "edges") -> list[tuple[int, int]]:
    """The edges drawn in one frame of :func:`communication_graph` (for tests and captions)."""
    data = fig.frames[frame].data[GRAPH_TRACES.index(trace)]
    seen: list[tuple[int, int]] = []
    for c in data.customdata or ():
        if c is not None and tuple(c) not in seen:
            seen.append((int(c[0]), int(c[1])))
    return seen


def frame_nodes(fig: go.Figure, frame: int, name: str) -> list[int]:
    """Agent indices in the node trace called ``name`` (an action name, ``failed``) of a frame."""
    for data in fig.frames[frame].data:
        if data.name == name:
            return [int(i) for i in data.customdata or ()]
    raise KeyError(name)


# --------------------------------------------------------------------- per-round panels


def q_values_figure(rnd: RoundRecord, roles: Sequence[str], height: int = 320) -> go.Figure | None:
    """Per-agent Q-values of the six actions (one bar group per agent); None for fixed policies.

    The chosen action's bar has a thick black outline and a label: ``greedy`` or
    ``explored`` (picked by ε-exploration against the argmax).
    """
    steps = [s for s in sorted(rnd.steps, key=lambda s: s.agent) if s.q_values is not None]
    if not steps:
        return None
    labels = [agent_labels(roles)[s.agent] for s in steps]
    fig = go.Figure()
    for a, name in enumerate(ACTION_NAMES):
        chosen = [s.action == a for s in steps]
        fig.add_bar(
            x=labels,
            y=[s.q_values[a] for s in steps],
            name=name,
            marker=dict(
                color=ACTION_COLORS[a],
                line=dict(color="black", width=[3 if c else 0 for c in chosen]),
                pattern=dict(
                    shape=[
                        "/" if c and s.greedy is False else ""
                        for s, c in zip(steps, chosen, strict=True)
                    ],
                    fgcolor="black",
                ),
            ),
            text=[_choice_label(s) if c else "" for s, c in zip(steps, chosen, strict=True)],
            textposition="outside",
            cliponaxis=False,
            hovertemplate=f"%{{x}}<br>{name}: %{{y:.3f}}<extra></extra>",
        )
    eps = next((s.epsilon for s in steps if s.epsilon is not None), None)
    title = "Q-values · outlined = chosen, hatched = explored" + (
        f" (ε = {eps:.2f})" if eps is not None else ""
    )
    fig.update_layout(barmode="group", yaxis_title="Q(o, a)", bargap=0.25)
    return _layout(fig, height, title)


def _choice_label(step) -> str:
    if step.greedy is None:
        return "chosen"
    return "greedy" if step.greedy else "explored"


def mixer_figure(rnd: RoundRecord, roles: Sequence[str], height: int = 300) -> go.Figure | None:
    """The mixer's view of the round: per-agent credit ∂Q_tot/∂Q_i and its weights heat map.

    (Q_tot itself goes in the caller's heading, next to the round number.)

    Left: credit bars (one per agent). Right: the first-layer weights ``(N, embed)`` as
    a heat map. None when the round has neither (fixed policies).
    """
    if rnd.credit is None and rnd.mixer_weights is None:
        return None
    labels = agent_labels(roles)
    fig = make_subplots(
        rows=1,
        cols=2,
        column_widths=[0.35, 0.65],
        horizontal_spacing=0.12,
        subplot_titles=("credit ∂Q_tot/∂Q_i", "weights |W₁| (agent × unit)"),
    )
    if rnd.credit is not None:
        fig.add_bar(
            x=list(rnd.credit),
            y=labels[: len(rnd.credit)],
            orientation="h",
            marker_color="#4C78A8",
            name="credit",
            text=[f"{c:.3f}" for c in rnd.credit],
            textposition="auto",
            hovertemplate="%{y}: %{x:.4f}<extra></extra>",
            row=1,
            col=1,
        )
        fig.update_yaxes(autorange="reversed", row=1, col=1)
    if rnd.mixer_weights is not None:
        fig.add_heatmap(
            z=[list(row) for row in rnd.mixer_weights],
            y=labels[: len(rnd.mixer_weights)],
            colorscale="Blues",
            name="weights",
            colorbar=dict(thickness=10, len=0.9),
            hovertemplate="%{y}, unit %{x}: %{z:.3f}<extra></extra>",
            row=1,
            col=2,
        )
        fig.update_yaxes(autorange="reversed", showticklabels=rnd.credit is None, row=1, col=2)
    fig.update_layout(showlegend=False)
    fig.update_annotations(font_size=13)
    return _layout(fig, height)


def tokens_figure(
    record: EpisodeRecord, upto_round: int | None = None, height: int = 280
) -> go.Figure:
    """Tokens per agent per round (stacked bars) and the team's running total (line)."""
    n_rounds = len(record.rounds)
    last = n_rounds - 1 if upto_round is None else min(upto_round, n_rounds - 1)
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    x = [f"round {r.round}" for r in record.rounds[: last + 1]]
    for i, label in enumerate(agent_labels(record.roles)):
        fig.add_bar(
            x=x,
            y=[_agent_tokens(r, i) for r in record.rounds[: last + 1]],
            name=label,
            marker_color=POLICY_PALETTE[i % len(POLICY_PALETTE)],
        )
    running, total = [], 0
    for r in record.rounds[: last + 1]:
        total += r.tokens
        running.append(total)
    if upto_round is None and record.decision is not None:
        x = [*x, "decision"]
        fig.add_bar(
            x=["decision"], y=[record.decision.tokens], name="decision", marker_color=DECISION_COLOR
        )
        running.append(total + record.decision.tokens)
    fig.add_scatter(
        x=x,
        y=running,
        name="running total",
        mode="lines+markers",
        line=dict(color="black"),
        secondary_y=True,
    )
    fig.update_layout(barmode="stack")
    fig.update_yaxes(title_text="tokens", secondary_y=False)
    fig.update_yaxes(title_text="total", secondary_y=True, rangemode="tozero")
    return _layout(fig, height, "Tokens")


def _agent_tokens(rnd: RoundRecord, agent: int) -> int:
    return sum(s.tokens for s in rnd.steps if s.agent == agent)


def round_table(record: EpisodeRecord, r: int) -> pd.DataFrame:
    """One row per agent for round ``r``: action, fault, answer, right/wrong, read from, tokens."""
    rnd = record.rounds[r]
    rows = []
    for s in sorted(rnd.steps, key=lambda s: s.agent):
        rows.append(
            {
                "agent": agent_labels(record.roles)[s.agent],
                "action": ACTION_NAMES[s.action],
                "how": "" if s.greedy is None else ("greedy" if s.greedy else "explored"),
                "fault": s.fault or "",
                "answer": s.answer if s.answer is not None else "—",
                "result": "" if s.correct is None else ("✔ right" if s.correct else "✘ wrong"),
                "confidence": round(s.confidence, 2),
                "read from": ", ".join(map(str, s.read_from)) or "—",
                "tokens": s.tokens,
            }
        )
    return pd.DataFrame(rows)


def messages_table(rnd: RoundRecord) -> pd.DataFrame:
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


# --------------------------------------------------------------------- runs and comparisons


def training_curves_figure(
    episodes: pd.DataFrame, metrics: pd.DataFrame | None = None, height: int = 520
) -> go.Figure:
    """Reward, accuracy and tokens per episode (raw + moving average), loss and ε per update.

    ``episodes`` is :func:`core.store.queries.episode_curves` (episode, reward, correct,
    tokens, *_ma); ``metrics`` is :func:`core.store.queries.training_curves` (step, loss,
    epsilon, ...), or None/empty for evaluation runs.
    """
    fig = make_subplots(
        rows=2,
        cols=3,
        subplot_titles=("reward", "accuracy", "tokens / episode", "TD loss", "ε", "Q_tot mean"),
        vertical_spacing=0.16,
        horizontal_spacing=0.07,
    )
    if not episodes.empty:
        panels = [
            ("reward", "reward_ma", 1),
            ("correct", "accuracy_ma", 2),
            ("tokens", "tokens_ma", 3),
        ]
        for raw, ma, col in panels:
            fig.add_scatter(
                x=episodes["episode"],
                y=episodes[raw].astype(float),
                mode="markers",
                marker=dict(size=3, color="#BBBBBB"),
                name=raw,
                showlegend=False,
                row=1,
                col=col,
            )
            fig.add_scatter(
                x=episodes["episode"],
                y=episodes[ma],
                mode="lines",
                line=dict(color="#1F77B4", width=2),
                name=ma,
                showlegend=False,
                row=1,
                col=col,
            )
    if metrics is not None and not metrics.empty:
        x = metrics["episode"] if "episode" in metrics else metrics["step"]
        for col, name in ((1, "loss"), (2, "epsilon"), (3, "q_tot_mean")):
            if name in metrics:
                fig.add_scatter(
                    x=x,
                    y=metrics[name],
                    mode="lines",
                    line=dict(color="#FF7F0E", width=2),
                    name=name,
                    showlegend=False,
                    row=2,
                    col=col,
                )
    fig.update_xaxes(title_text="episode", row=2)
    return _layout(fig, height)


def action_mix_figure(
    df: pd.DataFrame, by: str, height: int = 320, title: str | None = None
) -> go.Figure:
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
            x=[str(g) for g in groups],
            y=[float(part.get(g, 0.0)) for g in groups],
            name=name,
            marker_color=ACTION_COLORS[a],
            hovertemplate=f"{by} %{{x}}<br>{name}: %{{y:.1%}}<extra></extra>",
        )
    fig.update_layout(barmode="stack", yaxis=dict(title="share", tickformat=".0%", range=[0, 1]))
    fig.update_xaxes(title_text=by, type="category")
    return _layout(fig, height, title)


def pareto_front(df: pd.DataFrame, x: str = "mean_tokens", y: str = "accuracy") -> pd.DataFrame:
    """The rows no other row beats: fewer (or equal) tokens *and* higher (or equal) accuracy.

    Sorted by ``x``; a row is on the front if its ``y`` is strictly above every row with
    fewer tokens.
    """
    rows = df.dropna(subset=[x, y]).sort_values([x, y], ascending=[True, False])
    keep, best = [], -math.inf
    for idx, value in zip(rows.index, rows[y], strict=True):
        if value > best:
            keep.append(idx)
            best = value
    return rows.loc[keep]


def pareto_figure(df: pd.DataFrame, label: str = "policy", height: int = 420) -> go.Figure:
    """Accuracy vs mean tokens per ``label`` (policy / topology), with the Pareto front line."""
    fig = go.Figure()
    for k, (name, part) in enumerate(df.groupby(label, sort=True)):
        fig.add_scatter(
            x=part["mean_tokens"],
            y=part["accuracy"],
            mode="markers+text",
            text=[str(name)] * len(part),
            textposition="top center",
            name=str(name),
            marker=dict(size=14, color=POLICY_PALETTE[k % len(POLICY_PALETTE)]),
            customdata=part[["episodes"]].to_numpy() if "episodes" in part else None,
            hovertemplate=(
                f"<b>{name}</b><br>tokens %{{x:.0f}}<br>accuracy %{{y:.1%}}"
                + ("<br>%{customdata[0]} episodes" if "episodes" in part else "")
                + "<extra></extra>"
            ),
        )
    front = pareto_front(df)
    fig.add_scatter(
        x=front["mean_tokens"],
        y=front["accuracy"],
        mode="lines",
        name="Pareto front",
        line=dict(color="black", dash="dash", shape="hv"),
    )
    fig.update_layout(
        xaxis_title="mean tokens per episode", yaxis=dict(title="accuracy", tickformat=".0%")
    )
    return _layout(fig, height)


def robustness_figure(df: pd.DataFrame, height: int = 360) -> go.Figure:
    """Accuracy vs number of failed agents, one line per policy (``df`` from the store's ``robustness``)."""
    fig = go.Figure()
    for k, (name, part) in enumerate(df.sort_values("n_failed").groupby("policy", sort=True)):
        fig.add_scatter(
            x=part["n_failed"],
            y=part["accuracy"],
            mode="lines+markers",
            name=str(name),
            line=dict(
                color=POLICY_PALETTE[k % len(POLICY_PALETTE)], width=3 if name == "qmix" else 2
            ),
            customdata=part[["episodes"]].to_numpy(),
            hovertemplate=f"{name}<br>%{{x}} failed: %{{y:.1%}} (%{{customdata[0]}} ep.)<extra></extra>",
        )
    fig.update_layout(
        xaxis=dict(title="failed agents", dtick=1),
        yaxis=dict(title="accuracy", tickformat=".0%", range=[0, 1.02]),
    )
    return _layout(fig, height)


def ctde_sweep_figure(
    grid: Sequence[float], curves: dict[str, Sequence[float]], height: int = 300
) -> go.Figure:
    """Q_tot as each agent's Q-value sweeps ``grid`` (others held): every line rises."""
    fig = go.Figure()
    for k, (name, ys) in enumerate(curves.items()):
        fig.add_scatter(
            x=list(grid),
            y=list(ys),
            mode="lines",
            name=name,
            line=dict(color=POLICY_PALETTE[k % len(POLICY_PALETTE)], width=2),
        )
    fig.update_layout(xaxis_title="Q_i of the agent's chosen action", yaxis_title="Q_tot")
    return _layout(fig, height, "Q_tot is monotonic in every Q_i")
