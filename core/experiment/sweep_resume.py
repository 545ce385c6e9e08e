"""What the store holds of a sweep being resumed (``agentqmix sweep --resume SWEEP_ID``).

Every run of a sweep names its point in ``config["sweep"]`` (:mod:`core.experiment.sweep_plan`).
A trial counts as done when the store holds exactly one finished ``train`` run and one
finished ``eval`` run of it with all ``K`` held-out episodes; a fixed topology when it holds
exactly one such ``eval`` run. Anything else of a point — a train run whose eval run never
came (the driver died between the two), a run cut short while it was logged — is stale: it
is deleted and the point runs again, so that after the resumption every point is stored
exactly once. The rows of done points are rebuilt from the store with the functions that
build a fresh run's rows, so ``sweep.json`` comes out as an uninterrupted run's would.

A point's identity is its method, knob, token weight, seed and decision rule (``--pass-through``:
the same trial under the paper's rule and under the consensus pass-through are two points).
Resuming with flags that would have stored something else is refused: every stored run's
team (and a train run's learner and method settings) must equal what these flags give it,
and every stored point must be one these flags plan (a plan may grow: more weights, seeds,
knob values, rules).
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import replace
from typing import Any

from core.errors import UserError
from core.experiment.sweep_plan import (
    TRIAL_FACTS,
    FixedSpec,
    StoredSweep,
    SweepConfig,
    TrialSpec,
    fixed_row,
    rule_text,
    trial_row,
    trial_run_config,
)
from core.store.engine import resolve_db
from core.store.queries import RunInfo, episode_outcomes, sweep_runs
from core.store.writer import redact_config
from core.team.options import TeamOptions

PointKey = tuple[str, str, float | None, int | None, str]
"""(method or topology, knob as sorted JSON, token weight, seed, decision rule); weight and
seed None for a fixed topology."""
COMPARED = ("team", "train", "method", "prompting")
"""The config sections a stored run must share with what the flags would store (``prompting``:
how a real back-end wrote its requests — caps, cut, layout)."""


def read_stored_sweep(
    db: str | None,
    specs: list[TrialSpec],
    fixed: list[FixedSpec],
    sweep: SweepConfig,
    started: bool = False,
) -> StoredSweep:
    """Sort the stored runs of sweep ``sweep.resume`` into done points (their rows), stale
    runs and what is left to run; a UserError when it is unknown (no run stored, and not
    ``started``: known to have begun without storing any) or the flags conflict."""
    sweep_id = str(sweep.resume)
    runs = sweep_runs(db, sweep_id)
    if not runs and not started:
        raise UserError(f"{resolve_db(db)} holds no run of sweep {sweep_id!r}.")
    by_point: dict[PointKey, list[RunInfo]] = defaultdict(list)
    for run in runs:
        by_point[_point(run.config)].append(run)
    planned: dict[PointKey, TrialSpec | FixedSpec] = {_point({"sweep": s.key}): s for s in specs}
    planned |= {_point({"sweep": f.key}): f for f in fixed}
    for point, point_runs in by_point.items():
        _check(sweep_id, point, point_runs, planned, sweep)

    stored = StoredSweep(missing=[], missing_topologies=[])
    for spec in specs:
        point_runs = by_point.get(_point({"sweep": spec.key}), [])
        row = _done_trial(db, spec, point_runs, sweep.eval_episodes)
        _sort(stored, point_runs, row, spec.label)
        if row is None:
            stored.missing.append(spec)
    for part in fixed:
        point_runs = by_point.get(_point({"sweep": part.key}), [])
        row = _done_fixed(db, part, point_runs, sweep)
        _sort(stored, point_runs, row, part.label)
        if row is None:
            stored.missing_topologies.append(part)
    return stored


def _sort(stored: StoredSweep, runs: list[RunInfo], row: dict | None, label: str) -> None:
    if row is None:
        stored.stale += [r.id for r in runs]
        if runs:
            stored.redone.append(label)
    elif "policy" in row:
        stored.fixed.append(row)
    else:
        stored.trials.append(row)


def _done_trial(
    db: str | None, spec: TrialSpec, runs: list[RunInfo], eval_episodes: int
) -> dict[str, Any] | None:
    """The trial's row when exactly its train run and its eval run are stored, finished."""
    train, held = _only(runs, "train"), _only(runs, "eval")
    if len(runs) != 2 or train is None or held is None or train.checkpoint is None:
        return None
    if not (_complete(train, None) and _complete(held, eval_episodes)):
        return None
    facts = train.config.get("trial") or {}
    facts = {"train_episodes": train.episodes, **{k: facts.get(k) for k in TRIAL_FACTS}}
    held_out = episode_outcomes(db, held.id)
    return trial_row(spec, train.checkpoint, held_out, facts, train.id, held.id)


