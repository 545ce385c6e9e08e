"""A sweep's plan and what it stores, as plain data: the flags' parsers, :class:`SweepConfig`,
one :class:`TrialSpec` per trial and one :class:`FixedSpec` per fixed topology (the plan),
:class:`StoredSweep` (what a resumed sweep finds stored, what is left) and the rows of the
result (:func:`trial_row`, :func:`fixed_row`), built alike for a fresh and a resumed sweep.

No Ray here: :mod:`core.experiment.sweep` (the driver), :mod:`core.experiment.sweep_trials`
(what the workers run) and :mod:`core.experiment.sweep_resume` (what the store holds) all
build on it. The specs travel to the workers pickled, by this module's path.
"""

from __future__ import annotations

import json
import math
import secrets
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from core.baselines.names import METHOD_NAMES
from core.baselines.training import BaselineTrainConfig
from core.errors import UserError
from core.experiment.policies import (
    point_stats,
)
from core.paths import check_folder, check_not_special
from core.qmix.training import TrainConfig
from core.team.options import TeamOptions
from core.team.recipes import TEAM_RECIPE
from core.team.runtime import reward
from core.team.settings import PASS_THROUGH_RULES
from core.team.topologies import FIXED_TOPOLOGIES

SWEEP_METHODS = ("qmix", *METHOD_NAMES)
"""What a sweep's trials can train (``--methods``)."""


# --------------------------------------------------------------------------- configuration


@dataclass
class SweepConfig:
    """What a sweep trains and where it runs (the team and the learner come separately)."""

    token_weights: tuple[float, ...]
    """w_tok of each trial's reward."""
    seeds: tuple[int, ...]
    """Training seeds; one trial per (token weight, seed)."""
    out: Path
    """Folder for the checkpoints and ``sweep.json``."""
    eval_episodes: int = 100
    """K: held-out tasks every trial and every fixed topology plays."""
    eval_seed: int = 0
    """E: the held-out stream the K tasks come from."""
    ray_address: str | None = None
    """An existing Ray cluster (``HOST:PORT``, ``ray://HOST:PORT`` or ``auto``); None = start
    a local Ray with this machine's cores."""
    max_parallel: int | None = None
    """Trials in flight at once; None = the cluster's CPUs. On a shared local server: tasks
    of any kind in flight; None = 1 (it decodes one call at a time)."""
    topologies: tuple[str, ...] = tuple(FIXED_TOPOLOGIES)
    """Fixed topologies evaluated beside the trials."""
    methods: tuple[str, ...] = ("qmix",)
    """What each trial trains: Agent Q-Mix and/or learned-topology methods (docs/baselines.md)."""
    knobs: dict[str, tuple[str, tuple[float, ...]]] = field(default_factory=dict)
    """Per learned-topology method, the setting swept besides the token weight and its values
    (``--knob agentprune=0.3,0.5``); a method without one trains at its defaults."""
    resume: str | None = None
    """The id of a sweep to continue (``--resume``): only what the store lacks of it runs."""
    pass_through: tuple[str, ...] | None = None
    """Decision rules (``--pass-through off,unanimous``): every trial and every fixed
    topology is played once under each; None = the team options' own rule."""

    def rules(self, team: TeamOptions) -> tuple[str, ...]:
        """The decision rules this sweep plays, in order (``team``'s when none are given)."""
        return self.pass_through if self.pass_through is not None else (team.pass_through,)

    def counts(self) -> tuple[int, int]:
        """(trials, fixed-topology evaluations) the plan holds."""
        rules = 1 if self.pass_through is None else len(self.pass_through)
        per_rule = sum(len(self.knobs[m][1]) if m in self.knobs else 1 for m in self.methods)
        per_rule *= len(self.token_weights) * len(self.seeds)
        return per_rule * rules, len(self.topologies) * rules

    def validate(self) -> None:
        if not self.methods:
            raise UserError("--methods needs at least one method.")
        unknown = [m for m in self.methods if m not in SWEEP_METHODS]
        if unknown:
            raise UserError(f"--methods takes {', '.join(SWEEP_METHODS)}, not {unknown[0]!r}.")
        for method in self.knobs:
            if method not in self.methods:
                raise UserError(f"--knob {method}=... names a method that --methods leaves out.")
        if not self.token_weights:
            raise UserError("--token-weights needs at least one weight.")
        if not self.seeds:
            raise UserError("--seeds needs at least one seed.")
        if self.eval_episodes < 1:
            raise UserError(f"--eval-episodes must be >= 1, not {self.eval_episodes}.")
        if self.max_parallel is not None and self.max_parallel < 1:
            raise UserError(f"--max-parallel must be >= 1, not {self.max_parallel}.")
        unknown = [t for t in self.topologies if t not in FIXED_TOPOLOGIES]
        if unknown:
            raise UserError(f"no fixed topology {unknown[0]!r}.")
        if self.pass_through is not None:
            _check_rules(self.pass_through)
        check_folder(self.out, "--out")
        names = [
            checkpoint_name(w, s, pass_through=rule)
            for rule in self.pass_through or (TeamOptions.pass_through,)
            for w in self.token_weights
            for s in self.seeds
        ]
        for name in ("sweep.json", *names):
            check_not_special(self.out / name, "--out")
        held = held_sweep_id(self.out / "sweep.json")
        if held is None or held == self.resume:
            return
        if self.resume is None and not held:
            raise UserError(f"--out {self.out} already holds a sweep.json; choose another folder.")
        if self.resume is None:
            raise UserError(
                f"--out {self.out} already holds sweep {held} (sweep.json); continue it with "
                f"--resume {held} or choose another folder."
            )
        raise UserError(
            f"--out {self.out} holds the sweep.json of {held or 'another sweep'}, not of "
            f"{self.resume}; give the folder {self.resume} wrote to, or another."
        )


