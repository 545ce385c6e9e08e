"""Graph induction semantics (core/actions.py): each action, cycles, failures, peers."""

from __future__ import annotations

import itertools
import random

import pytest
import torch

from core.actions import (
    ACTION_NAMES,
    N_ACTIONS,
    Action,
    debate_partner,
    induce_graph,
    requested_edges,
    resolve_edges,
    trusted_peer,
)

SOLO, BCAST, QUERY, AGG, EXEC, DEBATE = (
    Action.SOLO_PROCESS,
    Action.BROADCAST_ALL,
    Action.SELECTIVE_QUERY,
    Action.AGGREGATE_REFINE,
    Action.EXECUTE_VERIFY,
    Action.DEBATE_CHECK,
)


def assert_valid(graph, n: int, alive: list[bool]) -> None:
    """DAG, layers are a topological layering of exactly the live agents, edges between live."""
    edges = graph.edges
    assert graph.edge_index.dtype == torch.long and graph.edge_index.shape == (2, len(edges))
    assert len(set(edges)) == len(edges)
    layer_of = {v: k for k, layer in enumerate(graph.layers) for v in layer}
    assert sorted(layer_of) == [v for v in range(n) if alive[v]]
    assert sum(len(layer) for layer in graph.layers) == len(layer_of)
    assert all(graph.layers), "no empty layer"
    for s, d in edges:
        assert s != d and alive[s] and alive[d]
        assert layer_of[s] < layer_of[d], f"edge {s}->{d} does not go down the layers"
    # Every agent past the first layer reads someone in the layer right above it
    # (layers are longest-path depths, not just any valid layering).
    for k, layer in enumerate(graph.layers[1:], start=1):
        for v in layer:
            assert any(layer_of[s] == k - 1 for s, d in edges if d == v)
    assert sorted(graph.order) == list(range(n))


def test_six_actions_in_paper_order():
    assert N_ACTIONS == 6
    assert ACTION_NAMES == (
        "solo_process",
        "broadcast_all",
        "selective_query",
        "aggregate_refine",
        "execute_verify",
        "debate_check",
    )


@pytest.mark.parametrize("action", [SOLO, EXEC])
def test_silent_actions_make_no_edges(action):
    g = induce_graph([action, SOLO, SOLO, SOLO])
    assert g.edges == [] and g.dropped == ()
    assert g.edge_index.shape == (2, 0)
    assert g.layers == ((0, 1, 2, 3),)
    assert g.adjacency(4).sum() == 0


def test_broadcast_alone_sends_to_every_live_agent():
    g = induce_graph([SOLO, BCAST, SOLO, SOLO])
    assert g.edges == [(1, 0), (1, 2), (1, 3)]
    assert g.layers == ((1,), (0, 2, 3))
    assert g.readers_of(4) == [[1], [], [1], [1]]
    adj = g.adjacency(4)
    assert adj[1].tolist() == [1.0, 0.0, 1.0, 1.0] and adj.sum() == 3


def test_aggregate_alone_reads_every_live_agent():
    g = induce_graph([SOLO, SOLO, AGG, SOLO])
    assert g.edges == [(0, 2), (1, 2), (3, 2)]
    assert g.layers == ((0, 1, 3), (2,))


def test_selective_query_alone_first_round_asks_next_agent_cyclically():
    assert induce_graph([SOLO, SOLO, SOLO, QUERY]).edges == [(0, 3)]
    assert induce_graph([SOLO, QUERY, SOLO, SOLO]).edges == [(2, 1)]


def test_debate_alone_pairs_both_ways_then_drops_one_direction():
    g = induce_graph([SOLO, SOLO, DEBATE, SOLO])
    assert requested_edges([SOLO, SOLO, DEBATE, SOLO], [True] * 4) == [(2, 3), (3, 2)]
    # 3 is SOLO (rank 1) so it comes before 2 (DEBATE, rank 2): 3 -> 2 is forward, kept.
    assert g.edges == [(3, 2)] and g.dropped == ((2, 3),)


