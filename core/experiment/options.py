"""Options of an experiment: the team's (one object, :mod:`core.team.options`) and training's."""

from __future__ import annotations

from typing import Any

from core.qmix.training import TrainConfig
from core.team.env import TeamEnv
from core.team.options import TeamOptions, options_from_dict
from core.team.recipes import TEAM_RECIPE, stored_train_config

__all__ = ["TeamOptions", "make_team_env", "options_from_dict", "train_config_from_dict"]


def make_team_env(opts: TeamOptions, split: str | None) -> TeamEnv:
    """The team on one side (``train``/``eval``) of the benchmark's held-out split."""
    return TeamEnv(opts, split)


def train_config_from_dict(d: dict[str, Any], recipe: str = TEAM_RECIPE) -> TrainConfig:
    """The training config a run stored (``config["train"]``); settings it did not store
    take the values of ``recipe``, the one it was trained with (``config["recipe"]``; a run
    logged before recipes existed was trained as ``society`` is)."""
    return stored_train_config(d, recipe)
