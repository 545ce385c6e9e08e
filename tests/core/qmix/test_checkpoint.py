"""Checkpoint round trip and the errors a user can cause with a bad file."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest
import torch

from core.errors import UserError
from core.qmix.checkpoint import load_checkpoint, save_checkpoint
from core.qmix.encoders import AgentNetConfig, AgentNetwork
from core.qmix.env import EnvShapes
from core.qmix.mixers import MixerConfig, make_mixer
from tests.core.torch_threads import one_torch_thread  # noqa: F401

SHAPES = EnvShapes(n_agents=3, n_actions=4, obs_dim=5, state_dim=7, max_steps=3)
AGENT_CFG = AgentNetConfig(gnn_hidden=16, gnn_layers=2, gru_hidden=8, q_hidden=12)


def write(path: Path, kind: str = "qmix", seed: int = 0) -> tuple[AgentNetwork, torch.nn.Module]:
    torch.manual_seed(seed)
    agent = AgentNetwork(SHAPES.obs_dim, SHAPES.n_agents, SHAPES.n_actions, AGENT_CFG)
    mixer_cfg = MixerConfig(kind=kind, embed=8, hypernet_hidden=8)
    mixer = make_mixer(SHAPES.n_agents, SHAPES.state_dim, mixer_cfg)
    save_checkpoint(
        path,
        agent,
        mixer,
        SHAPES,
        AGENT_CFG,
        mixer_cfg,
        env={"spec": "core.qmix.games:relay_game"},
        meta={"episodes": 12, "seed": seed},
    )
    return agent, mixer


@pytest.mark.parametrize("kind", ["qmix", "vdn"])
def test_round_trip_same_weights_and_q_values(tmp_path, kind):
    path = tmp_path / "sub" / "model.pt"
    agent, mixer = write(path, kind)
    assert [p.name for p in path.parent.iterdir()] == ["model.pt"]  # no temporary left
    ckpt = load_checkpoint(path, expect=SHAPES)
    assert ckpt.shapes == SHAPES and ckpt.agent_config == AGENT_CFG
    assert ckpt.mixer_config.kind == kind and ckpt.mixer_config.embed == 8
    assert ckpt.env == {"spec": "core.qmix.games:relay_game"} and ckpt.meta == {
        "episodes": 12,
        "seed": 0,
    }
    for ref, got in ((agent, ckpt.agent), (mixer, ckpt.mixer)):
        a, b = ref.state_dict(), got.state_dict()
        assert a.keys() == b.keys()
        assert all(torch.equal(a[k], b[k]) for k in a)
    assert not ckpt.agent.training
    g = torch.Generator().manual_seed(5)
    obs = torch.randn(2, 3, 3, 5, generator=g)
    adj = (torch.rand(2, 3, 3, 3, generator=g) < 0.5).float()
    last = torch.randint(-1, 4, (2, 3, 3), generator=g)
    states = torch.randn(2, 3, 7, generator=g)
    with torch.no_grad():
        q_ref, q_got = (
            agent.forward_sequence(obs, adj, last),
            ckpt.agent.forward_sequence(obs, adj, last),
        )
        assert torch.equal(q_ref, q_got)
        chosen = q_ref.max(-1).values
        assert torch.equal(mixer(chosen, states), ckpt.mixer(chosen, states))


def test_a_different_episode_length_still_fits(tmp_path):
    write(tmp_path / "m.pt")
    longer = EnvShapes(**{**SHAPES.as_dict(), "max_steps": 9})
    assert load_checkpoint(tmp_path / "m.pt", expect=longer).shapes == SHAPES


@pytest.mark.parametrize(
    ("field", "value"), [("n_agents", 4), ("n_actions", 6), ("obs_dim", 2), ("state_dim", 8)]
)
def test_mismatched_shapes_name_the_difference(tmp_path, field, value):
    write(tmp_path / "m.pt")
    other = EnvShapes(**{**SHAPES.as_dict(), field: value})
    with pytest.raises(UserError, match=rf"does not fit this environment \({field} "):
        load_checkpoint(tmp_path / "m.pt", expect=other)


def test_missing_file(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        load_checkpoint(tmp_path / "nope.pt")


def test_random_bytes_are_not_a_checkpoint(tmp_path):
    path = tmp_path / "junk.pt"
    path.write_bytes(bytes(range(256)) * 40)
    with pytest.raises(UserError, match="not a readable agentqmix checkpoint"):
        load_checkpoint(path)


def test_truncated_checkpoint(tmp_path):
    path = tmp_path / "m.pt"
    write(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(UserError, match="not a readable agentqmix checkpoint"):
        load_checkpoint(path)


def test_other_torch_files_are_refused(tmp_path):
    path = tmp_path / "weights.pt"
    torch.save({"weight": torch.zeros(3)}, path)
    with pytest.raises(UserError, match="is not an agentqmix checkpoint"):
        load_checkpoint(path)
    torch.save(torch.zeros(3), path)
    with pytest.raises(UserError, match="is not an agentqmix checkpoint"):
        load_checkpoint(path)


Pickled = collections.namedtuple("Pickled", "x")


def test_arbitrary_pickles_are_never_unpickled(tmp_path):
    """weights_only=True: a file holding a Python object is refused, not executed."""
    path = tmp_path / "evil.pt"
    torch.save({"format": "agentqmix-checkpoint", "payload": Pickled(1)}, path)
    with pytest.raises(UserError, match="not a readable agentqmix checkpoint"):
        load_checkpoint(path)


def test_wrong_version_and_weights_that_do_not_fit_their_config(tmp_path):
    path = tmp_path / "m.pt"
    write(path)
    payload = torch.load(path, weights_only=True)
    torch.save({**payload, "version": 99}, path)
    with pytest.raises(UserError, match="format version 99"):
        load_checkpoint(path)
    payload["agent_config"]["gnn_hidden"] = 32  # config says 32, the weights are 16 wide
    torch.save(payload, path)
    with pytest.raises(UserError, match="do not match its own configuration"):
        load_checkpoint(path)


@pytest.mark.parametrize("drop", ["shapes", "agent_config", "mixer", "meta"])
def test_checkpoint_missing_a_part_is_a_user_error(tmp_path, drop):
    path = tmp_path / "m.pt"
    write(path)
    payload = torch.load(path, weights_only=True)
    del payload[drop]
    torch.save(payload, path)
    with pytest.raises(UserError, match="incomplete"):
        load_checkpoint(path)
