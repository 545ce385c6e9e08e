"""From a learned edge set to the :class:`~core.team.plan.RoundPlan` the runtime executes.

The four methods learn *who reads whom*; the runtime also needs each agent's action. The
action follows from what the agent reads this round (docs/baselines.md, "Edges to plans"):

| reads (spatial in-edges from active agents + temporal in-edges) | action |
|---|---|
| nobody | ``solo_process`` (answers alone; after round 0 with no edge at all the idle rule keeps its answer without a call) |
| one peer | ``selective_query`` (as ``chain`` and ``ring`` read their one predecessor) |
| two or more | ``aggregate_refine`` (as ``star``'s hub and ``full``) |

So a learned graph plays exactly like a fixed topology with the same edges. As published
the methods never choose ``execute_verify`` or ``debate_check``: they learn graphs, not
operations (GPTSwarm's node optimiser, which rewrites prompts, is out of scope). In the
with-tools protocol (``tools``, our extension) a method also learns a verify bit per agent
and round: an agent whose bit is set takes ``execute_verify`` — which reads nobody
(docs/actions.md), so its in-edges that round are dropped; its peers still read it. Cycles among the
spatial edges are broken by the runtime's one rule (:mod:`core.actions`), as for every
policy; the graph is decided before the episode and never looks at who has failed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.actions import Action
from core.team.plan import RoundPlan

SOLO, QUERY, AGGREGATE, VERIFY = (
    int(Action.SOLO_PROCESS),
    int(Action.SELECTIVE_QUERY),
    int(Action.AGGREGATE_REFINE),
    int(Action.EXECUTE_VERIFY),
)


def action_for(reads: int) -> int:
    """The action of an agent that reads ``reads`` answers this round."""
    return SOLO if reads == 0 else QUERY if reads == 1 else AGGREGATE


@dataclass
class EpisodeGraph:
    """The graphs of one episode, decided before it starts.

    Shapes: ``spatial (R, N, N)`` bool, ``spatial[r, src, dst]`` = dst reads src in round
    r; ``temporal (R, N, N)`` bool, ``temporal[r, src, dst]`` = in round r dst reads the
    answer src held after round r − 1 (row 0 is never used); ``active (R, N)`` bool, which
    agents take part in round r (AgentDropout's node dropout; all True otherwise);
    ``verify (R, N)`` bool or None, which agents verify in round r (the with-tools protocol).
    """

    spatial: np.ndarray
    temporal: np.ndarray
    active: np.ndarray
    verify: np.ndarray | None = None

    @classmethod
    def repeated(
        cls, spatial: np.ndarray, n_rounds: int, temporal: np.ndarray | None = None
    ) -> EpisodeGraph:
        """The same ``(N, N)`` spatial (and temporal) matrix in every round."""
        n = spatial.shape[-1]
        tem = np.zeros((n, n), dtype=bool) if temporal is None else temporal
        return cls(
            spatial=np.broadcast_to(spatial, (n_rounds, n, n)).copy(),
            temporal=np.broadcast_to(tem, (n_rounds, n, n)).copy(),
            active=np.ones((n_rounds, n), dtype=bool),
        )

    def effective(self, r: int) -> tuple[np.ndarray, np.ndarray]:
        """Round ``r``'s spatial edges between active agents and its temporal edges (none
        in round 0), without self-loops and without edges into a verifying agent (it reads
        nobody): ``(N, N)`` bool each."""
        n = self.spatial.shape[-1]
        active = self.active[r]
        spatial = self.spatial[r] & active[:, None] & active[None, :]
        temporal = self.temporal[r].copy() if r > 0 else np.zeros((n, n), dtype=bool)
        np.fill_diagonal(spatial, False)
        np.fill_diagonal(temporal, False)
        verifying = self.verifying(r)
        spatial[:, verifying] = False
        temporal[:, verifying] = False
        return spatial, temporal

    def verifying(self, r: int) -> np.ndarray:
        """``(N,)`` bool: the active agents that verify in round ``r``."""
        if self.verify is None:
            return np.zeros(self.active.shape[-1], dtype=bool)
        return self.verify[r] & self.active[r]

    def plan(self, r: int) -> RoundPlan:
        """Round ``r``'s plan: explicit spatial edges between active agents, the temporal
        edges, inactive agents marked, actions by :func:`action_for`."""
        active = self.active[r]
        spatial, temporal = self.effective(r)
        reads = spatial.sum(axis=0) + temporal.sum(axis=0)
        verifying = self.verifying(r)
        src, dst = np.nonzero(spatial)
        t_src, t_dst = np.nonzero(temporal)
        return RoundPlan(
            actions=[
                VERIFY if v else action_for(int(k)) for k, v in zip(reads, verifying, strict=True)
            ],
            edges=[(int(s), int(d)) for s, d in zip(src, dst, strict=True)],
            active=None if active.all() else [bool(a) for a in active],
            temporal=[(int(s), int(d)) for s, d in zip(t_src, t_dst, strict=True)] or None,
        )

    def density(self) -> dict[str, float]:
        """Mean planned edges per round (spatial; temporal from round 1 on), mean active
        agents and mean verifying agents per round."""
        rounds = self.spatial.shape[0]
        parts = [self.effective(r) for r in range(rounds)]
        return {
            "spatial_edges": sum(float(s.sum()) for s, _ in parts) / rounds,
            "temporal_edges": sum(float(t.sum()) for _, t in parts[1:]) / max(rounds - 1, 1),
            "active_agents": float(self.active.sum()) / rounds,
            "verifying_agents": sum(float(self.verifying(r).sum()) for r in range(rounds)) / rounds,
        }