def held_sweep_id(path: Path) -> str | None:
    """The id of the sweep whose ``sweep.json`` is at ``path`` ("" when the file is not a
    sweep's); None when there is no file."""
    if not path.exists():
        return None
    try:
        held = json.loads(path.read_text()).get("sweep_id")
    except (OSError, ValueError, AttributeError):
        return ""
    return held if isinstance(held, str) else ""


def parse_token_weights(text: str) -> tuple[float, ...]:
    """``"0.1,0.3,1.0"`` -> ``(0.1, 0.3, 1.0)``; one sentence on bad input."""
    return _parse_list(
        text, "--token-weights", "weight", float, lambda w: math.isfinite(w) and w >= 0,
        "comma-separated numbers >= 0 such as 0.1,0.3,1.0",
    )  # fmt: skip


def parse_seeds(text: str) -> tuple[int, ...]:
    """``"0,1,2"`` -> ``(0, 1, 2)``; one sentence on bad input."""
    return _parse_list(
        text, "--seeds", "seed", int, lambda s: 0 <= s < 2**63,
        "comma-separated whole numbers >= 0 such as 0,1,2",
    )  # fmt: skip


def _parse_list(
    text: str,
    flag: str,
    noun: str,
    convert: Callable[[str], Any],
    valid: Callable[[Any], bool],
    takes: str,
) -> tuple[Any, ...]:
    """A comma-separated list for ``flag``: each item converted and checked, no repeats."""
    example = f"{flag} takes {takes}"
    items = _items(text, flag, noun)
    try:
        values = tuple(convert(t) for t in items)
    except ValueError:
        raise UserError(f"{example}, not {text!r}.") from None
    if not all(valid(v) for v in values):
        raise UserError(f"{example}, not {text!r}.")
    return _distinct(values, flag)


def _items(text: str, flag: str, what: str) -> list[str]:
    items = [t.strip() for t in text.split(",")]
    if not any(items):
        raise UserError(f"{flag} needs at least one {what}.")
    if not all(items):
        raise UserError(f"{flag} has an empty item in {text!r}.")
    return items


def _distinct(values: tuple[Any, ...], flag: str) -> tuple[Any, ...]:
    repeated = [v for i, v in enumerate(values) if v in values[:i]]
    if repeated:
        shown = repeated[0] if isinstance(repeated[0], str) else f"{repeated[0]:g}"
        raise UserError(f"{flag} repeats {shown}.")
    return values


def parse_pass_through(text: str) -> tuple[str, ...]:
    """``"off,unanimous"`` -> ``("off", "unanimous")``: the decision rules a sweep plays
    every trial and fixed topology under; one sentence on bad input."""
    return _check_rules(_distinct(tuple(_items(text, "--pass-through", "rule")), "--pass-through"))


def _check_rules(rules: tuple[str, ...]) -> tuple[str, ...]:
    if not rules:
        raise UserError("--pass-through needs at least one rule.")
    unknown = [r for r in rules if r not in PASS_THROUGH_RULES]
    if unknown:
        raise UserError(
            f"--pass-through takes {', '.join(PASS_THROUGH_RULES)} (comma-separated), "
            f"not {unknown[0]!r}."
        )
    return rules


