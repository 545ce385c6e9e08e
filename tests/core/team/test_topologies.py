"""Each fixed topology's graph, run through the real runtime."""

from __future__ import annotations

import pytest

from core.errors import UserError
from core.team.env import TeamEnv
from core.team.failures import FailureSpec
from core.team.options import TeamOptions
from core.team.topologies import FIXED_TOPOLOGIES, make_policy
from tests.core.team.test_runtime import _Source

EXPECTED = {
    "chain": ([(0, 1), (1, 2), (2, 3)], []),
    "star": ([(1, 0), (2, 0), (3, 0)], []),
    "ring": ([(0, 1), (1, 2), (2, 3)], [(3, 0)]),
    "full": (
        [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)],
        [(1, 0), (2, 0), (2, 1), (3, 0), (3, 1), (3, 2)],
    ),
    "debate": ([(0, 1), (2, 3)], [(1, 0), (3, 2)]),
}


@pytest.fixture(scope="module")
def env():
    env = TeamEnv(TeamOptions(benchmark="hand"), source=_Source())
    yield env
    env.close()


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixed_graph(env, name):
    record = env.run(make_policy(name), [0])[0]
    edges, dropped = EXPECTED[name]
    for r in record.rounds:
        assert r.edges == edges
        assert sorted(r.dropped_edges) == sorted(dropped)
    assert record.policy == name
    assert len(record.calls) == 4 * 3 + 1


def test_single_is_one_call_by_the_first_healthy_agent(env):
    record = env.run(make_policy("single"), [1])[0]
    assert len(record.calls) == 1 and record.calls[0].agent == 0 and record.calls[0].round == 0
    assert all(r.edges == [] for r in record.rounds)
    crashed = env.run(make_policy("single"), [1], failures=[FailureSpec(0, "crash", 0)])[0]
    assert [c.agent for c in crashed.calls] == [1]
    assert crashed.team_answer is not None


def test_random_is_seeded_and_varied(env):
    a = env.run(make_policy("random"), range(6))
    b = env.run(make_policy("random"), range(6))
    actions = [[s.action for s in r.steps] for rec in a for r in rec.rounds]
    assert actions == [[s.action for s in r.steps] for rec in b for r in rec.rounds]
    assert len({a for row in actions for a in row}) == 6


def test_registry_and_unknown_name():
    assert set(FIXED_TOPOLOGIES) == {"single", "chain", "star", "ring", "full", "debate", "random"}
    with pytest.raises(UserError, match="Unknown topology"):
        make_policy("hypercube")
