"""The agent network: batched graphs, batched == per-sample, information flow along edges."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F
from torch_geometric.nn import GraphConv as PyGGraphConv

from core.qmix.encoders import (
    AgentNetConfig,
    AgentNetwork,
    GraphConv,
    adjacency_to_edge_index,
    mean_aggregator,
)
from tests.core.torch_threads import one_torch_thread  # noqa: F401

OBS, N, A = 5, 4, 6


def make_net(seed: int = 0, **kw) -> AgentNetwork:
    torch.manual_seed(seed)
    cfg = AgentNetConfig(gnn_hidden=16, gnn_layers=2, gru_hidden=12, q_hidden=10, **kw)
    return AgentNetwork(OBS, N, A, cfg).eval()


def random_inputs(b: int, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(b, N, OBS, generator=g)
    adj = (torch.rand(b, N, N, generator=g) < 0.5).float() * (1 - torch.eye(N))
    last = torch.randint(-1, A, (b, N), generator=g)
    hidden = torch.randn(b, N, 12, generator=g)
    return obs, adj, last, hidden


def test_adjacency_to_edge_index_hand_built_graphs():
    adj = torch.zeros(2, 4, 4)
    adj[0, 0, 1] = adj[0, 2, 3] = 1  # episode 0: 0->1, 2->3
    adj[1, 3, 0] = 1  # episode 1: 3->0, i.e. nodes 7->4
    adj[1, 1, 2] = 1  # episode 1: 1->2, i.e. nodes 5->6
    ei = adjacency_to_edge_index(adj)
    assert ei.shape == (2, 4) and ei.dtype == torch.long
    assert ei.tolist() == [[0, 2, 5, 7], [1, 3, 6, 4]]


def test_adjacency_to_edge_index_empty_and_full():
    assert adjacency_to_edge_index(torch.zeros(3, 4, 4)).shape == (2, 0)
    full = 1 - torch.eye(4)
    ei = adjacency_to_edge_index(full.expand(3, 4, 4))
    assert ei.shape == (2, 3 * 12)
    # Every edge stays inside its own episode's block of 4 nodes.
    assert torch.equal(ei[0] // 4, ei[1] // 4)
    assert torch.bincount(ei[0] // 4).tolist() == [12, 12, 12]


def test_embed_matches_pyg_graphconv_over_edge_index():
    """The dense mean aggregator gives what PyG's own GraphConv(aggr="mean") gives over the
    edge index, with the very same parameters loaded into it."""
    net = make_net()
    obs, adj, last, _ = random_inputs(6)
    with torch.no_grad():
        got = net.embed(obs, adj, last)
        x = F.relu(net.input(net.build_inputs(obs, last))).reshape(6 * N, -1)
        ei = adjacency_to_edge_index(adj)
        for conv in net.convs:
            pyg = PyGGraphConv(16, 16, aggr="mean")
            pyg.load_state_dict(conv.state_dict())
            x = F.relu(pyg(x, ei))
    assert got.shape == (6 * N, 16)
    torch.testing.assert_close(got, x, rtol=1e-5, atol=1e-6)


def test_graphconv_parameters_are_pygs():
    """Same parameter names and shapes as PyG's GraphConv (checkpoints load either way), and
    the same initial range (uniform within 1/sqrt(fan_in))."""
    ours, pyg = GraphConv(16, 8), PyGGraphConv(16, 8, aggr="mean")
    shapes = {k: v.shape for k, v in ours.state_dict().items()}
    assert shapes == {k: v.shape for k, v in pyg.state_dict().items()}
    assert set(shapes) == {"lin_rel.weight", "lin_rel.bias", "lin_root.weight"}
    for module in (ours, pyg):
        for p in module.parameters():
            assert 0.5 / 4 < float(p.abs().max()) <= 1 / 4  # 1/sqrt(16)


def test_batched_forward_equals_per_sample_forward():
    net = make_net()
    b = 7
    obs, adj, last, hidden = random_inputs(b)
    with torch.no_grad():
        q, h = net(obs, adj, last, hidden)
        assert q.shape == (b, N, A) and h.shape == (b, N, 12)
        for i in range(b):
            qi, hi = net(obs[i : i + 1], adj[i : i + 1], last[i : i + 1], hidden[i : i + 1])
            torch.testing.assert_close(q[i : i + 1], qi, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(h[i : i + 1], hi, rtol=1e-5, atol=1e-6)


def test_forward_sequence_equals_stepping_round_by_round():
    net = make_net()
    b, t = 4, 5
    g = torch.Generator().manual_seed(3)
    obs = torch.randn(b, t, N, OBS, generator=g)
    adj = (torch.rand(b, t, N, N, generator=g) < 0.4).float() * (1 - torch.eye(N))
    last = torch.randint(0, A, (b, t, N), generator=g)
    last[:, 0] = -1
    with torch.no_grad():
        seq = net.forward_sequence(obs, adj, last)
        assert seq.shape == (b, t, N, A)
        h = net.initial_hidden(b)
        for step in range(t):
            q, h = net(obs[:, step], adj[:, step], last[:, step], h)
            torch.testing.assert_close(seq[:, step], q, rtol=1e-5, atol=1e-6)
        # And one episode alone gives the same Q-values as inside the batch.
        alone = net.forward_sequence(obs[2:3], adj[2:3], last[2:3])
        torch.testing.assert_close(seq[2:3], alone, rtol=1e-5, atol=1e-6)


def test_information_flows_only_along_edges():
    net = make_net()
    obs, _, last, hidden = random_inputs(2)
    adj = torch.zeros(2, N, N)
    adj[:, 0, 1] = 1  # 1 reads 0; 2 and 3 read nobody
    adj[:, 1, 3] = 1  # 3 reads 1 (so it hears 0 at two hops)
    changed = obs.clone()
    changed[0, 0] += 3.0  # change agent 0's observation in episode 0 only
    with torch.no_grad():
        q0, _ = net(obs, adj, last, hidden)
        q1, _ = net(changed, adj, last, hidden)
    diff = (q1 - q0).abs().amax(-1)  # (B, N)
    assert diff[0, 0] > 1e-4, "an agent's own observation matters"
    assert diff[0, 1] > 1e-4, "the reader of agent 0 must see the change"
    assert diff[0, 3] > 1e-4, "two layers of message passing reach two hops"
    assert diff[0, 2] == 0, "a non-reader must not see the change"
    assert diff[1].max() == 0, "another episode of the batch must not see the change"


def test_edge_direction_matters():
    """src -> dst means dst reads src: the sender does not hear its reader."""
    net = make_net()
    obs, _, last, hidden = random_inputs(1)
    adj = torch.zeros(1, N, N)
    adj[0, 0, 1] = 1
    changed = obs.clone()
    changed[0, 1] -= 2.0
    with torch.no_grad():
        q0, _ = net(obs, adj, last, hidden)
        q1, _ = net(changed, adj, last, hidden)
    assert torch.equal(q0[0, 0], q1[0, 0])
    assert not torch.equal(q0[0, 1], q1[0, 1])


def test_agent_id_breaks_symmetry_between_shared_weights():
    obs = torch.ones(1, N, OBS)
    adj = torch.zeros(1, N, N)
    last = torch.full((1, N), -1)
    with torch.no_grad():
        q_id, _ = make_net(agent_id=True)(obs, adj, last, torch.zeros(1, N, 12))
        q_no, _ = make_net(agent_id=False)(obs, adj, last, torch.zeros(1, N, 12))
    assert (q_id[0, 0] - q_id[0, 1]).abs().max() > 1e-5
    for i in range(1, N):
        torch.testing.assert_close(q_no[0, 0], q_no[0, i])


def test_build_inputs_one_hots():
    net = make_net()
    obs = torch.zeros(2, N, OBS)
    last = torch.tensor([[-1, 0, 5, 2], [1, 1, -1, -1]])
    x = net.build_inputs(obs, last)
    assert x.shape == (2, N, OBS + N + A)
    assert torch.equal(x[0, :, OBS : OBS + N], torch.eye(N))
    acts = x[..., OBS + N :]
    assert acts[0, 0].sum() == 0 and acts[1, 2].sum() == 0 and acts[1, 3].sum() == 0
    assert acts[0, 2, 5] == 1 and acts[0, 2].sum() == 1 and acts[1, 0, 1] == 1


def test_default_sizes_and_validation():
    cfg = AgentNetConfig()
    assert (cfg.gnn_hidden, cfg.gnn_layers, cfg.gru_hidden) == (128, 2, 128)
    with pytest.raises(ValueError, match="gnn_hidden"):
        AgentNetConfig(gnn_hidden=0).validate()
    with pytest.raises(ValueError, match="gnn_layers"):
        AgentNetConfig(gnn_layers=-1).validate()


def test_mean_aggregator_hand_built_graph():
    adj = torch.zeros(1, 4, 4)
    adj[0, 0, 2] = adj[0, 1, 2] = adj[0, 3, 2] = 1  # 2 reads 0, 1 and 3
    adj[0, 2, 3] = 1  # 3 reads 2
    p = mean_aggregator(adj)
    want = torch.zeros(1, 4, 4)
    want[0, 2, [0, 1, 3]] = 1 / 3
    want[0, 3, 2] = 1.0
    assert torch.equal(p, want)  # 0 and 1 read nobody: rows of zeros
    x = torch.arange(4.0).view(1, 4, 1)
    assert torch.bmm(p, x).flatten().tolist() == pytest.approx([0, 0, 4 / 3, 2])


@pytest.mark.parametrize(("agent_id", "last_action"), [(True, True), (False, True), (True, False)])
def test_project_equals_the_input_layer_on_the_one_hots(agent_id, last_action):
    net = make_net(agent_id=agent_id, last_action=last_action)
    obs, _, last, _ = random_inputs(5)
    last[0] = -1
    with torch.no_grad():
        want = net.input(net.build_inputs(obs, last))
        torch.testing.assert_close(net.project(obs, last), want, rtol=1e-5, atol=1e-6)


def test_grad_rounds_changes_no_value_and_no_gradient_of_the_recorded_rounds():
    net = make_net().train()
    b, t = 3, 4
    g = torch.Generator().manual_seed(5)
    obs = torch.randn(b, t, N, OBS, generator=g)
    adj = (torch.rand(b, t, N, N, generator=g) < 0.5).float() * (1 - torch.eye(N))
    last = torch.randint(-1, A, (b, t, N), generator=g)
    full = net.forward_sequence(obs, adj, last)
    full[:, : t - 1].square().sum().backward()
    want = [p.grad.clone() for p in net.parameters()]
    net.zero_grad(set_to_none=True)
    part = net.forward_sequence(obs, adj, last, grad_rounds=t - 1)
    torch.testing.assert_close(part, full, rtol=1e-6, atol=1e-7)
    part[:, : t - 1].square().sum().backward()
    for p, w in zip(net.parameters(), want, strict=True):
        torch.testing.assert_close(p.grad, w, rtol=1e-5, atol=1e-7)
    # The last round is computed, but off the autograd tape: nothing flows back from it.
    part = net.forward_sequence(obs, adj, last, grad_rounds=t - 1)
    back = torch.autograd.grad(part[:, t - 1].sum(), list(net.parameters()), allow_unused=True)
    assert all(g is None or not g.any() for g in back)