def rule_text(pass_through: str) -> str:
    """``, pass-through unanimous`` for a point played under the consensus pass-through; ""
    under the paper's rule (the default), so that a sweep without it reads as before."""
    return "" if pass_through == TeamOptions.pass_through else f", pass-through {pass_through}"


def parse_topologies(text: str) -> tuple[str, ...]:
    """``"single,star"`` -> ``("single", "star")``; one sentence on bad input."""
    names = tuple(_items(text, "--topologies", "topology"))
    unknown = [t for t in names if t not in FIXED_TOPOLOGIES]
    if unknown:
        raise UserError(f"--topologies takes {', '.join(FIXED_TOPOLOGIES)}, not {unknown[0]!r}.")
    return _distinct(names, "--topologies")


def parse_methods(text: str) -> tuple[str, ...]:
    """``"qmix,agentprune"`` -> ``("qmix", "agentprune")``; one sentence on bad input."""
    methods = tuple(_items(text, "--methods", "method"))
    unknown = [m for m in methods if m not in SWEEP_METHODS]
    if unknown:
        raise UserError(f"--methods takes {', '.join(SWEEP_METHODS)}, not {unknown[0]!r}.")
    return _distinct(methods, "--methods")


def parse_knobs(specs: Sequence[str]) -> dict[str, tuple[str, tuple[float, ...]]]:
    """``["agentprune=0.3,0.5", "agentdropout.node_dropout=0.25,0.5"]`` -> per method, the
    setting (its registry knob unless ``.FIELD`` names another) and its values."""
    from core.baselines.registry import config_fields, method_class

    knobs: dict[str, tuple[str, tuple[float, ...]]] = {}
    for spec in specs:
        target, sep, values = spec.partition("=")
        method, _, setting = target.strip().partition(".")
        if not sep or not method:
            raise UserError(
                f"--knob takes METHOD[.SETTING]=V1,V2 such as agentprune=0.3,0.5, not {spec!r}."
            )
        if method not in METHOD_NAMES:
            raise UserError(f"--knob names {method!r}; knobs belong to {', '.join(METHOD_NAMES)}.")
        setting = setting or method_class(method).knob
        if setting is None:
            raise UserError(f"{method} has no knob of its own; give --knob {method}.SETTING=....")
        default = config_fields(method).get(setting)
        if isinstance(default, bool) or not isinstance(default, int | float):
            raise UserError(f"{method} has no numeric setting {setting!r} to sweep.")
        if method in knobs:
            raise UserError(f"--knob gives {method} twice.")
        knobs[method] = (setting, _checked_knob_values(method, setting, values, f"--knob {target}"))
    return knobs


def _checked_knob_values(method: str, setting: str, text: str, flag: str) -> tuple[float, ...]:
    """The values of one ``--knob``, each checked by the method's own rules (as ``train --set``
    is), so that a value no trial can train with is refused before the sweep starts."""
    from core.baselines.registry import config_fields, method_config

    values = _parse_list(
        text, flag, "value", float, math.isfinite, "comma-separated numbers such as 0.3,0.5"
    )
    if isinstance(config_fields(method)[setting], int):
        if any(v != int(v) for v in values):
            raise UserError(f"{flag} takes whole numbers ({method}'s {setting} is a count).")
        values = tuple(int(v) for v in values)
    for value in values:
        try:
            method_config(method, {setting: value})
        except UserError as err:
            reason = str(err).removeprefix(f"{method}: ").rstrip(".")
            raise UserError(f"{flag}: {reason}.") from None
    return values


def new_sweep_id() -> str:
    """``sweep-YYYYmmdd-HHMMSS-xxxx``, like a run id."""
    return f"sweep-{datetime.now():%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


def checkpoint_name(
    token_weight: float,
    seed: int,
    method: str = "qmix",
    knob: dict[str, float] | None = None,
    pass_through: str = TeamOptions.pass_through,
) -> str:
    """``tw0.1-seed0.pt`` for Agent Q-Mix; ``agentprune-prune_ratio0.3-tw0.1-seed0.pt``;
    ``tw0.1-seed0-pass-through-unanimous.pt`` under the consensus pass-through."""
    rule = "" if pass_through == TeamOptions.pass_through else f"-pass-through-{pass_through}"
    if method == "qmix":
        return f"tw{token_weight:g}-seed{seed}{rule}.pt"
    knobs = "".join(f"-{k}{v:g}" for k, v in (knob or {}).items())
    return f"{method}{knobs}-tw{token_weight:g}-seed{seed}{rule}.pt"


