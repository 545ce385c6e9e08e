"""Rollouts: the one path every episode takes, in training and in evaluation.

``E`` episodes of a :class:`~core.qmix.env.VecEnv` are stepped in lockstep: each round,
one batched ``actor.act`` for every live episode, then one ``venv.step`` for all of
them. The runner knows nothing of what an environment is; it returns, per episode, the
transitions (for the replay buffer), the return, the environment's final ``info`` and
the actor's view of every round (:class:`~core.qmix.policy.RoundView`), which a domain
(the agent team) turns into its own records.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.qmix.buffer import EpisodeRecorder
from core.qmix.decisions import Actor, RoundView
from core.qmix.env import EnvShapes, VecEnv, check_obs


@dataclass
class EpisodeResult:
    """One finished rollout."""

    episode: int
    """Its index in the environment's stream."""
    recorder: EpisodeRecorder
    ret: float
    steps: int
    info: dict[str, Any]
    """The environment's ``info`` of the last step."""
    views: list[RoundView] = field(default_factory=list)
    """The actor's decision in each round."""


def rollout(
    venv: VecEnv, actor: Actor, episodes: Sequence[int], explain: bool = False
) -> list[EpisodeResult]:
    """Play ``episodes`` (at most the vec env's width) to the end; ``explain`` also asks the
    mixer for its view of every round."""
    shapes = EnvShapes.of(venv)
    episodes = [int(k) for k in episodes]
    obs = [check_obs(o, shapes) for o in venv.reset(episodes)]
    n = len(episodes)
    recorders = [EpisodeRecorder(shapes) for _ in range(n)]
    for rec, o in zip(recorders, obs, strict=True):
        rec.observe(o)
    done, returns, infos = [False] * n, [0.0] * n, [{} for _ in range(n)]
    views: list[list[RoundView]] = [[] for _ in range(n)]
    memory = actor.start(episodes)
    for t in range(shapes.max_steps):
        live = [e for e in range(n) if not done[e]]
        if not live:
            break
        # Every episode's memory advances each round, so the actor always sees all E.
        out, memory = actor.act(obs, memory, explain=explain)
        seen = dict(zip(live, out.views(live), strict=True))
        directives = [out.directives[e] if out.directives else seen[e] for e in live]
        transitions = venv.step(live, out.actions[live], directives)
        for e, (nxt, reward, finished, info) in zip(live, transitions, strict=True):
            obs[e] = check_obs(nxt, shapes)
            returns[e] += float(reward)
            infos[e] = info or {}
            recorders[e].observe(obs[e])
            recorders[e].act(out.actions[e], float(reward), bool(finished))
            views[e].append(seen[e])
            done[e] = bool(finished) or t == shapes.max_steps - 1
    return [
        EpisodeResult(k, recorders[e], returns[e], len(recorders[e].actions), infos[e], views[e])
        for e, k in enumerate(episodes)
    ]


def rollout_all(
    venv: VecEnv, actor: Actor, episodes: Sequence[int], width: int, explain: bool = False
) -> list[EpisodeResult]:
    """:func:`rollout` over any number of episodes, ``width`` at a time, in order."""
    episodes = list(episodes)
    results: list[EpisodeResult] = []
    for start in range(0, len(episodes), width):
        results += rollout(venv, actor, episodes[start : start + width], explain)
    return results


def summarize(results: Sequence[EpisodeResult]) -> dict[str, Any]:
    """Episodes and mean return (any environment)."""
    return {
        "episodes": len(results),
        "mean_return": float(np.mean([r.ret for r in results])) if results else 0.0,
    }
