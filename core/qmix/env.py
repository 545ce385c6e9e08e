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
SHAPE_LIMITS = {
    "n_agents": 1024,
    "n_actions": 1 << 16,
    "obs_dim": 1 << 20,
    "state_dim": 1 << 20,
    "max_steps": 1 << 20,
}
"""Largest sizes an environment (or a checkpoint) may declare: far beyond any real team,
small enough that a typo cannot ask for a network no machine can hold."""
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
    """Protocol environments behind the :class:`VecEnv` interface, stepped one by one.

    ``where`` names user-supplied environments (``--env SPEC``): then an exception raised
    by their own ``reset``/``step``/``close`` becomes a :class:`UserError` naming them.
    Without it (the project's own environments) exceptions propagate as bugs.
    Observations and transitions are checked either way.
    """

    def __init__(
        self,
        envs: Sequence[Any],
        seed: int = 0,
        split: str = "train",
        where: str | None = None,
    ):
        if not envs:
            raise ValueError("SerialVecEnv needs at least one environment")
        self.envs, self.seed, self.split, self.where = list(envs), seed, split, where
        self.shapes = check_env(self.envs[0], where or "environment")
        for k, v in self.shapes.as_dict().items():
            setattr(self, k, v)

    def _call(self, name: str, method: Any, *args: Any, **kwargs: Any) -> Any:
        if self.where is None:
            return method(*args, **kwargs)
        try:
            return method(*args, **kwargs)
        except Exception as exc:  # the user's code failed: say so, in one sentence
            raise UserError(f"{self.where}: {name} raised {type(exc).__name__}: {exc}") from exc

    def reset(self, episodes: Sequence[int]) -> list[dict]:
        if len(episodes) > len(self.envs):
            raise ValueError(f"{len(episodes)} episodes for {len(self.envs)} environments")
        where = self.where or "environment"
        return [
            check_obs(
                self._call("reset", env.reset, seed=env_seed(self.seed, k, self.split)),
                self.shapes,
                where,
            )
            for env, k in zip(self.envs, episodes, strict=False)
        ]

    def step(
        self, slots: Sequence[int], actions: np.ndarray, directives: Sequence[Any] | None = None
    ) -> list[Transition]:
        where = self.where or "environment"
        return [
            check_transition(self._call("step", self.envs[s].step, a.tolist()), self.shapes, where)
            for s, a in zip(slots, actions, strict=True)
        ]

    def close(self) -> None:
        for env in self.envs:
            close = getattr(env, "close", None)
            if callable(close):
                self._call("close", close)


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


def is_integer(value: Any) -> bool:
    """An int or NumPy integer, but not a bool (``True`` agents is a mistake, not 1)."""
    return isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)


def check_shapes(sizes: dict[str, Any], where: str = "environment") -> EnvShapes:
    """Sizes as declared by an environment or stored in a checkpoint: integers in
    ``1..`` :data:`SHAPE_LIMITS`."""
    missing = [k for k in SPEC_ATTRS if not is_integer(sizes.get(k))]
    if missing:
        raise UserError(
            f"{where} does not follow the environment protocol: missing {', '.join(missing)}."
        )
    shapes = EnvShapes(**{k: int(sizes[k]) for k in SPEC_ATTRS})
    bad = [k for k, v in shapes.as_dict().items() if v <= 0]
    if bad:
        raise UserError(f"{where} has non-positive {', '.join(bad)}.")
    huge = [
        f"{k} {v} (at most {SHAPE_LIMITS[k]})"
        for k, v in shapes.as_dict().items()
        if v > SHAPE_LIMITS[k]
    ]
    if huge:
        raise UserError(f"{where} declares sizes too large: {', '.join(huge)}.")
    return shapes


