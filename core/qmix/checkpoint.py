"""Checkpoints: weights, configuration and shapes in one ``torch.save`` file.

Loading uses ``torch.load(..., weights_only=True)``: a checkpoint holds only tensors
and plain Python values, so opening one never runs code. A corrupt file, one whose sizes
are not positive integers within :data:`~core.qmix.env.SHAPE_LIMITS`, whose weights are
not finite or do not have the shapes its own configuration implies (checked on the
``meta`` device, before any memory is allocated), or whose shapes do not fit the
environment, is a :class:`UserError` (one line, exit 2).
"""

from __future__ import annotations

import io
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import torch

from core.errors import UserError
from core.paths import check_output_file, write_file
from core.qmix.encoders import AgentNetConfig, AgentNetwork
from core.qmix.env import EnvShapes, check_shapes, is_integer
from core.qmix.mixers import MixerConfig, make_mixer

FORMAT = "agentqmix-checkpoint"
VERSION = 1
MAX_WIDTH = 1 << 16
"""Largest layer width (and layer count is at most :data:`MAX_LAYERS`) a checkpoint may ask for."""
MAX_LAYERS = 64


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
    return write_payload(path, payload)


def write_payload(path: Path, payload: dict[str, Any]) -> Path:
    """Write a checkpoint's dict atomically, never over a device node, pipe or socket."""
    # Serialised in memory, written by us: torch's own file writer reports a full disk as
    # RuntimeErrors ("basic_ios::clear: iostream error", "unexpected pos") that name no
    # cause; a plain write raises the OSError (ENOSPC) that says what happened.
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    # Checked again at the rename: never over a device node, pipe or socket (core.paths).
    return write_file(path, buffer.getvalue(), "--out")


def read_payload(path: str | Path) -> dict[str, Any]:
    """The file's top-level dict (any agentqmix checkpoint), or one sentence why not."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"checkpoint {path} is a folder, not a checkpoint file.")
    if not path.is_file():
        raise UserError(f"checkpoint {path} does not exist.")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # whatever the bytes are, torch could not read a checkpoint
        raise UserError(
            f"checkpoint {path} is not a readable agentqmix checkpoint ({type(exc).__name__})."
        ) from exc
    if not isinstance(payload, dict):
        raise UserError(f"checkpoint {path} is not an agentqmix checkpoint.")
    return payload


def load_checkpoint(
    path: str | Path, device: torch.device | str = "cpu", expect: EnvShapes | None = None
) -> Checkpoint:
    """Load and rebuild; ``expect`` checks the shapes against an environment."""
    path = Path(path)
    payload = read_payload(path)
    if payload.get("format") != FORMAT:
        raise UserError(f"checkpoint {path} is not an agentqmix checkpoint.")
    if payload.get("version") != VERSION:
        raise UserError(
            f"checkpoint {path} has format version {payload.get('version')}; this build reads {VERSION}."
        )
    parts = ("shapes", "agent_config", "mixer_config", "env", "meta", "agent", "mixer")
    missing = [k for k in parts if k not in payload]
    if missing:
        raise UserError(f"checkpoint {path} is incomplete: it lacks {', '.join(missing)}.")
    if not isinstance(payload["shapes"], dict):
        raise UserError(f"checkpoint {path} is incomplete: its shapes are malformed.")
    shapes = check_shapes(payload["shapes"], f"checkpoint {path}")
    if expect is not None and expect != shapes:
        diff = ", ".join(
            f"{k} {getattr(shapes, k)} vs {getattr(expect, k)}"
            for k in shapes.as_dict()
            if k != "max_steps" and getattr(shapes, k) != getattr(expect, k)
        )
        if diff:
            raise UserError(f"checkpoint {path} does not fit this environment ({diff}).")
    agent_config = _config(AgentNetConfig, payload["agent_config"], path)
    mixer_config = _config(MixerConfig, payload["mixer_config"], path)
    agent_weights = _weights(payload["agent"], path)
    mixer_weights = _weights(payload["mixer"], path)
    # Build on the meta device first: a crafted configuration costs no memory there, and
    # weights of exactly its shapes are no larger than the file already loaded.
    with torch.device("meta"):
        expected = (
            AgentNetwork(shapes.obs_dim, shapes.n_agents, shapes.n_actions, agent_config),
            make_mixer(shapes.n_agents, shapes.state_dim, mixer_config),
        )
    for net, weights in zip(expected, (agent_weights, mixer_weights), strict=True):
        want = {k: tuple(v.shape) for k, v in net.state_dict().items()}
        if want != {k: tuple(v.shape) for k, v in weights.items()}:
            raise UserError(
                f"checkpoint {path} holds weights that do not match its own configuration."
            )
    agent = AgentNetwork(shapes.obs_dim, shapes.n_agents, shapes.n_actions, agent_config)
    mixer = make_mixer(shapes.n_agents, shapes.state_dim, mixer_config)
    try:
        agent.load_state_dict(agent_weights)
        mixer.load_state_dict(mixer_weights)
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


def _config(cls: type, values: Any, path: Path) -> Any:
    """A network config from a checkpoint: known fields, of the default's type, in range."""
    if not isinstance(values, dict):
        raise UserError(f"checkpoint {path} is incomplete: its {cls.__name__} is malformed.")
    try:
        config = cls(**values)
    except TypeError as exc:
        raise UserError(f"checkpoint {path} was written by a different build ({exc}).") from exc
    for f in fields(cls):
        value, default = getattr(config, f.name), getattr(cls(), f.name)
        if isinstance(default, bool):
            ok = isinstance(value, bool)
        elif isinstance(default, int):
            limit = MAX_LAYERS if f.name.endswith("layers") else MAX_WIDTH
            ok = is_integer(value) and value <= limit
        else:
            ok = isinstance(value, type(default))
        if not ok:
            raise UserError(f"checkpoint {path} has an invalid {f.name} ({value!r}).")
    try:
        config.validate()
    except ValueError as exc:
        raise UserError(f"checkpoint {path} has an invalid configuration ({exc}).") from exc
    return config


def _weights(values: Any, path: Path) -> dict[str, torch.Tensor]:
    """A state dict from a checkpoint: named floating-point tensors, every value finite."""
    if not isinstance(values, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in values.items()
    ):
        raise UserError(f"checkpoint {path} holds weights that are not named tensors.")
    for name, tensor in values.items():
        if not tensor.is_floating_point() or not bool(torch.isfinite(tensor).all()):
            raise UserError(f"checkpoint {path} holds non-finite or non-float weights ({name}).")
    return values


def ensure_writable(path: str | Path, flag: str = "--out") -> Path:
    """Check, before any work, that a checkpoint can be written at ``path``
    (:func:`core.paths.check_output_file`); UserError naming ``flag`` otherwise."""
    return check_output_file(path, flag)