def test_trusted_peer_rules():
    alive = [True, True, True, True]
    # First round: the next live agent after it, cyclically.
    assert [trusted_peer(i, alive, None) for i in range(4)] == [1, 2, 3, 0]
    assert trusted_peer(3, [False, True, True, True], None) == 1
    # Later rounds: highest last-round confidence among live peers, ties to lowest index.
    conf = [0.9, 0.2, 0.7, 0.7]
    assert trusted_peer(0, alive, conf) == 2  # its own 0.9 does not count
    assert trusted_peer(1, alive, conf) == 0
    assert trusted_peer(1, [False, True, True, True], conf) == 2  # tie 2 vs 3 -> 2
    assert trusted_peer(0, [True, False, False, False], conf) is None


def test_selective_query_uses_confidence_after_first_round():
    g = induce_graph([QUERY, SOLO, SOLO], confidence=[0.1, 0.3, 0.8])
    assert g.edges == [(2, 0)]
    g = induce_graph([QUERY, SOLO, SOLO], alive=[True, True, False], confidence=[0.1, 0.3, 0.8])
    assert g.edges == [(1, 0)]


def test_debate_partner_pairs_and_fallback():
    alive = [True] * 5
    assert [debate_partner(i, alive) for i in range(5)] == [1, 0, 3, 2, 0]  # 4 has no 5
    assert debate_partner(0, [True, False, True, True]) == 2  # partner failed: next live
    assert debate_partner(1, [True, True]) == 0
    assert debate_partner(0, [True, False]) is None


def test_two_broadcasters_lower_index_is_read_by_higher():
    g = induce_graph([BCAST, BCAST, SOLO])
    assert (0, 1) in g.edges and (1, 0) not in g.edges
    assert g.dropped == ((1, 0),)
    assert_valid(g, 3, [True] * 3)


def test_everyone_aggregates_cycle_broken_by_index_order():
    n = 4
    g = induce_graph([AGG] * n)
    assert g.edges == [(s, d) for s in range(n) for d in range(n) if s < d]
    assert set(g.dropped) == {(s, d) for s in range(n) for d in range(n) if s > d}
    assert g.layers == ((0,), (1,), (2,), (3,))
    assert_valid(g, n, [True] * n)


def test_aggregator_reads_every_producer_even_against_broadcast():
    # 0 aggregates (rank 3), 1 broadcasts (rank 0): 1 -> 0 is kept, 0 -> ... never asked.
    g = induce_graph([AGG, BCAST, QUERY])
    assert (1, 0) in g.edges and (2, 0) in g.edges
    # 2 queries its next agent (0) in round one, but 0 already reads 2: that edge is dropped.
    assert g.dropped == ((0, 2),)
    assert_valid(g, 3, [True] * 3)


def test_query_cycle_ring_drops_one_edge():
    # Everyone queries the next agent: the ring 1->0, 2->1, 0->2 is a cycle.
    g = induce_graph([QUERY, QUERY, QUERY])
    assert sorted(g.edges + list(g.dropped)) == [(0, 2), (1, 0), (2, 1)]
    assert len(g.dropped) == 1
    assert_valid(g, 3, [True] * 3)


def test_failed_agents_send_and_receive_nothing():
    alive = [True, False, True, True]
    g = induce_graph([BCAST, BCAST, AGG, DEBATE], alive=alive)
    assert all(1 not in e for e in g.edges + list(g.dropped))
    assert (0, 2) in g.edges and (0, 3) in g.edges and (3, 2) in g.edges
    # 3's partner (2) is live, so they debate; 2 aggregates (rank 3) so 3 -> 2 wins.
    assert (2, 3) in g.dropped
    assert_valid(g, 4, alive)
    assert all(1 not in layer for layer in g.layers)


def test_all_failed_gives_empty_graph():
    g = induce_graph([BCAST, AGG], alive=[False, False])
    assert g.edges == [] and g.layers == ()


@pytest.mark.parametrize("bad", [[0, 6], [-1, 0], [0, 99]])
def test_invalid_action_ids_raise(bad):
    with pytest.raises(ValueError, match="not one of 0..5"):
        induce_graph(bad)