def _done_fixed(
    db: str | None, part: FixedSpec, runs: list[RunInfo], sweep: SweepConfig
) -> dict[str, Any] | None:
    """The fixed topology's row when exactly its eval run is stored, finished."""
    held = _only(runs, "eval")
    if len(runs) != 1 or held is None or not _complete(held, sweep.eval_episodes):
        return None
    held_out = episode_outcomes(db, held.id)
    return fixed_row(part.name, held_out, part.team, sweep.token_weights, held.id)


def _only(runs: list[RunInfo], kind: str) -> RunInfo | None:
    """The one run of ``kind`` among ``runs``; None when there is none or more than one."""
    of_kind = [r for r in runs if r.kind == kind]
    return of_kind[0] if len(of_kind) == 1 else None


def _complete(run: RunInfo, episodes: int | None) -> bool:
    return run.status == "finished" and (episodes is None or run.episodes == episodes)


def _point(config: dict[str, Any]) -> PointKey:
    """The point a run's config names. Its decision rule: ``config["sweep"]``'s, else (a
    run stored before the rule was an axis of the sweep) the team's, else the default."""
    key = config.get("sweep")
    key = key if isinstance(key, dict) else {}
    team = config.get("team")
    team = team if isinstance(team, dict) else {}
    w, s = key.get("token_weight"), key.get("seed")
    return (
        str(key.get("method")),
        json.dumps(key.get("knob") or {}, sort_keys=True),
        None if w is None else float(w),
        None if s is None else int(s),
        str(key.get("pass_through") or team.get("pass_through") or TeamOptions.pass_through),
    )


def _check(
    sweep_id: str,
    point: PointKey,
    runs: list[RunInfo],
    planned: dict[PointKey, TrialSpec | FixedSpec],
    sweep: SweepConfig,
) -> None:
    """A UserError unless every run of ``point`` is what these flags would have stored."""
    method, knob, weight, seed, rule = point
    # The rule is named when it is not the paper's, or when it is what the flags leave out.
    named = f", pass-through {rule}" if rule not in (sweep.pass_through or ()) else rule_text(rule)
    if weight is None and point not in planned:
        under = f" under{named[1:]}" if named else ""
        raise UserError(
            f"sweep {sweep_id} evaluated {method!r}{under}, which these flags leave out."
        )
    if point not in planned:
        knobs = "".join(f", {k} {v:g}" for k, v in json.loads(knob).items())
        raise UserError(
            f"sweep {sweep_id} holds a trial ({method}{knobs}, token weight {weight:g}, seed "
            f"{seed}{named}) that these flags leave out; resume it with the original run's flags."
        )
    spec = planned[point]
    eval_config = replace(spec.team, seed=sweep.eval_seed).run_config()
    train_config = trial_run_config(spec) if isinstance(spec, TrialSpec) else {}
    for run in runs:
        expected = train_config if run.kind == "train" else eval_config
        _compare(sweep_id, run.config, expected)
        if run.kind == "eval" and run.status == "finished" and run.episodes != sweep.eval_episodes:
            raise UserError(
                f"sweep {sweep_id} held out {run.episodes} tasks, not --eval-episodes "
                f"{sweep.eval_episodes}; resume it with the original run's flags."
            )


def _compare(sweep_id: str, stored: dict[str, Any], expected: dict[str, Any]) -> None:
    given = json.loads(json.dumps(redact_config(expected)))
    for section in COMPARED:
        if section not in given and section not in stored:
            continue
        for name, was, now in _differences(section, stored.get(section), given.get(section)):
            if was is _UNSTORED:
                # No flag can give back a setting that did not exist: the code changed.
                raise UserError(
                    f"sweep {sweep_id} was stored before this version recorded {name} "
                    f"(these flags give {now!r}), so its runs may differ from new ones in "
                    "it; start a new sweep."
                )
            raise UserError(
                f"sweep {sweep_id} was run with {name} = {was!r}, but these flags give "
                f"{now!r}; resume it with the original run's flags."
            )


_UNSTORED = object()
"""A setting the stored run's config does not name (stored by an older version)."""


def _differences(name: str, was: Any, now: Any) -> list[tuple[str, Any, Any]]:
    """Dotted names of the settings that differ between two JSON values, with both values
    (:data:`_UNSTORED` where the stored one does not name the setting)."""
    if isinstance(was, dict) and isinstance(now, dict):
        return [
            d
            for k in sorted(set(was) | set(now))
            for d in _differences(f"{name}.{k}", was.get(k, _UNSTORED), now.get(k))
        ]
    return [] if was == now else [(name, was, now)]
