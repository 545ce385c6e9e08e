"""Each method as its released code does it (docs/baselines.md, the tables per method):
pruning schedules, AgentDropout's closeness term, G-Designer's per-query graphs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from core.baselines.edges import steps_due
from core.baselines.method import TeamShape
from core.baselines.registry import build_method, method_config
from core.baselines.training import BaselineTrainConfig, train_method
from core.team.embedding import make_embedder
from core.team.observations import task_feature_width
from tests.core.baselines.family import expert_team


def shape_of(team, rounds: int = 1) -> TeamShape:
    width = task_feature_width(team.obs_dim, 4, rounds)
    return TeamShape(4, rounds, width, tuple(team.opts.roles))


def test_steps_are_spread_over_the_budget_the_last_at_its_end():
    # AgentPrune's released schedule (10 iterations, pruning every 5) is two steps.
    assert [steps_due(d, 10, 2) for d in range(11)] == [0] * 5 + [1] * 6
    assert [steps_due(d, 9, 3) for d in (0, 2, 3, 5, 6, 9)] == [0, 0, 1, 1, 2, 2]
    assert all(steps_due(d, 10, 1) == 0 for d in range(11))  # one-shot: only at the end


def test_agentprune_prunes_a_quarter_of_the_remaining_edges_twice():
    team = expert_team()
    try:
        method = build_method("agentprune", method_config("agentprune"), shape_of(team))
        state = train_method(
            team.vectorized, method, BaselineTrainConfig(episodes=64, n_envs=16, seed=0)
        )
    finally:
        team.close()
    pruned = [s for s in state.stages if s.what == "pruned"]
    # Half way (before the batch that starts at episode 32), then at the end.
    assert [s.episode for s in pruned] == [32, 64]
    # 12 spatial and 12 temporal candidate edges on 4 agents... one round: temporal none.
    assert [s.detail["edges_before"]["spatial"] for s in pruned] == [12, 9]
    assert [s.detail["edges_after"]["spatial"] for s in pruned] == [9, 7]
    assert bool(method.pruned) and not method.trainable
    # The paper's reading: one step at the end.
    oneshot = method_config("agentprune", {"prune_steps": 1, "prune_ratio": 0.5})
    assert oneshot.prune_steps == 1 and method.config.rank_weight == 0.0


def test_agentdropout_closeness_term_pulls_towards_the_full_graph():
    """Step 2's released closeness term: its gradient raises every edge probability when the
    matrices are further than δ from the full graph; with weight 0 (and no rank term) the
    regulariser is nothing."""
    team = expert_team(rounds=2)
    try:
        shape = shape_of(team, rounds=2)
    finally:
        team.close()
    on = build_method("agentdropout", method_config("agentdropout", {"rank_weight": 0}), shape)
    on.drop_nodes(0)
    probs = on.graph_probs({}, 1)
    loss = on.regulariser(probs)
    loss.backward()
    supported = on.intra_support
    assert float(loss.detach()) > 0 and (on.intra_logits.grad[supported] < 0).all()
    off = build_method(
        "agentdropout", method_config("agentdropout", {"rank_weight": 0, "closeness_weight": 0}),
        shape,
    )  # fmt: skip
    off.drop_nodes(0)
    assert float(off.regulariser(off.graph_probs({}, 1))) == 0.0


def test_gdesigner_designs_a_graph_per_query():
    """Trained on the expert family with its task embedding, then shown different queries,
    its edge probabilities differ: the graph is a function of the query."""
    team = expert_team()
    try:
        torch.manual_seed(0)
        method = build_method(
            "gdesigner", method_config("gdesigner"), shape_of(team), make_embedder()
        )
        train_method(team.vectorized, method, BaselineTrainConfig(episodes=64, n_envs=16))
        texts = ["What is 2 + 3?", "Write a function that sorts a list.", "Pick A or B: sky?"]
        embed = make_embedder()
        width = method.shape.feature_width
        features = torch.zeros(len(texts), width)
        for k, text in enumerate(texts):
            features[k, : width - 6] = torch.as_tensor(embed(text))
        probs = method.edge_probs(method.context(features, False, None), len(texts))
        p = probs["spatial"].detach().numpy()
    finally:
        team.close()
    assert not np.allclose(p[0], p[1], atol=1e-4) and not np.allclose(p[1], p[2], atol=1e-4)


@pytest.mark.parametrize("anchor", ["full", "chain"])
def test_gdesigner_defaults_follow_the_released_code(anchor):
    config = method_config("gdesigner", {"anchor": anchor})
    assert method_config("gdesigner").anchor == "full"
    assert method_config("gdesigner").anchor_weight == 0.0
    assert config.anchor == anchor
