"""Options of an experiment: the team's (one object, :mod:`core.team.options`) and training's."""

from __future__ import annotations

from typing import Any

from core.qmix.controller import ExplorationConfig
from core.qmix.encoders import AgentNetConfig
from core.qmix.learner import LearnerConfig
from core.qmix.mixers import MixerConfig
from core.qmix.training import TrainConfig
from core.team.env import TeamEnv
from core.team.options import TeamOptions, options_from_dict

__all__ = ["TeamOptions", "make_team_env", "options_from_dict", "train_config_from_dict"]


def make_team_env(opts: TeamOptions, split: str | None) -> TeamEnv:
    """The team on one side (``train``/``eval``) of the benchmark's held-out split."""
    return TeamEnv(opts, split)


def train_config_from_dict(d: dict[str, Any]) -> TrainConfig:
    """The training config a run stored (``config["train"]``)."""
    parts = ("agent", "mixer", "learner", "exploration")
    return TrainConfig(
        **{k: v for k, v in d.items() if k not in parts and k in TrainConfig.__dataclass_fields__},
        agent=AgentNetConfig(**d.get("agent", {})),
        mixer=MixerConfig(**d.get("mixer", {})),
        learner=LearnerConfig(**d.get("learner", {})),
        exploration=ExplorationConfig(**d.get("exploration", {})),
    )