# --------------------------------------------------------------------------- the plan


@dataclass
class TrialSpec:
    """One trial: the team at one token weight, trained from one seed."""

    sweep_id: str
    token_weight: float
    seed: int
    team: TeamOptions
    """The team with this trial's token weight, seed and decision rule."""
    train: TrainConfig
    """The learner with this trial's seed (Agent Q-Mix)."""
    eval_episodes: int
    eval_seed: int
    method: str = "qmix"
    """``qmix`` or a learned-topology method."""
    knob: dict[str, float] = field(default_factory=dict)
    """The method's swept setting and its value in this trial (empty: its defaults)."""
    baseline_train: BaselineTrainConfig | None = None
    """The budget of a learned-topology method (None for qmix)."""

    @property
    def pass_through(self) -> str:
        """The decision rule this trial trains and is evaluated under."""
        return self.team.pass_through

    @property
    def key(self) -> dict[str, Any]:
        """What every run of this trial stores as ``config["sweep"]``."""
        return {
            "id": self.sweep_id,
            "token_weight": self.token_weight,
            "seed": self.seed,
            "method": self.method,
            "knob": self.knob,
            "pass_through": self.pass_through,
        }

    @property
    def label(self) -> str:
        knob = "".join(f", {k} {v:g}" for k, v in self.knob.items())
        return (
            f"{self.method}{knob}, token weight {self.token_weight:g}, seed {self.seed}"
            f"{rule_text(self.pass_through)}"
        )


@dataclass
class FixedSpec:
    """One fixed topology's evaluation: played under one decision rule (the rule of the
    trials it is compared with) at the sweep's first token weight; its reward is re-scored
    at every weight."""

    sweep_id: str
    name: str
    team: TeamOptions
    """The team it plays: the first swept weight, this evaluation's decision rule."""

    @property
    def pass_through(self) -> str:
        return self.team.pass_through

    @property
    def key(self) -> dict[str, Any]:
        """What its eval run stores as ``config["sweep"]``."""
        return fixed_key(self.sweep_id, self.name, self.pass_through)

    @property
    def label(self) -> str:
        return f"fixed topology {self.name}{rule_text(self.pass_through)}"


def _knob_values(sweep: SweepConfig, method: str) -> list[dict[str, float]]:
    """The knob settings ``method``'s trials take: one per swept value, else its defaults."""
    if method not in sweep.knobs:
        return [{}]
    setting, values = sweep.knobs[method]
    return [{setting: v} for v in values]


def plan_trials(
    sweep_id: str,
    opts: TeamOptions,
    sweep: SweepConfig,
    train_config: TrainConfig,
    baseline_config: BaselineTrainConfig,
) -> list[TrialSpec]:
    """Every trial of the grid: per method, knob value, decision rule, token weight and seed."""
    return [
        TrialSpec(
            sweep_id,
            w,
            s,
            replace(opts, token_weight=w, seed=s, pass_through=rule),
            replace(train_config, seed=s),
            sweep.eval_episodes,
            sweep.eval_seed,
            method,
            knob,
            None if method == "qmix" else replace(baseline_config, seed=s),
        )
        for method in sweep.methods
        for knob in _knob_values(sweep, method)
        for rule in sweep.rules(opts)
        for w in sweep.token_weights
        for s in sweep.seeds
    ]


def plan_fixed(sweep_id: str, opts: TeamOptions, sweep: SweepConfig) -> list[FixedSpec]:
    """Every fixed topology under every decision rule: a point is compared only with points
    played under the same rule. They do not learn: the token weight changes their reward,
    not their play, so each plays once (at the first weight) and is re-scored at every weight."""
    first = sweep.token_weights[0]
    return [
        FixedSpec(sweep_id, name, replace(opts, token_weight=first, pass_through=rule))
        for name in sweep.topologies
        for rule in sweep.rules(opts)
    ]


# --------------------------------------------------------------------------- stored results and rows


