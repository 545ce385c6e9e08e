"""Training recipes: the settings tuned for one environment, kept apart from the engine.

:mod:`core.qmix` holds textbook defaults (PyMARL's QMIX), which must solve any small
cooperative game (:mod:`core.qmix.games`, docs/games.md). A recipe names the settings that
were tuned for one environment, as overrides of those defaults; the environment's
experiment applies it, the user's flags go on top, and a run stores the recipe's name and
the whole resulting config (``config["recipe"]``, ``config["train"]``; a checkpoint's
``meta["recipe"]`` and ``resume["train_config"]``).

* ``textbook`` overrides nothing: the default for ``--env`` environments.
* ``society`` is the agent team's (``--benchmark``): chosen on the synthetic society
  (flash-lite, ``mixed``), training seed 100 and held-out stream 300 only
  (docs/simulator.md, "What held learning back"). The reward is a noisy 0/1 outcome at the
  end of three rounds and sim episodes are cheap, so it collects many more episodes than it
  makes updates, keeps a larger buffer and learns from λ-returns. ε falls over the first
  fifth of the run (issue 22: the greedy policy holds a held-out reward of 0.88 sooner;
  the textbook half kept it wandering until ε was low — benchmarks/RESULTS.md, "Issue 22").
* ``finetune`` continues a policy (``train --init``) on a real model, where an episode
  costs seconds to minutes, not milliseconds: two episodes at a time, one update an
  episode from the first one on (the replay buffer starts with 64 episodes of the
  simulator, ``prefill_episodes``), a small batch and a target copy every 20 updates.
  Under the society recipe a 200k-token budget bought ~20 real episodes and not one update
  (32 episodes at a time, an update every ten episodes once 32 were buffered; issue 35).
  It is the default of ``train --init`` on a real back-end.

A run logged before recipes existed was trained with what are now ``society``'s settings;
:func:`stored_train_config` reads its config back on that basis.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, is_dataclass, replace
from typing import Any

from core.errors import UserError
from core.qmix.config import TrainConfig


@dataclass(frozen=True)
class Recipe:
    """Settings tuned for one environment, as overrides of :class:`TrainConfig`'s defaults."""

    about: str
    """One line for ``--help`` and the docs: what it was tuned on."""
    overrides: Mapping[str, Any]
    """Dotted :class:`TrainConfig` paths (``"learner.td_lambda"``) and their values."""


RECIPES: dict[str, Recipe] = {
    "textbook": Recipe("the engine's defaults (PyMARL's QMIX)", {}),
    "society": Recipe(
        "tuned on the synthetic society (training seed 100, held-out stream 300)",
        {
            "episodes": 40_000,
            "max_updates": 4_000,
            "learner.buffer_size": 20_000,
            "learner.td_lambda": 0.8,
            "learner.target_update_interval": 100,
            "exploration.anneal_fraction": 0.2,
        },
    ),
    "finetune": Recipe(
        "continuing a policy (--init) on a real model: 2 episodes at a time, an update an "
        "episode from the first, the buffer started with 64 simulated episodes",
        {
            "episodes": 64,
            "n_envs": 2,
            "prefill_episodes": 64,
            "learner.batch_size": 16,
            "learner.buffer_size": 2_000,
            "learner.updates_per_episode": 1.0,
            "learner.td_lambda": 0.8,
            "learner.target_update_interval": 20,
        },
    ),
}
ENV_RECIPE = "textbook"
"""What ``train --env`` uses unless ``--recipe`` says otherwise."""
TEAM_RECIPE = "society"
"""What training on the agent team (``train --benchmark``, ``sweep``) uses."""
FINETUNE_RECIPE = "finetune"
"""What ``train --init`` on a real back-end uses unless ``--recipe`` says otherwise."""


def default_recipe(env: bool, backend: str, init: bool) -> str:
    """The recipe a ``train`` without ``--recipe`` uses: ``--env`` → textbook; continuing a
    policy on a real back-end → finetune; the team otherwise → society."""
    if env:
        return ENV_RECIPE
    return FINETUNE_RECIPE if init and backend != "sim" else TEAM_RECIPE


def get_recipe(name: str) -> Recipe:
    if name not in RECIPES:
        raise UserError(f"--recipe must be one of {', '.join(RECIPES)}, not {name!r}.")
    return RECIPES[name]


def recipe_config(name: str, given: Mapping[str, Any] | None = None) -> TrainConfig:
    """:class:`TrainConfig` with recipe ``name``'s overrides, then ``given`` (dotted paths
    the user set) on top."""
    config = TrainConfig()
    for path, value in {**get_recipe(name).overrides, **(given or {})}.items():
        config = with_path(config, path, value)
    return config


def recipe_value(name: str, path: str) -> Any:
    """The value recipe ``name`` trains with at ``path`` (its override or the default)."""
    return read_path(recipe_config(name), path)


def read_path(config: Any, path: str) -> Any:
    for part in path.split("."):
        config = getattr(config, part)
    return config


def with_path(config: Any, path: str, value: Any) -> Any:
    """A copy of the dataclass ``config`` with ``path`` (``"learner.lr"``) set to ``value``."""
    head, _, rest = path.partition(".")
    if not is_dataclass(config) or head not in {f.name for f in fields(config)}:
        raise KeyError(f"{type(config).__name__} has no setting {path!r}")
    if rest:
        value = with_path(getattr(config, head), rest, value)
    return replace(config, **{head: value})


BEFORE_STORED: dict[str, Any] = {"exploration.anneal_fraction": 0.5}
"""Settings every run trained with until the recipe changed them, for runs that did not
store them: ε fell over half the run until issue 22 (every run since stores it)."""


def stored_train_config(stored: Mapping[str, Any], recipe: str = TEAM_RECIPE) -> TrainConfig:
    """The :class:`TrainConfig` a run stored (``config["train"]``). Settings it did not
    store (fields added since) take the values of the recipe it was trained with, as it was
    then (:data:`BEFORE_STORED`): a run logged before recipes existed stores none and was
    trained as ``society`` was."""
    config = recipe_config(recipe, BEFORE_STORED)
    for path, value in _flatten(stored).items():
        try:
            config = with_path(config, path, value)
        except KeyError:
            continue  # a setting this version no longer has
    return config


def _flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in d.items():
        if isinstance(value, Mapping):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = value
    return out