def check_env(env: Any, where: str = "environment") -> EnvShapes:
    """Check the protocol's attributes and methods; a user-supplied env gets a clear error."""
    methods = [m for m in ("reset", "step") if not callable(getattr(env, m, None))]
    sizes = {k: getattr(env, k, None) for k in SPEC_ATTRS}
    if methods:
        missing = [k for k in SPEC_ATTRS if not is_integer(sizes[k])] + methods
        raise UserError(
            f"{where} does not follow the environment protocol: missing {', '.join(missing)}."
        )
    return check_shapes(sizes, where)


def check_transition(result: Any, shapes: EnvShapes, where: str = "environment") -> Transition:
    """A ``step`` result as the protocol says: ``(obs dict, finite reward, done, info)``."""
    if not isinstance(result, tuple | list) or len(result) != 4:
        kind = (
            f"a {len(result)}-tuple" if isinstance(result, tuple | list) else type(result).__name__
        )
        raise UserError(f"{where}: step returned {kind}, not (obs, reward, done, info).")
    obs, reward, done, info = result
    if not isinstance(reward, int | float | np.integer | np.floating) or isinstance(reward, bool):
        raise UserError(f"{where}: step returned a reward of type {type(reward).__name__}.")
    if not np.isfinite(reward):
        raise UserError(f"{where}: step returned a non-finite reward ({reward}).")
    if not isinstance(done, bool | np.bool_ | int | np.integer):
        raise UserError(f"{where}: step returned done of type {type(done).__name__}.")
    if info is not None and not isinstance(info, dict):
        raise UserError(f"{where}: step returned info of type {type(info).__name__}.")
    return check_obs(obs, shapes, where), float(reward), bool(done), info or {}


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
    out = {}
    for k, dtype in (("obs", np.float32), ("state", np.float32), ("adj", np.float32)):
        out[k] = _array(obs[k], dtype, k, where)
    out["avail"] = _array(obs["avail"], bool, "avail", where)
    for k, shape in want.items():
        if out[k].shape != shape:
            raise UserError(f"{where} returned {k} of shape {out[k].shape}, expected {shape}.")
    for k in ("obs", "state"):
        if not np.isfinite(out[k]).all():
            raise UserError(f"{where} returned {k} with NaN or infinite values.")
    if not out["avail"].any(axis=1).all():
        raise UserError(f"{where} returned an agent with no available action.")
    return out


def _array(value: Any, dtype: Any, key: str, where: str) -> np.ndarray:
    if isinstance(value, str | bytes):
        raise UserError(f"{where} returned {key} as {type(value).__name__}, not an array.")
    try:
        array = np.asarray(value)
        if array.dtype.kind not in "biuf":  # strings, objects: "1.5" is not a number here
            raise ValueError(f"dtype {array.dtype}")
        return array.astype(dtype, copy=False)
    except (ValueError, TypeError, OverflowError) as exc:
        raise UserError(f"{where} returned {key} that is not a numeric array ({exc}).") from exc


def load_env(spec: str) -> Any:
    """Build an environment from ``package.module:factory`` or ``path/to/file.py:factory``."""
    if ":" not in spec:
        raise UserError(
            f"--env {spec!r} must look like package.module:factory or path/file.py:factory."
        )
    target, _, factory_name = spec.rpartition(":")
    if not target.strip() or target.startswith("."):
        raise UserError(
            f"--env {spec!r} must look like package.module:factory or path/file.py:factory "
            "(an absolute module name or a .py file)."
        )
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
        except Exception as exc:  # the user's module raised while importing
            raise UserError(
                f"--env module {target} failed to import ({type(exc).__name__}: {exc})."
            ) from exc
    factory = getattr(module, factory_name, None)
    if not callable(factory):
        raise UserError(f"--env {spec}: {factory_name} is not a callable in {target}.")
    try:
        env = factory()
    except Exception as exc:
        raise UserError(f"--env {spec}: the factory raised {type(exc).__name__}: {exc}.") from exc
    check_env(env, where=f"--env {spec}")
    return env
