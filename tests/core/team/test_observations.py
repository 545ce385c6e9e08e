"""Observations: the batched builder writes exactly what the plain per-agent version wrote."""

from __future__ import annotations

import numpy as np
import pytest

from core.actions import N_ACTIONS
from core.team.env import TeamEnv
from core.team.observations import _STATE_EXTRA
from core.team.options import TeamOptions
from core.team.topologies import make_policy

# --- the builder as it was written first, agent by agent (the specification) --------------


def reference_observation(builder, episode):
    """One episode's observation dict, feature by feature, agent by agent."""
    n, budget = builder.n_agents, builder.token_budget
    r = episode.round_index
    static = builder._static(episode)
    obs = np.zeros((n, builder.obs_dim), dtype=np.float32)
    obs[:, : static.shape[1]] = static
    col = static.shape[1]
    if r < builder.n_rounds:
        obs[:, col + r] = 1.0
    col += builder.n_rounds

    upcoming = min(r, builder.n_rounds - 1)
    silent = episode.silent_at(upcoming)
    last = episode.last
    agent_tokens = episode.agent_tokens()
    team_tokens = sum(agent_tokens)
    for i in range(n):
        step = last[i]
        row = obs[i]
        if step is None:
            row[col + N_ACTIONS] = 1.0
        else:
            row[col + step.action] = 1.0
            has = step.answer is not None
            row[col + 7] = float(has)
            row[col + 8] = step.confidence
            row[col + 9] = step.agreement
            row[col + 10] = len(step.read_from) / max(n - 1, 1)
            row[col + 11] = float(step.verified)
            # The controller sees every agent's last answer (no tokens are spent on it):
            # whether the team already agrees is the cheapest signal of a task's difficulty.
            peers = [last[j] for j in range(n) if j != i and last[j] is not None]
            answered = [p for p in peers if p.answer is not None]
            if has and n > 1:
                row[col + 12] = sum(p.answer == step.answer for p in answered) / (n - 1)
            if answered:
                row[col + 13] = sum(p.confidence for p in answered) / len(answered)
        row[col + 14] = min(agent_tokens[i] / budget, 1.0)
        row[col + 15] = min(team_tokens / budget, 1.0)
        unreadable = step is not None and step.fault is not None and step.answer is None
        row[col + 16] = float(silent[i] or unreadable)
        if step is not None and step.read_from:
            row[col + 17] = float(
                any(silent[j] or last[j] is None or last[j].answer is None for j in step.read_from)
            )
        row[col + 18] = sum(silent[j] for j in range(n) if j != i) / max(n - 1, 1)

    adj = np.zeros((n, n), dtype=np.float32)
    graph = episode.graphs[-1] if episode.graphs else None
    edges = episode.rounds[-1].edges if episode.rounds else []
    for s, d in edges:
        adj[s, d] = 1.0
    avail = np.ones((n, N_ACTIONS), dtype=bool)
    for i in range(n):
        if silent[i]:
            avail[i, 1:] = False
    return {
        "obs": obs,
        "state": reference_state(builder, episode, obs, graph, len(edges), silent, team_tokens),
        "adj": adj,
        "avail": avail,
    }


def reference_state(builder, episode, obs, graph, n_edges, silent, team_tokens):
    n = builder.n_agents
    state = np.zeros(builder.state_dim, dtype=np.float32)
    state[: n * builder.obs_dim] = obs.reshape(-1)
    k = n * builder.obs_dim
    if graph is not None and n > 1:
        state[k] = n_edges / (n * (n - 1))
        state[k + 1] = len(graph.dropped) / n
        state[k + 2] = len(graph.layers) / n
    state[k + 3 + min(max(episode.task.difficulty, 1), 5) - 1] = 1.0
    right = [bool(s is not None and s.correct) for s in episode.last]
    state[k + 8] = sum(right) / n
    state[k + 9] = min(team_tokens / builder.token_budget, 1.0)
    k += _STATE_EXTRA
    upcoming = min(episode.round_index, builder.n_rounds - 1)
    for i in range(n):
        state[k + i] = float(right[i])
        state[k + n + i] = float(silent[i])
        state[k + 2 * n + i] = float(episode.fault_at(i, upcoming) == "byzantine")
    return state


# --- the tests ------------------------------------------------------------------------------


def episodes_at_every_round(opts: TeamOptions, count: int):
    """Yield lists of live episodes before each round and after the last (random policy,
    failures from the curriculum), so every observation a rollout makes is covered."""
    env = TeamEnv(opts, "train")
    venv = env.vectorized(count)
    policy = make_policy("random")
    memories = [policy.begin(env.n_agents, env.job(k).seed) for k in range(count)]
    obs = venv.reset(range(count))
    yield env, venv.episodes
    for r in range(env.max_steps):
        plans = []
        for k in range(count):
            plan, memories[k] = policy.plan(obs[k], r, memories[k])
            plans.append(plan)
        actions = np.asarray([p.actions for p in plans])
        obs = [t[0] for t in venv.step(range(count), actions, plans)]
        yield env, venv.episodes
    env.close()


@pytest.mark.parametrize(
    "opts",
    [
        TeamOptions(benchmark="mixed", seed=2, fail_prob=0.4),
        TeamOptions(benchmark="mixed", seed=3, roles=("solver", "coder") * 4 + ("critic",)),
    ],
    ids=["four-agents-with-failures", "nine-agents"],
)
def test_batched_observations_equal_the_per_agent_version(opts):
    seen_rounds = set()
    for env, episodes in episodes_at_every_round(opts, 12):
        batched = env.observe.many(episodes)
        for ep, got in zip(episodes, batched, strict=True):
            want = reference_observation(env.observe, ep)
            for key in ("obs", "state", "adj", "avail"):
                assert got[key].dtype == want[key].dtype, key
                assert np.array_equal(got[key], want[key]), (key, ep.round_index)
            assert np.array_equal(env.observe(ep)["obs"], want["obs"])
            seen_rounds.add(ep.round_index)
    assert seen_rounds == set(range(opts.rounds + 1))
