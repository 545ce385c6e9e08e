"""``bench graphs-per-query`` counts the round-0 plans a policy played: one for a fixed
topology, several for the random one, split by domain and difficulty."""

from __future__ import annotations

from benchmarks.graphs_per_query import count_graphs
from core.experiment import TeamOptions, run_policy
from core.team.topologies import make_policy


def test_a_fixed_topology_plays_one_graph_and_random_many():
    opts = TeamOptions(benchmark="mixed", seed=5000)
    records = run_policy(opts, make_policy("star"), 12, 5000)
    star = count_graphs(records)
    assert star["all"] == {
        "episodes": 12,
        "distinct": 1,
        "top_share": 1.0,
        "reward": round(sum(r.reward for r in records) / 12, 4),
        "tokens": round(sum(r.tokens for r in records) / 12, 1),
    }
    assert sum(v["episodes"] for k, v in star.items() if k.startswith("domain=")) == 12
    assert sum(v["episodes"] for k, v in star.items() if k.startswith("difficulty=")) == 12
    random = count_graphs(run_policy(opts, make_policy("random"), 12, 5000))
    assert random["all"]["distinct"] > 1 and random["all"]["top_share"] < 1.0
