"""The six communication actions and the round graph they induce (docs/actions.md).

Edge convention everywhere in this project: an edge ``src -> dst`` means *dst reads
src's answer of this round*. As a PyG ``edge_index`` it is ``[[src...], [dst...]]``.

Cycle rule (deterministic, documented in docs/actions.md):

1. Every live agent gets a *rank* from its action: producers first
   (``broadcast_all`` 0), then agents that neither send nor ask (``solo_process``,
   ``execute_verify`` 1), then agents that ask one peer (``selective_query``,
   ``debate_check`` 2), then consumers (``aggregate_refine`` 3). Ties go by agent index.
   This gives a strict total order over the agents.
2. Edges that go *forward* in that order are all kept: they cannot form a cycle.
3. The remaining (*backward*) edges are tried one by one, in the order
   (rank of dst, dst, rank of src, src); each is kept unless it would close a
   cycle with the edges kept so far, in which case it is dropped and recorded.

So an aggregator reads every producer; two agents who both broadcast reach each
other in one direction only (the lower index is read by the higher one).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from functools import lru_cache
from typing import Any


class Action(IntEnum):
    """A communication action an agent chooses for one round."""

    SOLO_PROCESS = 0
    BROADCAST_ALL = 1
    SELECTIVE_QUERY = 2
    AGGREGATE_REFINE = 3
    EXECUTE_VERIFY = 4
    DEBATE_CHECK = 5

    @property
    def label(self) -> str:
        return self.name.lower()


N_ACTIONS = len(Action)
ACTION_NAMES: tuple[str, ...] = tuple(a.label for a in Action)

ACTION_SETS: dict[str, tuple[int, ...]] = {
    "all": tuple(int(a) for a in Action),
    "graph": (
        int(Action.SOLO_PROCESS),
        int(Action.BROADCAST_ALL),
        int(Action.SELECTIVE_QUERY),
        int(Action.AGGREGATE_REFINE),
        int(Action.DEBATE_CHECK),
    ),
}
"""Which actions a team may take (``--actions``): ``all`` six, or ``graph`` — only what a
communication graph can express (who reads whom), no ``execute_verify``: the protocol in
which Agent Q-Mix meets the learned-topology methods on their own ground
(docs/baselines.md, "Protocols")."""


def action_mask(name: str) -> tuple[bool, ...]:
    """``(A,)``: which of the six actions the action set ``name`` allows."""
    if name not in ACTION_SETS:
        raise ValueError(f"no action set {name!r}; choose one of {', '.join(ACTION_SETS)}")
    allowed = ACTION_SETS[name]
    return tuple(a in allowed for a in range(N_ACTIONS))


_RANK = {
    Action.BROADCAST_ALL: 0,
    Action.SOLO_PROCESS: 1,
    Action.EXECUTE_VERIFY: 1,
    Action.SELECTIVE_QUERY: 2,
    Action.DEBATE_CHECK: 2,
    Action.AGGREGATE_REFINE: 3,
}


@dataclass(frozen=True)
class RoundGraph:
    """The communication graph of one round.

    Attributes:
        kept: the edges ``(src, dst)`` kept, sorted (dst reads src).
        dropped: edges ``(src, dst)`` that were asked for but dropped to break a cycle.
        layers: agents grouped by topological layer; agents of a layer run together.
        order: the total order used by the cycle rule (agent indices).
    """

    kept: tuple[tuple[int, int], ...] = ()
    dropped: tuple[tuple[int, int], ...] = ()
    layers: tuple[tuple[int, ...], ...] = ()
    order: tuple[int, ...] = field(default=())

    @property
    def edges(self) -> list[tuple[int, int]]:
        return list(self.kept)

    @property
    def edge_index(self) -> Any:
        """``(2, |E|)`` long tensor, row 0 = src, row 1 = dst: the PyG form of the edges."""
        import torch  # the runtime never needs it; keep torch out of light imports

        if not self.kept:
            return torch.empty(2, 0, dtype=torch.long)
        return torch.tensor(self.kept, dtype=torch.long).t().contiguous()

    def readers_of(self, n_agents: int) -> list[list[int]]:
        """``sources[i]`` = the agents whose answer agent ``i`` reads this round, sorted."""
        sources: list[list[int]] = [[] for _ in range(n_agents)]
        for s, d in self.edges:
            sources[d].append(s)
        return [sorted(x) for x in sources]

    def adjacency(self, n_agents: int) -> Any:
        """``(N, N)`` float 0/1 tensor with ``adj[src, dst] = 1``."""
        import torch

        adj = torch.zeros(n_agents, n_agents)
        for src, dst in self.kept:
            adj[src, dst] = 1.0
        return adj


def trusted_peer(
    agent: int, alive: Sequence[bool], confidence: Sequence[float] | None
) -> int | None:
    """The peer ``agent`` asks under ``selective_query``.

    The live peer with the highest confidence last round (ties: lowest index);
    in the first round (``confidence is None``) the next live agent after it, cyclically.
    """
    n = len(alive)
    peers = [j for j in range(n) if j != agent and alive[j]]
    if not peers:
        return None
    if confidence is None:
        return min(peers, key=lambda j: (j - agent) % n)
    return max(peers, key=lambda j: (confidence[j], -j))


def debate_partner(agent: int, alive: Sequence[bool]) -> int | None:
    """The partner of ``agent`` under ``debate_check``: pairs (0,1), (2,3), ...

    When that partner is failed or missing, the next live agent after ``agent``.
    """
    n = len(alive)
    partner = agent ^ 1
    if partner < n and alive[partner]:
        return partner
    peers = [j for j in range(n) if j != agent and alive[j]]
    if not peers:
        return None
    return min(peers, key=lambda j: (j - agent) % n)


def requested_edges(
    actions: Sequence[int], alive: Sequence[bool], confidence: Sequence[float] | None = None
) -> list[tuple[int, int]]:
    """The edges ``(src, dst)`` the actions ask for, before cycles are broken."""
    actions, alive = _check_actions(actions), tuple(bool(x) for x in alive)
    return list(_requested(actions, alive, _queried(actions, alive, confidence)))


def _queried(
    actions: tuple[int, ...], alive: tuple[bool, ...], confidence: Sequence[float] | None
) -> tuple[int | None, ...]:
    """Whom each ``selective_query`` agent asks (None for everyone else): the only way the
    confidences enter the graph."""
    query = int(Action.SELECTIVE_QUERY)
    return tuple(
        trusted_peer(i, alive, confidence) if a == query and alive[i] else None
        for i, a in enumerate(actions)
    )


def _requested(
    actions: tuple[int, ...], alive: tuple[bool, ...], queried: tuple[int | None, ...]
) -> tuple[tuple[int, int], ...]:
    n = len(actions)
    edges: set[tuple[int, int]] = set()
    for i, a in enumerate(actions):
        if not alive[i]:
            continue
        a = Action(a)
        others = [j for j in range(n) if j != i and alive[j]]
        if a is Action.BROADCAST_ALL:
            edges.update((i, j) for j in others)
        elif a is Action.AGGREGATE_REFINE:
            edges.update((j, i) for j in others)
        elif a is Action.SELECTIVE_QUERY:
            peer = queried[i]
            if peer is not None:
                edges.add((peer, i))
        elif a is Action.DEBATE_CHECK:
            peer = debate_partner(i, alive)
            if peer is not None:
                edges.add((peer, i))
                edges.add((i, peer))
    return tuple(sorted(edges))


@lru_cache(maxsize=1 << 16)
def _induce(
    actions: tuple[int, ...], alive: tuple[bool, ...], queried: tuple[int | None, ...]
) -> RoundGraph:
    return _resolve(_requested(actions, alive, queried), actions, alive)


def _layers(
    n: int, alive: Sequence[bool], kept: Sequence[tuple[int, int]]
) -> tuple[tuple[int, ...], ...]:
    depth = [0] * n
    preds: list[list[int]] = [[] for _ in range(n)]
    for s, d in kept:
        preds[d].append(s)
    # Longest path from a source; graph is a DAG so memoised DFS terminates.
    memo: dict[int, int] = {}

    def level(v: int) -> int:
        if v not in memo:
            memo[v] = 0 if not preds[v] else 1 + max(level(p) for p in preds[v])
        return memo[v]

    for v in range(n):
        depth[v] = level(v)
    live = [v for v in range(n) if alive[v]]
    if not live:
        return ()
    return tuple(
        tuple(v for v in live if depth[v] == k) for k in range(max(depth[v] for v in live) + 1)
    )


_RANK_OF = tuple(_RANK[Action(a)] for a in range(len(Action)))
"""Rank of each action id (``_RANK`` without the enum lookups, which dominate small graphs)."""


def _check_actions(actions: Sequence[int]) -> tuple[int, ...]:
    ids = tuple(int(a) for a in actions)
    for a in ids:
        if not 0 <= a < N_ACTIONS:
            raise ValueError(f"action {a} is not one of 0..{N_ACTIONS - 1}")
    return ids


def resolve_edges(
    edges: Sequence[tuple[int, int]], actions: Sequence[int], alive: Sequence[bool]
) -> RoundGraph:
    """Break the cycles of ``edges`` by the documented rule and lay the agents out in layers."""
    key = tuple(sorted({(int(s), int(d)) for s, d in edges}))
    return _resolve(key, _check_actions(actions), tuple(bool(x) for x in alive))


@lru_cache(maxsize=1 << 16)
def _resolve(
    edges: tuple[tuple[int, int], ...], actions: tuple[int, ...], alive: tuple[bool, ...]
) -> RoundGraph:
    """:func:`resolve_edges` on hashable arguments. Cached: the result is immutable and a
    pure function of them, and a team of four replays the same few thousand cases."""
    n = len(actions)
    rank = [_RANK_OF[a] for a in actions]
    order = sorted(range(n), key=lambda i: (rank[i], i))
    pos = [0] * n
    for k, agent in enumerate(order):
        pos[agent] = k
    live_edges = [(s, d) for s, d in edges if alive[s] and alive[d] and s != d]
    forward = [(s, d) for s, d in live_edges if pos[s] < pos[d]]
    backward = sorted(
        (e for e in live_edges if pos[e[0]] > pos[e[1]]),
        key=lambda e: (rank[e[1]], e[1], rank[e[0]], e[0]),
    )
    # reach[v]: the agents v reaches over the kept edges, v included, as a bit set. Forward
    # edges climb the order, so walking it backwards sees every successor's set complete.
    reach = [1 << v for v in range(n)]
    succ: list[list[int]] = [[] for _ in range(n)]
    for s, d in forward:
        succ[s].append(d)
    for v in reversed(order):
        for w in succ[v]:
            reach[v] |= reach[w]
    kept = list(forward)
    dropped: list[tuple[int, int]] = []
    for s, d in backward:
        if reach[d] >> s & 1:  # d already reaches s: s -> d would close a cycle
            dropped.append((s, d))
            continue
        kept.append((s, d))
        gained, via = reach[d], 1 << s
        for u in range(n):  # whoever reaches s now reaches what d reaches
            if reach[u] & via:
                reach[u] |= gained
    kept.sort()
    return RoundGraph(
        kept=tuple(kept),
        dropped=tuple(dropped),
        layers=_layers(n, alive, kept),
        order=tuple(order),
    )


def induce_graph(
    actions: Sequence[int],
    alive: Sequence[bool] | None = None,
    confidence: Sequence[float] | None = None,
) -> RoundGraph:
    """Induce a round's directed communication graph from the agents' actions.

    Args:
        actions: ``(N,)`` action ids, one per agent (a failed agent's action is ignored).
        alive: ``(N,)`` which agents are live; failed agents send and receive nothing.
        confidence: ``(N,)`` last round's confidences, ``None`` in the first round;
            decides whom ``selective_query`` asks.

    Returns:
        The :class:`RoundGraph`: ``edge_index (2, |E|)``, dropped edges, layers.
    """
    n = len(actions)
    actions = _check_actions(actions)
    alive = (True,) * n if alive is None else tuple(bool(x) for x in alive)
    if len(alive) != n:
        raise ValueError(f"alive has {len(alive)} entries for {n} agents")
    if confidence is not None and len(confidence) != n:
        raise ValueError(f"confidence has {len(confidence)} entries for {n} agents")
    # Cached on what decides the graph; the confidences only through whom each query asks.
    return _induce(actions, alive, _queried(actions, alive, confidence))
