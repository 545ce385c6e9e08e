"""The two protocols of the methods contest (docs/baselines.md, "Protocols"): the
graph-only action set never verifies — in training, in evaluation, whatever set the
evaluating team allows — and the with-tools graph methods learn a verify bit per node."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from core.actions import Action
from core.cli import main
from core.experiment.evaluate import learned_policy, run_policy
from core.qmix.checkpoint import read_payload
from core.team.options import TeamOptions
from core.team.summary import action_counts
from core.team.topologies import make_policy

VERIFY = Action.EXECUTE_VERIFY.label


def verifies(records: list) -> int:
    return sum(r[VERIFY] for r in action_counts(records))


def test_graph_only_qmix_never_verifies(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    ckpt = tmp_path / "graph.pt"
    code = main(
        ["train", "--benchmark", "code", "--actions", "graph", "--episodes", "16"]
        + ["--n-envs", "8", "--hidden", "16", "--eval-episodes", "4", "--out", str(ckpt)]
        + ["--no-log", "--json"]
    )
    out = capsys.readouterr()
    assert code == 0, out.err[-2000:]
    assert json.loads(out.out)["episodes"] == 16
    # The checkpoint carries the set, and evaluation on a team that allows all six actions
    # still never verifies: the policy masks by the set it was trained with.
    assert read_payload(ckpt)["env"]["team"]["actions"] == "graph"
    opts = TeamOptions(benchmark="code", seed=3)
    records = run_policy(opts, learned_policy(ckpt, opts), 24, 3)
    assert verifies(records) == 0
    # ... while the random policy on the same team does verify, and on the graph set not.
    assert verifies(run_policy(opts, make_policy("random"), 24, 3)) > 0
    graph = TeamOptions(benchmark="code", seed=3, actions="graph")
    assert verifies(run_policy(graph, make_policy("random"), 24, 3)) == 0


def test_unknown_action_set_is_one_sentence(capsys: pytest.CaptureFixture) -> None:
    code = main(["eval", "--policy", "full", "--actions", "tools", "--episodes", "1"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and "--actions must be one of all, graph" in err


def test_graph_set_keeps_solo_for_silent_agents() -> None:
    from core.actions import action_mask

    mask = torch.tensor(action_mask("graph"))
    assert mask.sum() == 5 and not mask[int(Action.EXECUTE_VERIFY)]
    assert mask[int(Action.SOLO_PROCESS)] and mask[int(Action.DEBATE_CHECK)]


@pytest.mark.parametrize("name", ["gptswarm", "gdesigner"])
def test_with_tools_the_verify_bit_is_learned(name: str) -> None:
    """On the with-tools family the method learns that agent 0 verifies, nobody else does,
    and no edge pays: the verify bits move by the same REINFORCE step as the edges."""
    import numpy as np

    from core.baselines.method import VERIFY, TeamShape
    from core.baselines.policy import GraphPolicy
    from core.baselines.registry import build_method, method_config
    from core.baselines.training import BaselineTrainConfig, train_method
    from core.team.embedding import make_embedder
    from core.team.observations import task_feature_width
    from tests.core.baselines.family import tool_team

    team = tool_team()
    shape = TeamShape(4, 1, task_feature_width(team.obs_dim, 4, 1), tuple(team.opts.roles))
    torch.manual_seed(0)
    # G-Designer in the paper's reading (chain anchor, absolute logits — the released decoder
    # ranks each query's pairs, so it cannot play "no edge"): see test_learning.py.
    paper = {"anchor": "chain", "anchor_weight": 0.01, "decoder": "bilinear"}
    values = paper if name == "gdesigner" else {}
    config = method_config(name, {"tools": True, **values})
    method = build_method(name, config, shape, make_embedder())
    state = train_method(
        team.vectorized, method, BaselineTrainConfig(episodes=1280, n_envs=16, seed=0)
    )
    probs = method.edge_probs(method.context(method._zero_features(), False, None), 1)
    verify, spatial = probs[VERIFY][0, 0].detach().numpy(), probs["spatial"][0].detach().numpy()
    assert verify[0] > 0.9 and (verify[1:] < 0.2).all(), verify.round(2)
    # Edges into the followers only cost: below 0.5 (those into agent 0 are dropped while it
    # verifies, so they cost nothing and learn nothing).
    assert (spatial[:, 1:][~np.eye(4, dtype=bool)[:, 1:]] < 0.5).all(), spatial.round(2)
    policy = GraphPolicy(method, explore=False)
    records = team.run(policy, [10_000], width=1)
    assert not policy.graphs()[0].effective(0)[0].any()
    assert records[0].rounds[0].steps[0].action == int(Action.EXECUTE_VERIFY)
    assert records[0].score == 1.0
    assert 0.5 < state.history[-1]["verifying_agents"] < 2.0


def test_tools_on_the_graph_set_is_one_sentence(capsys: pytest.CaptureFixture, tmp_path) -> None:
    code = main(
        ["train", "--benchmark", "math", "--method", "gptswarm", "--set", "tools=true"]
        + ["--actions", "graph"]
        + ["--episodes", "4", "--out", str(tmp_path / "m.pt"), "--no-log"]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and "--actions graph forbids" in err
