"""Checkpoints of learned-topology methods: method name, config, the team shape, every
learned tensor (parameters and buffers: pruned supports, dropped agents, stage) and the
token weight it was trained at, in one ``torch.save`` file.

Loading uses ``torch.load(..., weights_only=True)`` (plain values and tensors only, so
opening a file never runs code) and then checks it as :mod:`core.qmix.checkpoint` does a
QMIX one: a corrupt file, an unknown method, a config field of the wrong type or out of
range, a tensor that does not have the shape the config implies or is not finite, or a
team it does not fit is a :class:`~core.errors.UserError` (one sentence, exit 2).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import torch

from core.baselines.method import GraphMethod, TeamShape
from core.baselines.registry import METHODS, build_method
from core.errors import UserError
from core.qmix.checkpoint import read_payload, write_payload

FORMAT = "agentqmix-baseline"
VERSION = 2
"""2: the team settings are stored once, as the team options (``team``), the token weight
among them, as an Agent Q-Mix checkpoint stores them; 1 (still read) kept the token weight
in a key of its own beside them."""
READABLE = (1, 2)


@dataclass
class LoadedMethod:
    """A checkpoint's method, ready to act, and what made it."""

    method: GraphMethod
    team: dict[str, Any]
    """The team options it was trained with (``asdict(TeamOptions)``, credentials redacted)."""
    meta: dict[str, Any]
    """Training facts: episodes, tokens, seed, run id, stages."""

    @property
    def token_weight(self) -> float:
        """w_tok of the reward it was trained on (one of its team settings)."""
        return float(self.team["token_weight"])


def save_method(
    path: str | Path,
    method: GraphMethod,
    team: dict[str, Any],
    meta: dict[str, Any] | None = None,
) -> Path:
    """Write atomically (tmp file + rename), never over a device node, pipe or socket
    (:func:`core.paths.write_file`); a full disk is one sentence, the old file kept."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "format": FORMAT,
        "version": VERSION,
        "method": method.name,
        "config": {f.name: getattr(method.config, f.name) for f in fields(method.config)},
        "shape": method.shape.as_dict(),
        "state": {k: v.detach().cpu() for k, v in method.state_dict().items()},
        "team": team,
        "meta": meta or {},
    }
    return write_payload(path, payload)


def load_method(path: str | Path, expect: TeamShape | None = None) -> LoadedMethod:
    """Load, check and rebuild; ``expect`` checks the team (agents, rounds, features)."""
    path = Path(path)
    payload = read_payload(path)
    if payload.get("format") != FORMAT:
        raise UserError(f"checkpoint {path} is not a learned-topology checkpoint.")
    version = payload.get("version")
    if version not in READABLE:
        raise UserError(
            f"checkpoint {path} has format version {version}; this build reads "
            f"{' and '.join(map(str, READABLE))}."
        )
    missing = [k for k in ("method", "config", "shape", "state", "team") if k not in payload]
    if missing:
        raise UserError(f"checkpoint {path} is incomplete: it lacks {', '.join(missing)}.")
    name = payload["method"]
    if name not in METHODS:
        raise UserError(f"checkpoint {path} names an unknown method {name!r}.")
    cls = METHODS[name]
    config = _config(cls.config_class, payload["config"], path)
    shape = _shape(payload["shape"], path)
    if expect is not None and (shape.n_agents, shape.feature_width) != (
        expect.n_agents,
        expect.feature_width,
    ):
        raise UserError(
            f"checkpoint {path} does not fit this team ({shape.n_agents} agents and "
            f"{shape.feature_width} task features vs {expect.n_agents} and {expect.feature_width})."
        )
    if expect is not None and shape.n_rounds != expect.n_rounds and name == "agentdropout":
        raise UserError(
            f"checkpoint {path} learned {shape.n_rounds} rounds of graphs; this team plays "
            f"{expect.n_rounds} (pass --rounds {shape.n_rounds})."
        )
    team = payload["team"] if isinstance(payload["team"], dict) else {}
    if version == 1:  # the token weight had a key of its own beside the team
        team = {**team, "token_weight": payload.get("token_weight")}
    weight = team.get("token_weight")
    if isinstance(weight, bool) or not isinstance(weight, int | float) or not math.isfinite(weight):
        raise UserError(f"checkpoint {path} has an invalid token weight ({weight!r}).")
    if expect is not None:
        shape = TeamShape(shape.n_agents, expect.n_rounds, shape.feature_width, shape.roles)
    method = build_method(name, config, shape)
    _load_state(method, payload["state"], path)
    meta = payload.get("meta") if isinstance(payload.get("meta"), dict) else {}
    return LoadedMethod(method.eval(), team, meta)


def _config(cls: type, values: Any, path: Path) -> Any:
    if not isinstance(values, dict):
        raise UserError(f"checkpoint {path} is incomplete: its config is malformed.")
    default = cls()
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise UserError(f"checkpoint {path} was written by a different build ({unknown[0]}).")
    for key, value in values.items():
        want = type(getattr(default, key))
        ok = isinstance(value, want) and (want is not int or not isinstance(value, bool))
        if want is float and isinstance(value, int) and not isinstance(value, bool):
            ok = True
        if not ok:
            raise UserError(f"checkpoint {path} has an invalid {key} ({value!r}).")
    config = cls(**{**asdict(default), **_earlier(cls, values)})
    try:
        config.validate()
    except ValueError as exc:
        raise UserError(f"checkpoint {path} has an invalid configuration ({exc}).") from exc
    return config


def _earlier(cls: type, values: dict[str, Any]) -> dict[str, Any]:
    """A config written before a setting existed keeps the behaviour it was trained with:
    G-Designer checkpoints without ``decoder`` learned the bilinear decoder, those without
    ``minmax_diagonal`` the min-max over the off-diagonal pairs."""
    if cls.__name__ == "GDesignerConfig" and "decoder" not in values:
        values = {**values, "decoder": "bilinear"}
    if cls.__name__ == "GDesignerConfig" and "minmax_diagonal" not in values:
        values = {**values, "minmax_diagonal": False}
    return values


def _shape(values: Any, path: Path) -> TeamShape:
    try:
        shape = TeamShape(
            n_agents=int(values["n_agents"]),
            n_rounds=int(values["n_rounds"]),
            feature_width=int(values["feature_width"]),
            roles=tuple(str(r) for r in values.get("roles", ())),
        )
        if not all(
            1 <= v <= 1 << 16 for v in (shape.n_agents, shape.n_rounds, shape.feature_width)
        ):
            raise ValueError("size out of range")
        shape.validate()
    except (KeyError, TypeError, ValueError) as exc:
        raise UserError(f"checkpoint {path} has a malformed team shape ({exc}).") from None
    return shape


def _load_state(method: GraphMethod, state: Any, path: Path) -> None:
    if not isinstance(state, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
    ):
        raise UserError(f"checkpoint {path} holds weights that are not named tensors.")
    want = {k: (tuple(v.shape), v.dtype) for k, v in method.state_dict().items()}
    have = {k: (tuple(v.shape), v.dtype) for k, v in state.items()}
    if want != have:
        raise UserError(f"checkpoint {path} holds weights that do not match its own configuration.")
    for name, tensor in state.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise UserError(f"checkpoint {path} holds non-finite weights ({name}).")
    method.load_state_dict(state)