def test_length_mismatches_raise():
    with pytest.raises(ValueError, match="alive"):
        induce_graph([0, 1], alive=[True])
    with pytest.raises(ValueError, match="confidence"):
        induce_graph([0, 1], confidence=[0.5])


def test_every_combination_of_three_agents_is_a_valid_dag():
    """Exhaustive over 6^3 actions x 8 alive masks x first round / later round."""
    conf = [0.3, 0.9, 0.5]
    for actions in itertools.product(range(N_ACTIONS), repeat=3):
        for alive in itertools.product([True, False], repeat=3):
            for c in (None, conf):
                g = induce_graph(actions, list(alive), c)
                assert_valid(g, 3, list(alive))
                asked = set(requested_edges(actions, list(alive), c))
                assert set(g.edges) | set(g.dropped) == asked
                assert not set(g.edges) & set(g.dropped)


def test_random_larger_teams_are_valid_dags_and_deterministic():
    rng = random.Random(7)
    for _ in range(200):
        n = rng.randint(2, 9)
        actions = [rng.randrange(N_ACTIONS) for _ in range(n)]
        alive = [rng.random() > 0.2 for _ in range(n)]
        conf = [rng.random() for _ in range(n)] if rng.random() < 0.5 else None
        g = induce_graph(actions, alive, conf)
        assert_valid(g, n, alive)
        # A dropped edge is dropped only because it would have closed a cycle.
        kept = set(g.edges)
        for s, d in g.dropped:
            assert reaches(kept, d, s)
        again = induce_graph(actions, alive, conf)
        assert again.edges == g.edges and again.dropped == g.dropped and again.layers == g.layers


def reaches(edges: set[tuple[int, int]], start: int, goal: int) -> bool:
    frontier, seen = [start], {start}
    while frontier:
        u = frontier.pop()
        if u == goal:
            return True
        for s, d in edges:
            if s == u and d not in seen:
                seen.add(d)
                frontier.append(d)
    return False


def reference_resolve(edges, actions, alive):
    """The cycle rule of docs/actions.md written plainly: rank order, forward edges kept,
    backward edges tried in (rank dst, dst, rank src, src) order with a fresh search each."""
    rank = {
        BCAST: 0,
        SOLO: 1,
        EXEC: 1,
        QUERY: 2,
        DEBATE: 2,
        AGG: 3,
    }
    n = len(actions)
    order = sorted(range(n), key=lambda i: (rank[Action(actions[i])], i))
    pos = {a: k for k, a in enumerate(order)}
    live = sorted({(s, d) for s, d in edges if alive[s] and alive[d] and s != d})
    kept = [e for e in live if pos[e[0]] < pos[e[1]]]
    backward = sorted(
        (e for e in live if pos[e[0]] > pos[e[1]]),
        key=lambda e: (rank[Action(actions[e[1]])], e[1], rank[Action(actions[e[0]])], e[0]),
    )
    dropped = []
    for s, d in backward:
        if reaches(set(kept), d, s):
            dropped.append((s, d))
        else:
            kept.append((s, d))
    return sorted(kept), dropped, order


@pytest.mark.parametrize("n", [3, 5, 8, 17, 33])
def test_cycle_breaking_equals_the_rule_written_plainly(n):
    """The bit-set reachability (and the cache) decide exactly as a fresh search per edge."""
    rng = random.Random(n)
    for _ in range(60 if n < 20 else 8):
        actions = [rng.randrange(N_ACTIONS) for _ in range(n)]
        alive = [rng.random() > 0.15 for _ in range(n)]
        conf = [rng.random() for _ in range(n)] if rng.random() < 0.5 else None
        edges = requested_edges(actions, alive, conf)
        # Arbitrary extra edges too, as a fixed topology may ask for (both directions).
        edges += [(rng.randrange(n), rng.randrange(n)) for _ in range(n)]
        kept, dropped, order = reference_resolve(edges, actions, alive)
        for _ in range(2):  # the second call is answered by the cache
            g = resolve_edges(edges, actions, alive)
            assert list(g.kept) == kept and list(g.dropped) == dropped
            assert list(g.order) == order
            assert_valid(g, n, alive)
