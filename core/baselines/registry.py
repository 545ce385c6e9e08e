"""The learned-topology methods by name (``agentqmix train --method NAME``), their configs
from ``KEY=VALUE`` pairs, and the one function that builds a method for a team."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import fields, replace
from typing import Any

import numpy as np

from core.baselines.agentdropout import AgentDropout
from core.baselines.agentprune import AgentPrune
from core.baselines.gdesigner import GDesigner, role_profiles
from core.baselines.gptswarm import GPTSwarm
from core.baselines.method import GraphMethod, MethodConfig, TeamShape
from core.baselines.names import METHOD_KNOBS, METHOD_NAMES
from core.errors import UserError

METHODS: dict[str, type[GraphMethod]] = {
    cls.name: cls for cls in (GPTSwarm, AgentPrune, AgentDropout, GDesigner)
}
"""name -> method class; each class names its config class, knob and paper."""
assert tuple(METHODS) == METHOD_NAMES
assert {name: cls.knob for name, cls in METHODS.items()} == METHOD_KNOBS


def method_class(name: str) -> type[GraphMethod]:
    if name not in METHODS:
        raise UserError(f"no learned-topology method {name!r}; choose one of {', '.join(METHODS)}.")
    return METHODS[name]


def config_fields(name: str) -> dict[str, Any]:
    """The settable fields of method ``name``'s config and their defaults."""
    return {
        f.name: getattr(method_class(name).config_class(), f.name)
        for f in fields(method_class(name).config_class)
    }


def method_config(name: str, values: dict[str, Any] | None = None) -> MethodConfig:
    """Method ``name``'s config with ``values`` (typed, or strings to parse) over its
    defaults; a bad key or value is one sentence naming it."""
    cls = method_class(name).config_class
    config = cls()
    changes = {}
    for key, value in (values or {}).items():
        if key not in config_fields(name):
            known = ", ".join(config_fields(name))
            raise UserError(f"{name} has no setting {key!r}; its settings are {known}.")
        changes[key] = _typed(name, key, getattr(config, key), value)
    config = replace(config, **changes)
    try:
        config.validate()
    except ValueError as exc:
        raise UserError(f"{name}: {exc}.") from None
    return config


def check_protocol(config: MethodConfig, actions: str) -> None:
    """A method that verifies (``tools``, the with-tools protocol) needs a team whose action
    set has ``execute_verify``: one sentence otherwise."""
    if config.tools and actions == "graph":
        raise UserError(
            "a method with tools=true verifies, which --actions graph forbids; "
            "use --actions all, or tools=false for the graph-only protocol."
        )


def parse_pairs(pairs: Sequence[str], flag: str = "--set") -> dict[str, str]:
    """``["prune_ratio=0.3", "decode=mask"]`` -> ``{"prune_ratio": "0.3", ...}``."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise UserError(f"{flag} takes KEY=VALUE such as prune_ratio=0.3, not {pair!r}.")
        if key.strip() in out:  # the last would win silently; the user meant one of them
            raise UserError(f"{flag} gives {key.strip()} twice; give each setting once.")
        out[key.strip()] = value.strip()
    return out


def _typed(method: str, key: str, default: Any, value: Any) -> Any:
    """``value`` as the type of ``default`` (bool, int, float or str)."""
    where = f"{method} setting {key}"
    if not isinstance(value, str):
        ok = isinstance(value, type(default)) or (
            isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool)
        )
        if not ok:
            raise UserError(f"{where} must be a {type(default).__name__}, not {value!r}.")
        return float(value) if isinstance(default, float) else value
    try:
        if isinstance(default, bool):
            if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(value)
            return value.lower() in ("true", "1", "yes")
        if isinstance(default, int):
            return int(value)
        if isinstance(default, float):
            number = float(value)
            if not math.isfinite(number):
                raise ValueError(value)
            return number
    except ValueError:
        kind = "true or false" if isinstance(default, bool) else f"a {type(default).__name__}"
        raise UserError(f"{where} must be {kind}, not {value!r}.") from None
    return value


def build_method(
    name: str,
    config: MethodConfig,
    shape: TeamShape,
    embed: Callable[[str], np.ndarray] | None = None,
) -> GraphMethod:
    """A fresh method for a team. G-Designer embeds its agents' role prompts with ``embed``
    (the team's task embedder); without it (a checkpoint about to be loaded) its profile
    buffer starts at zero and the checkpoint fills it."""
    cls = method_class(name)
    if cls is GDesigner:
        profiles = role_profiles(shape.roles, embed) if embed is not None else None
        return GDesigner(config, shape, profiles)
    return cls(config, shape)
