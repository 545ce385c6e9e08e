"""The topology-aware agent network: GNN over the round graph -> GRUCell -> Q-head.

All agents of all episodes in a batch are nodes of one batched graph: ``(B, N, F)``
is flattened to ``(B*N, F)`` and each episode's edges are offset by ``b * N``.
Weights are shared across agents; the agent id (and the last action) are inputs.

The message passing is PyG's ``GraphConv(aggr="mean")`` (same parameters, same names, so
checkpoints load either way) on a dense mean-aggregation matrix per graph: graphs are
small, so one batched dense matmul beats a sparse one, and PyG itself (3 s to import) is
left to the tests, which check this layer against it.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from core.qmix.config import AgentNetConfig


def adjacency_to_edge_index(adj: torch.Tensor) -> torch.Tensor:
    """Batched adjacency to the edge index of one batched graph.

    Args:
        adj: ``(B, N, N)`` with ``adj[b, src, dst] != 0`` for an edge src -> dst.

    Returns:
        ``(2, |E|)`` long: node ``b * N + i`` is agent ``i`` of episode ``b``.
    """
    n = adj.shape[-1]
    b, src, dst = (adj != 0).nonzero(as_tuple=True)
    return torch.stack((b * n + src, b * n + dst))


def mean_aggregator(adj: torch.Tensor) -> torch.Tensor:
    """The mean over each node's in-neighbours, as one batched matrix.

    Args:
        adj: ``(M, N, N)`` with ``adj[m, src, dst] != 0`` for an edge src -> dst.

    Returns:
        ``(M, N, N)`` float32 ``P`` with ``P[m, dst, src] = 1 / in-degree(dst)`` (a row of
        zeros for a node nobody sends to), so ``P @ x`` is PyG's ``aggr="mean"`` over the
        in-edges of every node of every graph. Build it once per batch: it depends on the
        graphs only, not on the network's weights.
    """
    a = (adj != 0).transpose(-1, -2).to(torch.float32)
    return a / a.sum(-1, keepdim=True).clamp(min=1.0)


class GraphConv(nn.Module):
    """PyG's ``GraphConv`` with mean aggregation: ``x_i' = W_rel · mean_{j -> i} x_j + b +
    W_root · x_i`` (a node nobody sends to gets ``b + W_root · x_i``).

    ``forward(x, mean)``: ``x (M, N, H)``, ``mean (M, N, N)`` from :func:`mean_aggregator`
    -> ``(M, N, H_out)``.
    """

    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        self.lin_rel = nn.Linear(in_dim, out_dim)
        self.lin_root = nn.Linear(in_dim, out_dim, bias=False)

    def forward(self, x: torch.Tensor, mean: torch.Tensor) -> torch.Tensor:
        return self.lin_rel(torch.bmm(mean, x)) + self.lin_root(x)


class AgentNetwork(nn.Module):
    """One shared Q-network for every agent.

    ``forward(obs, adj, last_action, hidden) -> (q, hidden)``.
    """

    def __init__(self, obs_dim: int, n_agents: int, n_actions: int, config: AgentNetConfig):
        super().__init__()
        config.validate()
        self.config, self.n_agents, self.n_actions = config, n_agents, n_actions
        in_dim = obs_dim + (n_agents if config.agent_id else 0)
        in_dim += n_actions if config.last_action else 0
        self.input = nn.Linear(in_dim, config.gnn_hidden)
        self.convs = nn.ModuleList(
            GraphConv(config.gnn_hidden, config.gnn_hidden) for _ in range(config.gnn_layers)
        )
        self.gru = nn.GRUCell(config.gnn_hidden, config.gru_hidden)
        self.q_head = nn.Sequential(
            nn.Linear(config.gru_hidden, config.q_hidden),
            nn.ReLU(),
            nn.Linear(config.q_hidden, n_actions),
        )
        self.register_buffer("eye", torch.eye(n_agents), persistent=False)

    def initial_hidden(self, batch: int, device: torch.device | None = None) -> torch.Tensor:
        """``(B, N, gru_hidden)`` zeros."""
        return torch.zeros(batch, self.n_agents, self.config.gru_hidden, device=device)

    def build_inputs(self, obs: torch.Tensor, last_action: torch.Tensor | None) -> torch.Tensor:
        """``obs (B, N, obs_dim)``, ``last_action (B, N)`` long or -1 -> ``(B, N, in_dim)``."""
        b = obs.shape[0]
        parts = [obs]
        if self.config.agent_id:
            parts.append(self.eye.unsqueeze(0).expand(b, -1, -1))
        if self.config.last_action:
            onehot = torch.zeros(*obs.shape[:2], self.n_actions, device=obs.device)
            if last_action is not None:
                valid = last_action >= 0
                onehot[valid] = F.one_hot(last_action[valid], self.n_actions).float()
            parts.append(onehot)
        return torch.cat(parts, dim=-1)

    def project(self, obs: torch.Tensor, last_action: torch.Tensor | None) -> torch.Tensor:
        """``self.input(self.build_inputs(obs, last_action))`` without building the one-hots.

        The one-hot columns of the input weight are looked up instead of multiplied: the
        agent-id columns are added per agent, the last-action columns per chosen action.
        Shapes: obs ``(M, N, obs_dim)``, last_action ``(M, N)`` long, -1 = none -> ``(M, N, H)``.
        """
        w, d, n = self.input.weight, obs.shape[-1], self.n_agents  # w: (H, in_dim)
        x = F.linear(obs, w[:, :d], self.input.bias)  # (M, N, H)
        if self.config.agent_id:
            x = x + w[:, d : d + n].t()  # (N, H), agent i's column for every episode
            d += n
        if self.config.last_action and last_action is not None:
            # Row 0 of the table is "no previous action" (zeros); action a is row a + 1.
            table = F.pad(w[:, d : d + self.n_actions].t(), (0, 0, 1, 0))  # (A + 1, H)
            x = x + F.embedding(last_action + 1, table)
        return x

    def embed(
        self,
        obs: torch.Tensor,
        adj: torch.Tensor,
        last_action: torch.Tensor | None,
        aggregator: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Input projection + message passing; independent of the GRU, so any batch of rounds.

        Shapes: obs ``(M, N, obs_dim)``, adj ``(M, N, N)``, last_action ``(M, N)`` -> ``(M*N, H)``.
        ``aggregator`` is :func:`mean_aggregator` of ``adj`` when the caller has it already
        (the learner builds it once per batch for the online and the target network).
        """
        m, n, _ = obs.shape
        x = F.relu(self.project(obs, last_action))  # (M, N, H)
        mean = mean_aggregator(adj) if aggregator is None else aggregator  # (M, N, N)
        for conv in self.convs:
            # The mean is one batched dense matmul: faster than PyG's sparse one up to N=128
            # at least (fwd+bwd of a layer 1.4x at N=3, 1.8x at N=64, 2.9x at N=128).
            x = F.relu(conv(x, mean))  # (M, N, H)
        return x.reshape(m * n, -1)

    def forward(
        self,
        obs: torch.Tensor,
        adj: torch.Tensor,
        last_action: torch.Tensor | None,
        hidden: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One round for a batch of episodes.

        Shapes:
            obs: ``(B, N, obs_dim)``; adj: ``(B, N, N)`` 0/1 with ``adj[b, src, dst]``;
            last_action: ``(B, N)`` long, -1 = none; hidden: ``(B, N, gru_hidden)``.

        Returns:
            q: ``(B, N, n_actions)``; hidden: ``(B, N, gru_hidden)``.
        """
        b, n, _ = obs.shape
        x = self.embed(obs, adj, last_action)  # (B*N, H)
        h = self.gru(x, hidden.reshape(b * n, -1))  # (B*N, G)
        q = self.q_head(h)  # (B*N, A)
        return q.view(b, n, -1), h.view(b, n, -1)

    def forward_sequence(
        self,
        obs: torch.Tensor,
        adj: torch.Tensor,
        last_action: torch.Tensor,
        aggregator: torch.Tensor | None = None,
        grad_rounds: int | None = None,
    ) -> torch.Tensor:
        """Whole episodes at once: every round's graph goes through the GNN in one batched
        graph; only the GRU steps through the rounds.

        Shapes: obs ``(B, T, N, obs_dim)``, adj ``(B, T, N, N)``, last_action ``(B, T, N)``
        (-1 = none), aggregator ``(B*T, N, N)`` or None -> q ``(B, T, N, n_actions)``.

        ``grad_rounds = k`` records only rounds ``0..k-1`` for autograd; the later ones run
        under ``no_grad``. The learner's online network reads its last round only for
        double-Q's argmax, and without it the backward pass skips ``1/T`` of its work.
        """
        b, t, n, _ = obs.shape
        k = t if grad_rounds is None else grad_rounds
        if aggregator is None:
            aggregator = mean_aggregator(adj.reshape(b * t, n, n))
        aggregator = aggregator.view(b, t, n, n)
        parts, h = [], self.initial_hidden(b, obs.device).reshape(b * n, -1)
        for rounds in (slice(0, k), slice(k, t)):
            m = rounds.stop - rounds.start
            if m == 0:
                continue
            with torch.set_grad_enabled(torch.is_grad_enabled() and rounds.start == 0):
                x = self.embed(
                    obs[:, rounds].reshape(b * m, n, -1),
                    adj[:, rounds].reshape(b * m, n, n),
                    last_action[:, rounds].reshape(b * m, n),
                    aggregator[:, rounds].reshape(b * m, n, n),
                ).view(b, m, n, -1)  # (B, m, N, H)
                hs = []
                for step in range(m):
                    h = self.gru(x[:, step].reshape(b * n, -1), h)  # (B*N, G)
                    hs.append(h)
                parts.append(self.q_head(torch.stack(hs, dim=1)))  # (B*N, m, A)
        q = parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)  # (B*N, T, A)
        return q.view(b, n, t, -1).transpose(1, 2)  # (B, T, N, A)
