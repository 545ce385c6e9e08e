"""The topology-aware agent network: GNN over the round graph -> GRUCell -> Q-head.

All agents of all episodes in a batch are nodes of one batched graph: ``(B, N, F)``
is flattened to ``(B*N, F)`` and each episode's edges are offset by ``b * N``.
Weights are shared across agents; the agent id (and the last action) are inputs.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F
from torch_geometric.nn import GraphConv
from torch_geometric.utils import to_torch_csr_tensor

# PyG builds CSR adjacencies from edge_index it has already validated; torch's beta and
# invariant-check notices say nothing actionable here.
warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta state")
warnings.filterwarnings("ignore", message="Sparse invariant checks are implicitly disabled")


@dataclass
class AgentNetConfig:
    """Sizes of the per-agent network."""

    gnn_hidden: int = 128
    """Width of the input projection and of every GNN layer."""
    gnn_layers: int = 2
    """Number of message-passing layers over the round graph."""
    gru_hidden: int = 128
    """Width of the GRUCell memory across rounds."""
    q_hidden: int = 128
    """Width of the hidden layer of the Q-head MLP."""
    agent_id: bool = True
    """Append a one-hot agent id to each agent's observation."""
    last_action: bool = True
    """Append a one-hot of the agent's previous action (zeros in the first round)."""

    def validate(self) -> None:
        for name in ("gnn_hidden", "gru_hidden", "q_hidden"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.gnn_layers < 0:
            raise ValueError(f"gnn_layers must be >= 0, got {self.gnn_layers}")


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
            GraphConv(config.gnn_hidden, config.gnn_hidden, aggr="mean")
            for _ in range(config.gnn_layers)
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

    def embed(
        self, obs: torch.Tensor, adj: torch.Tensor, last_action: torch.Tensor | None
    ) -> torch.Tensor:
        """Input projection + message passing; independent of the GRU, so any batch of rounds.

        Shapes: obs ``(M, N, obs_dim)``, adj ``(M, N, N)``, last_action ``(M, N)`` -> ``(M*N, H)``.
        """
        m, n, _ = obs.shape
        x = F.relu(self.input(self.build_inputs(obs, last_action))).reshape(m * n, -1)  # (M*N, H)
        edge_index = adjacency_to_edge_index(adj)  # (2, |E|)
        # Transposed CSR adjacency (row = reader): PyG then aggregates with one sparse
        # matmul instead of gathering a message per edge; same result, ~4x faster at N=64.
        ones = torch.ones(edge_index.shape[1], dtype=x.dtype, device=x.device)
        adj_t = to_torch_csr_tensor(edge_index.flip(0), ones, size=(m * n, m * n))
        for conv in self.convs:
            x = F.relu(conv(x, adj_t))  # (M*N, H)
        return x

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
        self, obs: torch.Tensor, adj: torch.Tensor, last_action: torch.Tensor
    ) -> torch.Tensor:
        """Whole episodes at once: every round's graph goes through the GNN in one batched
        graph; only the GRU steps through the rounds.

        Shapes: obs ``(B, T, N, obs_dim)``, adj ``(B, T, N, N)``, last_action ``(B, T, N)``
        (-1 = none) -> q ``(B, T, N, n_actions)``.
        """
        b, t, n, _ = obs.shape
        x = self.embed(
            obs.reshape(b * t, n, -1), adj.reshape(b * t, n, n), last_action.reshape(b * t, n)
        )
        x = x.view(b, t, n, -1)  # (B, T, N, H)
        h = self.initial_hidden(b, obs.device).reshape(b * n, -1)
        hs = []
        for step in range(t):
            h = self.gru(x[:, step].reshape(b * n, -1), h)  # (B*N, G)
            hs.append(h)
        q = self.q_head(torch.stack(hs, dim=1))  # (B*N, T, A)
        return q.view(b, n, t, -1).transpose(1, 2)  # (B, T, N, A)
