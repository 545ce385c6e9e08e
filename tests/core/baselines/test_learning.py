"""Every method finds the known right graph of the expert family (tests/core/baselines/
family.py: only the edges out of the expert help) from a random start, on three seeds."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from core.baselines.method import TeamShape
from core.baselines.policy import GraphPolicy
from core.baselines.registry import build_method, method_config
from core.baselines.training import BaselineTrainConfig, train_method
from core.team.embedding import make_embedder
from core.team.observations import task_feature_width
from tests.core.baselines.family import GOOD, expert_team

EPISODES = 1280
FOLLOWERS = (1, 2, 3)


def trained(name: str, seed: int):
    team = expert_team(seed=seed)
    shape = TeamShape(4, 1, task_feature_width(team.obs_dim, 4, 1), tuple(team.opts.roles))
    torch.manual_seed(seed)
    values = {
        # G-Designer in the paper's reading (chain anchor, its BCE term, absolute logits):
        # the released decoder ranks each query's pairs (p in [0.27, 0.73]), so it can
        # neither reach p > 0.9 nor leave an edge out for sure (docs/baselines.md).
        "gdesigner": {"anchor": "chain", "anchor_weight": 0.01, "decoder": "bilinear"},
        # AgentDropout with step 1 as the paper states it (the policy gradient of the sampled
        # graphs): the released skip sampling raises every kept agent's edges, those into the
        # expert too, and at this budget seed 2 ends with two of them above 0.5 (skip
        # sampling's own tests: test_fidelity.py; docs/baselines.md).
        "agentdropout": {"skip_sampling": False},
    }.get(name, {})
    method = build_method(name, method_config(name, values), shape, make_embedder())
    if name != "gdesigner":  # G-Designer's network starts random by itself
        with torch.no_grad():
            for p in method.parameters():
                p.normal_(0.0, 0.5)
    state = train_method(
        team.vectorized, method, BaselineTrainConfig(episodes=EPISODES, n_envs=16, seed=seed)
    )
    return team, method, state


def probabilities(method, key: str) -> np.ndarray:
    probs = method.edge_probs(method.context(method._zero_features(), False, None), 1)
    return probs[key][0].detach().numpy()


def decoded_edges(team, method) -> set[tuple[int, int]]:
    """The round-0 spatial edges the trained method plays on a held-out task."""
    policy = GraphPolicy(method, explore=False, generator=torch.Generator().manual_seed(0))
    team.run(policy, [10_000], width=1)
    spatial, _ = policy.graphs()[0].effective(0)
    return {(int(s), int(d)) for s, d in zip(*np.nonzero(spatial), strict=True)}


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("name", ["gptswarm", "agentprune", "gdesigner"])
def test_the_edges_out_of_the_expert_are_found(name, seed):
    team, method, state = trained(name, seed)
    try:
        p = probabilities(method, "spatial")
        assert all(p[e] > 0.9 for e in GOOD), p.round(2)
        # Never into the expert: unlikely, or pruned (AgentPrune's first step, half way, takes
        # the lowest edges out of learning wherever they stood).
        support = method.supports()["spatial"].numpy()
        assert all(p[j, 0] < 0.2 or not support[j, 0] for j in FOLLOWERS), p.round(2)
        edges = decoded_edges(team, method)
        assert GOOD <= edges and not any(d == 0 for _, d in edges)
        # The last batches are right nearly always (a right team scores 1, minus tokens).
        assert np.mean([h["reward"] for h in state.history[-5:]]) > 0.1
    finally:
        team.close()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_agentdropout_keeps_the_expert_and_its_edges(seed):
    team, method, state = trained("agentdropout", seed)
    try:
        assert [s.what for s in state.stages] == ["nodes dropped", *["edges dropped"] * 2]
        active = method.active[0].numpy()
        assert active[0] and active.sum() == 3  # round(0.25 * 4) = 1 follower leaves
        p = probabilities(method, "intra")[0]
        support = method.intra_support[0].numpy()
        for j in FOLLOWERS:
            if active[j]:
                assert support[0, j] and p[0, j] > 0.9, p.round(2)
        edges = decoded_edges(team, method)
        assert {(0, j) for j in FOLLOWERS if active[j]} <= edges
        assert not any(d == 0 for _, d in edges)
    finally:
        team.close()
