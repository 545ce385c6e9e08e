"""Rollouts: ``E`` environments stepped in lockstep, one batched policy decision per round."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.qmix.buffer import EpisodeRecorder
from core.qmix.env import EnvShapes, check_obs
from core.qmix.policy import QMixPolicy, plan_from_output
from core.records import EpisodeRecord
from core.team.plan import RoundPlan

EVAL_SEED_OFFSET = 1_000_000_007
"""Evaluation seeds start here, so held-out episodes never reuse a training seed."""


def episode_seed(run_seed: int, index: int, held_out: bool = False) -> int:
    """The environment seed of episode ``index`` of a run (train and eval streams are disjoint)."""
    return (EVAL_SEED_OFFSET if held_out else 0) + run_seed * 100_003 + index


@dataclass
class EpisodeResult:
    """One finished rollout."""

    recorder: EpisodeRecorder
    ret: float
    steps: int
    info: dict[str, Any]
    plans: list[RoundPlan] = field(default_factory=list)

    @property
    def record(self) -> EpisodeRecord | None:
        """The team episode record, when the environment is a team."""
        return self.info.get("episode")


def annotate_record(record: EpisodeRecord, plans: Sequence[RoundPlan]) -> None:
    """Copy the policy's view of each round (Q-values, ε, mixer) into a team record."""
    for rnd, plan in zip(record.rounds, plans, strict=False):
        rnd.q_tot, rnd.mixer_weights, rnd.credit = plan.q_tot, plan.mixer_weights, plan.credit
        for step in rnd.steps:
            if plan.q_values is not None and 0 <= step.agent < len(plan.q_values):
                step.q_values = plan.q_values[step.agent]
                step.greedy = plan.greedy[step.agent] if plan.greedy else None
                step.epsilon = plan.epsilon


def rollout(
    envs: Sequence[Any],
    shapes: EnvShapes,
    policy: QMixPolicy,
    seeds: Sequence[int],
    explain: bool = False,
) -> list[EpisodeResult]:
    """Play one episode in each env; ``explain`` also asks the mixer for its view."""
    n = len(envs)
    obs = [check_obs(env.reset(seed=int(s)), shapes) for env, s in zip(envs, seeds, strict=True)]
    recorders = [EpisodeRecorder(shapes) for _ in range(n)]
    for rec, o in zip(recorders, obs, strict=True):
        rec.observe(o)
    done, returns, infos = [False] * n, [0.0] * n, [{} for _ in range(n)]
    plans: list[list[RoundPlan]] = [[] for _ in range(n)]
    memory = policy.start(n)
    for t in range(shapes.max_steps):
        if all(done):
            break
        out, memory = policy.step(obs, memory, explain=explain)
        for e, env in enumerate(envs):
            if done[e]:
                continue
            nxt, reward, finished, info = env.step(out.actions[e].tolist())
            obs[e] = check_obs(nxt, shapes)
            returns[e] += float(reward)
            infos[e] = info or {}
            recorders[e].observe(obs[e])
            recorders[e].act(out.actions[e], float(reward), bool(finished))
            plans[e].append(plan_from_output(out, e, policy.epsilon))
            done[e] = bool(finished) or t == shapes.max_steps - 1
    results = []
    for e in range(n):
        res = EpisodeResult(recorders[e], returns[e], len(recorders[e].actions), infos[e], plans[e])
        if res.record is not None:
            annotate_record(res.record, plans[e])
        results.append(res)
    return results


def summarize(results: Sequence[EpisodeResult]) -> dict[str, Any]:
    """Mean return, and for team episodes accuracy, tokens and action counts per round."""
    out: dict[str, Any] = {
        "episodes": len(results),
        "mean_return": float(np.mean([r.ret for r in results])) if results else 0.0,
    }
    records = [r.record for r in results if r.record is not None]
    if records:
        out.update(summarize_records(records))
    return out


def summarize_records(records: Sequence[EpisodeRecord]) -> dict[str, Any]:
    """Accuracy, mean tokens, mean reward and action counts per round of team episodes."""
    from core.actions import ACTION_NAMES

    n_rounds = max(len(r.rounds) for r in records)
    counts = [dict.fromkeys(ACTION_NAMES, 0) for _ in range(n_rounds)]
    for rec in records:
        for rnd in rec.rounds:
            for step in rnd.steps:
                if step.alive and step.fault != "inactive":
                    counts[rnd.round][ACTION_NAMES[step.action]] += 1
    calls = [c for rec in records for c in rec.calls]
    return {
        "calls": len(calls),
        "failed_calls": sum(c.error is not None for c in calls),
        "accuracy": float(np.mean([r.score for r in records])),
        "mean_tokens": float(np.mean([r.tokens for r in records])),
        "mean_reward": float(np.mean([r.reward for r in records])),
        "action_counts_per_round": counts,
    }
