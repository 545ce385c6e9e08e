"""*Evaluate on held-out tasks*: a finished training run's checkpoint played on held-out
episodes, as a background job of the lab (:class:`lab.jobs.JobManager`).

A training run of any method (Agent Q-Mix or a learned-topology method) knows its
checkpoint and its team; this module turns it and the form's choices into one CLI command:
``agentqmix compare --checkpoint CKPT --topologies ...`` when fixed topologies are to be
played beside it on the same episodes, ``agentqmix eval --checkpoint CKPT`` when none is
(left out, or each already played on that stream by this team in the store). Either run
records ``config["source_run"]``, the training run it evaluates. Plain functions: no
``st.*``, no store queries (``lab.data`` asks the store).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from core.team.options import TeamOptions, options_from_dict
from core.team.topologies import FIXED_TOPOLOGIES
from lab.jobs import TeamSpec, cli_command

HELD_OUT_STREAM = 1000
"""The default stream seed of a page's evaluation: the project's held-out stream (the demo's
figures and docs/lab.md use it), never a training run's own seed (checked below)."""

EPISODES = 300
"""Default episodes a policy: a 95 % Wilson interval about ±4 points near 90 % accuracy, so
Compare's points are told apart (docs/lab.md, "First start": 300 a point)."""

EVAL_KIND = "eval"
"""The job kind of these evaluations (the Train page lists them apart from training)."""


@dataclass(frozen=True)
class HeldOut:
    """What the *Evaluate on held-out tasks* form asks for."""

    episodes: int = EPISODES
    """Held-out episodes each policy plays (episodes 0..episodes-1 of the stream)."""
    seed: int = HELD_OUT_STREAM
    """The held-out stream (``--seed`` of eval / compare)."""
    fixed: bool = True
    """Also play the fixed topologies on the same episodes (those not yet in the store)."""


def default_seed(info: Any) -> int:
    """The stream a form offers for ``info``'s run: :data:`HELD_OUT_STREAM`, or the next one
    when the run trained on that seed."""
    return HELD_OUT_STREAM + (getattr(info, "seed", None) == HELD_OUT_STREAM)


def problem(info: Any, params: HeldOut | None = None) -> str | None:
    """Why the training run ``info`` (a :class:`core.store.queries.RunInfo`, or None when
    it is gone) cannot be evaluated with ``params`` now, in one sentence; None when it can."""
    if info is None:
        return "This training run is no longer in the database."
    if info.status != "finished":
        return (
            f"{info.id} is {info.status}: a run is evaluated once it has finished "
            "(its checkpoint is then the policy it trained)."
        )
    if not info.checkpoint:
        return f"{info.id} saved no checkpoint, so there is no policy to evaluate."
    if not Path(info.checkpoint).is_file():
        return (
            f"{info.id}'s checkpoint {info.checkpoint} is gone; put the file back to evaluate it."
        )
    if params is None:
        return None
    if params.episodes < 1:
        return f"Episodes must be at least 1 (got {params.episodes}): nothing was started."
    if params.seed == info.seed:
        return (
            f"Stream {params.seed} is the one {info.id} trained on and checked itself on at "
            "its end; pick another held-out stream (nothing was started)."
        )
    return None


def eval_team(config: dict[str, Any]) -> TeamOptions:
    """The team an evaluation of a training run plays: the one it trained (its
    ``config["team"]``) without the training's failures (held out means healthy; the Failure
    lab measures failures), on the back-end the lab offers (:meth:`TeamSpec.from_run_config`)."""
    team = options_from_dict(config.get("team", {}))
    backend = TeamSpec.from_run_config(config).backend
    return replace(team, fail_prob=0.0, failures="", backend=backend)


def team_args(config: dict[str, Any]) -> list[str]:
    """The team flags of the team a run trained (its ``config["team"]``): every team flag
    the CLI declares (:data:`core.cli.flags.TEAM`: roles, rounds, reward, decision rule,
    embedding, actions, society, ...), so the checkpoint meets the team it learned in; the
    back-end as the lab offers it (:meth:`TeamSpec.from_run_config`)."""
    from core.cli.flags import TEAM, TEAM_FLAGS

    team = eval_team(config)
    args = ["--benchmark", team.benchmark, "--backend", team.backend]
    for name in TEAM:
        value = TEAM_FLAGS[name].to_flag(getattr(team, TEAM_FLAGS[name].field))
        if value is not None:
            args += [f"--{name.replace('_', '-')}", str(value)]
    return args


def still_to_play(params: HeldOut, done: set[str]) -> tuple[str, ...]:
    """The fixed topologies to play beside the checkpoint: none when not asked for, else
    those not in ``done`` (already played on this stream by this team:
    :func:`lab.data.evaluated_topologies`)."""
    if not params.fixed:
        return ()
    return tuple(t for t in FIXED_TOPOLOGIES if t not in done)


def command(
    db: str | os.PathLike[str], info: Any, params: HeldOut, topologies: tuple[str, ...]
) -> tuple[str, list[str]]:
    """The job's label and command line: ``compare`` with ``topologies`` beside the
    checkpoint, or ``eval`` of the checkpoint alone, linked to ``info``'s run."""
    if (why := problem(info, params)) is not None:
        raise ValueError(why)
    shared = [
        *team_args(info.config), "--checkpoint", str(info.checkpoint), "--episodes", str(params.episodes),
        "--seed", str(params.seed), "--source-run", info.id, "--db", str(db), "--json",
    ]  # fmt: skip
    label = f"evaluate {info.id} · {info.benchmark} ×{params.episodes} (stream {params.seed})"
    if topologies:
        return f"{label} + {len(topologies)} fixed", cli_command(
            "compare", *shared, "--topologies", ",".join(topologies)
        )
    return label, cli_command("eval", *shared)


def total_episodes(params: HeldOut, topologies: tuple[str, ...]) -> int:
    """How many episodes the job's run will log: the checkpoint's and each topology's."""
    return params.episodes * (1 + len(topologies))


def progress(run: Any) -> tuple[int, int]:
    """Episodes an evaluation run (a :class:`core.store.queries.RunInfo`) has logged and
    will log in all (its plan's ``config["eval"]["episodes"]``)."""
    total = int((run.config.get("eval") or {}).get("episodes") or 0)
    return int(run.episodes), max(total, int(run.episodes))
