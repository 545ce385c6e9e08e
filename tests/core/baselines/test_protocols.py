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
