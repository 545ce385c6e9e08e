"""The environment protocol every learner and tool in this project relies on.

An environment is any object with integer attributes ``n_agents``, ``n_actions``,
``obs_dim``, ``state_dim``, ``max_steps`` and the methods

* ``reset(seed: int | None = None) -> dict``
* ``step(actions: Sequence[int]) -> tuple[dict, float, bool, dict]``
  (next observation dict, team reward, done, info).

The observation dict holds ``"obs"`` float32 ``[n_agents, obs_dim]``, ``"state"``
float32 ``[state_dim]``, ``"adj"`` 0/1 ``[n_agents, n_agents]`` with
``adj[src, dst] = 1`` when src sends to dst, and ``"avail"`` bool
``[n_agents, n_actions]``. See docs/environment.md.

The runner steps a :class:`VecEnv`: ``E`` episodes in lockstep, named by their *episode
index* in the environment's stream (an index is never a seed). :class:`SerialVecEnv`
makes one from protocol environments, handing each ``reset`` the seed
:func:`env_seed` derives from the run seed, the index and the split. Environments that
can do better (the agent team plays a round of all ``E`` episodes concurrently) provide
their own.

Held-out evaluation has one mechanism: the ``split``. A ``"train"`` and an ``"eval"``
stream never share an episode (protocol environments: disjoint seeds; the agent team:
disjoint questions, docs/team.md).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from core.errors import UserError

SPEC_ATTRS = ("n_agents", "n_actions", "obs_dim", "state_dim", "max_steps")
SPLITS = ("train", "eval")
EVAL_SEED_OFFSET = 1_000_000_007
"""Seeds of the ``eval`` stream start here, so held-out episodes never reuse a training seed."""

Transition = tuple[dict, float, bool, dict]
"""What ``step`` returns: next observation dict, team reward, done, info."""


@runtime_checkable
class Environment(Protocol):
    n_agents: int
    n_actions: int
    obs_dim: int
    state_dim: int
    max_steps: int

    def reset(self, seed: int | None = None) -> dict: ...

    def step(self, actions: Sequence[int]) -> tuple[dict, float, bool, dict]: ...


class VecEnv(Protocol):
    """``E`` episodes stepped together; slots ``0..E-1`` hold the episodes of the last reset."""

    n_agents: int
    n_actions: int
    obs_dim: int
    state_dim: int
    max_steps: int

    def reset(self, episodes: Sequence[int]) -> list[dict]:
        """Start episodes ``episodes`` (indices in the stream) in slots ``0..len-1``."""
        ...

    def step(
        self, slots: Sequence[int], actions: np.ndarray, directives: Sequence[Any] | None = None
    ) -> list[Transition]:
        """Step the episodes in ``slots`` with ``actions (len(slots), N)``. ``directives``
        carries, per slot, what the actor decided beyond the actions (its Q-values and
        mixer view, or a fixed topology's explicit edges); environments may ignore it."""
        ...

    def close(self) -> None: ...


def env_seed(run_seed: int, episode: int, split: str = "train") -> int:
    """The seed a protocol environment's ``reset`` gets for ``episode`` of a run's ``split``."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    return (EVAL_SEED_OFFSET if split == "eval" else 0) + run_seed * 100_003 + episode


class SerialVecEnv:
    """Protocol environments behind the :class:`VecEnv` interface, stepped one by one."""

    def __init__(self, envs: Sequence[Any], seed: int = 0, split: str = "train"):
        if not envs:
            raise ValueError("SerialVecEnv needs at least one environment")
        self.envs, self.seed, self.split = list(envs), seed, split
        self.shapes = check_env(self.envs[0])
        for k, v in self.shapes.as_dict().items():
            setattr(self, k, v)

    def reset(self, episodes: Sequence[int]) -> list[dict]:
        if len(episodes) > len(self.envs):
            raise ValueError(f"{len(episodes)} episodes for {len(self.envs)} environments")
        return [
            env.reset(seed=env_seed(self.seed, k, self.split))
            for env, k in zip(self.envs, episodes, strict=False)
        ]

    def step(
        self, slots: Sequence[int], actions: np.ndarray, directives: Sequence[Any] | None = None
    ) -> list[Transition]:
        return [self.envs[s].step(a.tolist()) for s, a in zip(slots, actions, strict=True)]

    def close(self) -> None:
        for env in self.envs:
            close = getattr(env, "close", None)
            if callable(close):
                close()


@dataclass(frozen=True)
class EnvShapes:
    """The sizes a network and a checkpoint are built for."""

    n_agents: int
    n_actions: int
    obs_dim: int
    state_dim: int
    max_steps: int

    @classmethod
    def of(cls, env: Any) -> EnvShapes:
        return cls(**{k: int(getattr(env, k)) for k in SPEC_ATTRS})

    def as_dict(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in SPEC_ATTRS}


def check_env(env: Any, where: str = "environment") -> EnvShapes:
    """Check the protocol's attributes and methods; a user-supplied env gets a clear error."""
    missing = [k for k in SPEC_ATTRS if not isinstance(getattr(env, k, None), int | np.integer)]
    missing += [m for m in ("reset", "step") if not callable(getattr(env, m, None))]
    if missing:
        raise UserError(
            f"{where} does not follow the environment protocol: missing {', '.join(missing)}."
        )
    shapes = EnvShapes.of(env)
    bad = [k for k, v in shapes.as_dict().items() if v <= 0]
    if bad:
        raise UserError(f"{where} has non-positive {', '.join(bad)}.")
    return shapes


def check_obs(obs: dict, shapes: EnvShapes, where: str = "environment") -> dict[str, np.ndarray]:
    """Coerce an observation dict to the protocol's dtypes and check its shapes."""
    want = {
        "obs": (shapes.n_agents, shapes.obs_dim),
        "state": (shapes.state_dim,),
        "adj": (shapes.n_agents, shapes.n_agents),
        "avail": (shapes.n_agents, shapes.n_actions),
    }
    if not isinstance(obs, dict) or any(k not in obs for k in want):
        raise UserError(f"{where} returned an observation without the keys obs, state, adj, avail.")
    out = {
        "obs": np.asarray(obs["obs"], dtype=np.float32),
        "state": np.asarray(obs["state"], dtype=np.float32),
        "adj": np.asarray(obs["adj"], dtype=np.float32),
        "avail": np.asarray(obs["avail"], dtype=bool),
    }
    for k, shape in want.items():
        if out[k].shape != shape:
            raise UserError(f"{where} returned {k} of shape {out[k].shape}, expected {shape}.")
    if not out["avail"].any(axis=1).all():
        raise UserError(f"{where} returned an agent with no available action.")
    return out


def load_env(spec: str) -> Any:
    """Build an environment from ``package.module:factory`` or ``path/to/file.py:factory``."""
    if ":" not in spec:
        raise UserError(
            f"--env {spec!r} must look like package.module:factory or path/file.py:factory."
        )
    target, _, factory_name = spec.rpartition(":")
    if target.endswith(".py"):
        path = Path(target)
        if not path.is_file():
            raise UserError(f"--env file {target} does not exist.")
        mod_name = f"_agentqmix_env_{abs(hash(str(path.resolve())))}"
        module_spec = importlib.util.spec_from_file_location(mod_name, path)
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[mod_name] = module
        try:
            module_spec.loader.exec_module(module)
        except Exception as exc:  # the user's file: report it, do not crash with a traceback
            raise UserError(
                f"--env file {target} failed to load ({type(exc).__name__}: {exc})."
            ) from exc
    else:
        try:
            module = importlib.import_module(target)
        except ModuleNotFoundError as exc:
            raise UserError(f"--env module {target} cannot be imported ({exc}).") from exc
    factory = getattr(module, factory_name, None)
    if not callable(factory):
        raise UserError(f"--env {spec}: {factory_name} is not a callable in {target}.")
    try:
        env = factory()
    except Exception as exc:
        raise UserError(f"--env {spec}: the factory raised {type(exc).__name__}: {exc}.") from exc
    check_env(env, where=f"--env {spec}")
    return env
