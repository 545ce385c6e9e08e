"""Every colour and marker the lab draws with, so a colour means one thing on every page.

Three palettes that never share a colour: :data:`ACTION_COLORS` (the six actions: graph
nodes, Q-value bars, action mixes), :data:`AGENT_COLORS` (agents: the token chart) and the
policies' (:func:`policy_color`: comparisons, training curves, robustness, sweeps). A policy
keeps its colour whatever else is on the chart: ``star`` is grey on the Pareto chart, in the
robustness lines and in the run diff alike. Every learned method — Agent Q-Mix and each
learned-topology method (:data:`LEARNED_METHODS`) — has a colour of its own, and every
point a method learned is drawn in it, whatever its label (``gdesigner w=0.1 #2`` is
G-Designer's colour). Several learned points of one method (token weights, seeds,
checkpoints) share the method's colour and differ by marker (:func:`variant_symbols`) and,
for token weights, by shade (:func:`shade`).

The policies' colours are chosen for colour-blind readers (from Paul Tol's and Okabe & Ito's
schemes): under simulated protanopia, deuteranopia and tritanopia (Machado et al. 2009) the
five learned methods stay at least 15 OKLab units (×100) apart, and any two policies at
least 6 (``tests/lab/test_figures.py`` checks both).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

from core.baselines.names import METHOD_NAMES

ACTION_COLORS: tuple[str, ...] = (
    "#4C78A8",  # solo_process
    "#F58518",  # broadcast_all
    "#54A24B",  # selective_query
    "#B279A2",  # aggregate_refine
    "#72B7B2",  # execute_verify
    "#E45756",  # debate_check
)
"""Colour of each action, indexed like :data:`core.actions.ACTION_NAMES`."""

AGENT_COLORS: tuple[str, ...] = (
    "#8C6D31",  # ochre
    "#393B79",  # indigo
    "#A0A0A0",  # grey
    "#6B2D1F",  # brick brown
    "#C7B03B",  # mustard
    "#2F4F4F",  # slate
    "#D9A6A0",  # dusty rose
    "#5C5C3D",  # olive drab
)
"""Colour of agent 0, 1, ... in the token chart (none is an action's colour)."""

LEARNED_METHODS: tuple[str, ...] = ("qmix", *METHOD_NAMES)
"""The learned methods: Agent Q-Mix and the learned-topology methods (docs/baselines.md)."""

POLICY_COLORS: dict[str, str] = {
    # The learned methods: far apart, in any vision; qmix the one warm red.
    "qmix": "#CC3311",
    "gptswarm": "#0077BB",
    "agentprune": "#DDAA33",
    "agentdropout": "#33BBEE",
    "gdesigner": "#222255",
    # The fixed topologies.
    "single": "#999933",
    "chain": "#009E73",
    "star": "#666666",
    "ring": "#AA4499",
    "full": "#332288",
    "debate": "#663333",
    "random": "#CC79A7",
    "training (exploring)": "#BBBBBB",
}
"""The colour of every policy the project ships: each learned method and each fixed topology."""

OTHER_POLICY_COLORS: tuple[str, ...] = (
    "#1F78B4",
    "#B15928",
    "#6A3D9A",
    "#33A02C",
    "#FB9A99",
    "#CAB2D6",
)
"""Colours of policies the project does not name (a user's own baseline); one is picked
from the name, so it too is the same on every chart and in every session."""

POLICY_PALETTE: tuple[str, ...] = tuple(POLICY_COLORS.values()) + OTHER_POLICY_COLORS
"""Every policy colour (for checks that the palettes stay apart)."""

SYMBOLS: tuple[str, ...] = (
    "circle",
    "square",
    "triangle-up",
    "diamond",
    "star",
    "hexagon",
    "triangle-down",
    "cross",
    "pentagon",
    "x",
)
"""Markers that tell several points of one policy apart (runs, seeds)."""


def policy_color(policy: str) -> str:
    """The colour of ``policy`` (its stored or its displayed name), the same everywhere."""
    if policy in POLICY_COLORS:
        return POLICY_COLORS[policy]
    if policy == "env":  # training episodes as stored
        return POLICY_COLORS["training (exploring)"]
    return OTHER_POLICY_COLORS[zlib.crc32(policy.encode()) % len(OTHER_POLICY_COLORS)]


def variant_symbols(keys: Sequence) -> dict:
    """A marker per distinct key (in sorted order): the first is a circle, so a policy with
    one point looks like every other policy's."""
    return {k: SYMBOLS[i % len(SYMBOLS)] for i, k in enumerate(sorted(set(keys), key=str))}


def shade(color: str, k: int, n: int) -> str:
    """``color`` darkened for the k-th of n levels (k = 0 lightest, n - 1 the colour itself):
    the token weights of a sweep, from cheap-to-talk to expensive."""
    if n <= 1:
        return color
    f = 0.45 + 0.55 * k / (n - 1)  # mix with white: 45 % colour at the lightest
    r, g, b = (int(color[i : i + 2], 16) for i in (1, 3, 5))
    return "#" + "".join(f"{round(255 - (255 - c) * f):02X}" for c in (r, g, b))