@dataclass
class StoredSweep:
    """What the store holds of a sweep being resumed, and what is left to run (a new sweep:
    nothing stored, everything left)."""

    missing: list[TrialSpec]
    """Trials to run: nothing finished of them is stored."""
    missing_topologies: list[FixedSpec]
    """Fixed topologies to evaluate (each under one decision rule)."""
    trials: list[dict[str, Any]] = field(default_factory=list)
    """The finished trials' rows, read back from the store (as :func:`trial_row` builds them)."""
    fixed: list[dict[str, Any]] = field(default_factory=list)
    """The evaluated fixed topologies' rows (as :func:`fixed_row` builds them)."""
    stale: list[str] = field(default_factory=list)
    """Runs of trials or topologies that did not finish (a driver killed while it logged
    them): deleted before these run again, so that each is stored once."""
    redone: list[str] = field(default_factory=list)
    """What runs again although some of it was stored (labels, for the notice)."""

    def summary(self, trials: int, topologies: int) -> list[str]:
        """What resuming skips and what it runs again, one line each."""
        lines = [
            f"resuming: skipping {len(self.trials)} of {trials} trials and {len(self.fixed)} of "
            f"{topologies} fixed topologies (stored); running {_count(len(self.missing), 'trial')} "
            f"and {_count(len(self.missing_topologies), 'fixed topology', 'fixed topologies')}."
        ]
        return lines + [
            f"{what} did not finish storing: its runs are deleted and it runs again."
            for what in self.redone
        ]

    def discard_stale(self, db: str | None) -> None:
        from core.store.commands import delete_run

        for run_id in self.stale:
            delete_run(run_id, db)


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else many or one + 's'}"


TRIAL_FACTS = ("updates", "seconds", "node")
"""What a trial's train run keeps in ``config["trial"]`` for a resumed sweep's rows."""


def trial_run_config(spec: TrialSpec) -> dict[str, Any]:
    """What a trial's train run stores as its config (besides ``config["trial"]``)."""
    config = {**spec.team.run_config(), "train": asdict(spec.train), "sweep": spec.key}
    if spec.method == "qmix":
        config["recipe"] = TEAM_RECIPE
        return config
    from core.baselines.registry import method_config
    from core.experiment.methods import config_dict

    config["train"] = asdict(spec.baseline_train or BaselineTrainConfig())
    config["method"] = {
        "name": spec.method,
        "config": config_dict(method_config(spec.method, spec.knob)),
    }
    return config


def trial_row(
    spec: TrialSpec,
    checkpoint: str,
    held_out: Sequence[Any],
    facts: dict[str, Any],
    train_run: str | None,
    eval_run: str | None,
) -> dict[str, Any]:
    """A trial's row of the result. ``held_out``: its held-out episodes (anything with
    ``score``, ``tokens``, ``reward``); ``facts``: ``train_episodes`` and :data:`TRIAL_FACTS`."""
    return {
        **trial_id(spec),
        "checkpoint": checkpoint,
        **point_stats(held_out),
        "train_episodes": facts.get("train_episodes"),
        **{k: facts.get(k) for k in TRIAL_FACTS},
        "train_run_id": train_run,
        "eval_run_id": eval_run,
    }


def fixed_row(
    name: str,
    held_out: Sequence[Any],
    team: TeamOptions,
    token_weights: Sequence[float],
    run_id: str | None,
) -> dict[str, Any]:
    """A fixed topology's row: its figures as played (at ``team``'s token weight, under its
    decision rule) and its mean reward re-scored at every swept weight."""
    rescored = []
    for w in token_weights:
        config = replace(team, token_weight=w).runtime_config()
        stats = point_stats(held_out, [reward(r.score, r.tokens, config) for r in held_out])
        rescored.append(
            {"token_weight": w, **{k: stats[k] for k in ("mean_reward", "mean_reward_ci")}}
        )
    return {
        "policy": name,
        "pass_through": team.pass_through,
        **point_stats(held_out),
        "reward_token_weight": team.token_weight,
        "rewards": rescored,
        "eval_run_id": run_id,
    }


def fixed_key(sweep_id: str, name: str, pass_through: str) -> dict[str, Any]:
    """What a fixed topology's eval run under decision rule ``pass_through`` stores as
    ``config["sweep"]``."""
    return {
        "id": sweep_id,
        "token_weight": None,
        "seed": None,
        "method": name,
        "knob": {},
        "pass_through": pass_through,
    }


def trial_id(spec: TrialSpec) -> dict[str, Any]:
    return {
        "method": spec.method,
        "knob": spec.knob,
        "token_weight": spec.token_weight,
        "seed": spec.seed,
        "pass_through": spec.pass_through,
    }
