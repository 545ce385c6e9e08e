"""Checkpoints: weights, configuration and shapes in one ``torch.save`` file.

Loading uses ``torch.load(..., weights_only=True)``: a checkpoint holds only tensors
and plain Python values, so opening one never runs code. A corrupt file, or one
whose shapes do not fit the environment, is a :class:`UserError` (one line, exit 2).
"""

from __future__ import annotations

import os
import pickle
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from core.errors import UserError
from core.qmix.encoders import AgentNetConfig, AgentNetwork
from core.qmix.env import EnvShapes
from core.qmix.mixers import MixerConfig, make_mixer

FORMAT = "agentqmix-checkpoint"
VERSION = 1


@dataclass
class Checkpoint:
    """A loaded checkpoint: networks rebuilt and ready, plus what made them."""

    agent: AgentNetwork
    mixer: torch.nn.Module
    shapes: EnvShapes
    agent_config: AgentNetConfig
    mixer_config: MixerConfig
    env: dict[str, Any]
    """How to rebuild the environment: ``{"spec": ...}`` or the team config as a dict."""
    meta: dict[str, Any]
    """Training facts: episodes, seed, run id, final metrics."""
    resume: dict[str, Any] | None = None
    """Target networks, optimiser and progress, for ``train --resume`` (None if absent)."""


def save_checkpoint(
    path: str | Path,
    agent: AgentNetwork,
    mixer: torch.nn.Module,
    shapes: EnvShapes,
    agent_config: AgentNetConfig,
    mixer_config: MixerConfig,
    env: dict[str, Any],
    meta: dict[str, Any] | None = None,
    resume: dict[str, Any] | None = None,
) -> Path:
    """Write atomically (tmp file + rename), so a crash never leaves half a checkpoint."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "format": FORMAT,
        "version": VERSION,
        "shapes": shapes.as_dict(),
        "agent_config": asdict(agent_config),
        "mixer_config": asdict(mixer_config),
        "env": env,
        "meta": meta or {},
        "agent": {k: v.detach().cpu() for k, v in agent.state_dict().items()},
        "mixer": {k: v.detach().cpu() for k, v in mixer.state_dict().items()},
        "resume": resume,
    }
    tmp = path.with_name(path.name + ".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)
    return path


def load_checkpoint(
    path: str | Path, device: torch.device | str = "cpu", expect: EnvShapes | None = None
) -> Checkpoint:
    """Load and rebuild; ``expect`` checks the shapes against an environment."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"checkpoint {path} does not exist.")
    try:
        payload = torch.load(path, map_location=device, weights_only=True)
    except (
        RuntimeError,
        EOFError,
        pickle.UnpicklingError,
        zipfile.BadZipFile,
        ValueError,
        OSError,
    ) as exc:
        raise UserError(
            f"checkpoint {path} is not a readable agentqmix checkpoint ({type(exc).__name__})."
        ) from exc
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise UserError(f"checkpoint {path} is not an agentqmix checkpoint.")
    if payload.get("version") != VERSION:
        raise UserError(
            f"checkpoint {path} has format version {payload.get('version')}; this build reads {VERSION}."
        )
    parts = ("shapes", "agent_config", "mixer_config", "env", "meta", "agent", "mixer")
    missing = [k for k in parts if k not in payload]
    if missing:
        raise UserError(f"checkpoint {path} is incomplete: it lacks {', '.join(missing)}.")
    try:
        shapes = EnvShapes(**payload["shapes"])
    except TypeError as exc:
        raise UserError(f"checkpoint {path} is incomplete: its shapes are malformed.") from exc
    if expect is not None and expect != shapes:
        diff = ", ".join(
            f"{k} {getattr(shapes, k)} vs {getattr(expect, k)}"
            for k in shapes.as_dict()
            if k != "max_steps" and getattr(shapes, k) != getattr(expect, k)
        )
        if diff:
            raise UserError(f"checkpoint {path} does not fit this environment ({diff}).")
    try:
        agent_config = AgentNetConfig(**payload["agent_config"])
        mixer_config = MixerConfig(**payload["mixer_config"])
    except TypeError as exc:
        raise UserError(f"checkpoint {path} was written by a different build ({exc}).") from exc
    agent = AgentNetwork(shapes.obs_dim, shapes.n_agents, shapes.n_actions, agent_config)
    mixer = make_mixer(shapes.n_agents, shapes.state_dim, mixer_config)
    try:
        agent.load_state_dict(payload["agent"])
        mixer.load_state_dict(payload["mixer"])
    except (RuntimeError, KeyError) as exc:
        raise UserError(
            f"checkpoint {path} holds weights that do not match its own configuration."
        ) from exc
    return Checkpoint(
        agent=agent.to(device).eval(),
        mixer=mixer.to(device).eval(),
        shapes=shapes,
        agent_config=agent_config,
        mixer_config=mixer_config,
        env=payload["env"],
        meta=payload["meta"],
        resume=payload.get("resume"),
    )
