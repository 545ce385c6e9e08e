"""``bench graph-headroom``: the graphs it plays, and a per-subset choice that pays only
where the best graph really depends on the subset (hand-built reward tables)."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.graph_headroom import acyclic_graphs, headroom, main, name_of, play
from core.team.options import TeamOptions


def test_every_acyclic_graph_once():
    # Labelled DAGs: 1, 3, 25, 543 on 1..4 nodes (OEIS A003024).
    assert [len(acyclic_graphs(n)) for n in (1, 2, 3)] == [1, 3, 25]
    graphs = acyclic_graphs(3)
    assert name_of(graphs[0]) == "none"
    assert len({g.tobytes() for g in graphs}) == 25
    assert not any(g[0, 1] and g[1, 0] for g in graphs)


def _run(reward: np.ndarray, domain: list[str]) -> dict[str, np.ndarray]:
    e = reward.shape[1]
    return {
        "reward": reward,
        "tokens": np.ones_like(reward),
        "domain": np.array(domain),
        "difficulty": np.ones(e, dtype=int),
        "features": np.array([[d == "math"] for d in domain], dtype=float),
    }


def test_a_per_domain_choice_gains_only_where_the_best_graph_differs():
    graphs = acyclic_graphs(2)
    assert [name_of(g) for g in graphs] == ["none", "1>0", "0>1"]
    domain = ["math"] * 4 + ["code"] * 4
    # Graph 1 is right on maths, graph 2 on code: each domain's own graph gains 0.5 there.
    differs = np.array([[0.5] * 8, [1.0] * 4 + [0.0] * 4, [0.0] * 4 + [1.0] * 4])
    out = headroom(_run(differs, domain), _run(differs, domain), graphs, resamples=50)
    assert out["single"]["reward"] == 0.5
    assert out["domain"]["choice"] == {"code": "0>1", "math": "1>0"}
    assert out["domain"]["gain_over_single"] == 0.5 and out["domain"]["distinct_graphs"] == 2
    assert out["hindsight_single"]["reward"] == 0.5 and out["domain"]["hindsight_gain"] == 0.5
    # One graph best everywhere: nothing to gain per domain.
    same = np.array([[0.5] * 8, [1.0] * 8, [0.0] * 8])
    flat = headroom(_run(same, domain), _run(same, domain), graphs, resamples=50)
    assert flat["domain"]["gain_over_single"] == 0.0 and flat["domain"]["distinct_graphs"] == 1


def test_a_fixed_graph_plays_its_edges_in_every_round():
    opts = TeamOptions(benchmark="mixed", seed=5000, actions="graph")
    chain = np.zeros((4, 4), dtype=bool)
    chain[0, 1] = chain[1, 2] = True
    run = play(opts, [np.zeros((4, 4), dtype=bool), chain], 3)
    assert run["reward"].shape == (2, 3) and len(run["domain"]) == 3
    assert (run["tokens"][1] > run["tokens"][0]).all()  # reading costs prompt tokens


def test_the_choice_is_judged_on_another_stream(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--select-seed", "7", "--seed", "7"])
    assert exc.value.code == 2
    assert "must differ" in capsys.readouterr().err
