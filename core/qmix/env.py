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


@runtime_checkable
class Environment(Protocol):
    n_agents: int
    n_actions: int
    obs_dim: int
    state_dim: int
    max_steps: int

    def reset(self, seed: int | None = None) -> dict: ...

    def step(self, actions: Sequence[int]) -> tuple[dict, float, bool, dict]: ...


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
