"""The Failure lab's work, in the lab's own process: fork a logged episode with failures,
and measure robustness.

Plain functions (no Streamlit), so the page and ``agentqmix bench lab`` call the very
same code. Episodes are played by the one rollout path (:func:`core.experiment.evaluate.
run_policy` -> :meth:`core.team.env.TeamEnv.run`); the learned policy is loaded once by
the caller (``lab/data.py`` keeps it per checkpoint file and modification time) and passed
in. A fork is logged as one run of kind ``lab``: episode 0 with the failures, episode 1
without, and ``config["fork"]`` says what failed and which episode it was forked from.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from core.records import EpisodeRecord
from core.team.failures import FAILURE_MODES, FailureSpec
from core.team.options import TeamOptions, options_from_dict
from core.team.topologies import FIXED_TOPOLOGIES

FORK_KIND = "lab"
"""Run kind of the lab's forks (kept out of the evaluation pickers and of Compare)."""

FORK_SIDES = ("with failures", "without failures")
"""What episode 0 and episode 1 of a fork run are."""

ROBUSTNESS_TAG = {"lab": "failure lab"}
"""Joins a robustness run's config when the Failure lab measured it."""

MODES = FAILURE_MODES
"""How an agent can fail (core.team.failures), as the Failure lab offers them."""

TOPOLOGIES = tuple(FIXED_TOPOLOGIES)
"""The fixed topologies the Failure lab plays and measures (core.team.topologies)."""


@dataclass(frozen=True)
class PolicyChoice:
    """A policy the Failure lab can play: a learned checkpoint or a fixed topology."""

    kind: str
    """``checkpoint`` or ``topology``."""
    value: str
    """The checkpoint's path, or the topology's name."""

    def validate(self) -> None:
        if self.kind not in ("checkpoint", "topology"):
            raise ValueError(f"kind must be checkpoint or topology, got {self.kind!r}")

    @property
    def label(self) -> str:
        """``learned · demo.pt`` / ``fixed · full``."""
        if self.kind == "checkpoint":
            return f"learned · {Path(self.value).name}"
        return f"fixed · {self.value}"


def fork_options(team_config: dict[str, Any]) -> TeamOptions:
    """The team a logged run used (its ``config["team"]``), with no failures of its own:
    the fork injects exactly the chosen ones, and its healthy side is healthy."""
    return replace(options_from_dict(team_config), fail_prob=0.0, failures="")


def load_policy(choice: PolicyChoice, opts: TeamOptions) -> Any:
    """The greedy learned policy of a checkpoint (checked against the team's shapes) or a
    fixed topology. Loading a checkpoint costs ~0.4 s: callers keep the result."""
    from core.experiment.evaluate import learned_policy
    from core.team.topologies import make_policy

    choice.validate()
    if choice.kind == "checkpoint":
        return learned_policy(Path(choice.value), opts, "cpu")
    return make_policy(choice.value)


def failure_text(failures: Sequence[FailureSpec], roles: Sequence[str]) -> str:
    """``1 coder byzantine from round 1, 2 analyst crash from round 2`` (rounds counted from 1,
    as people count them; a spec's ``from_round`` counts from 0)."""
    return ", ".join(
        f"{f.agent} {roles[f.agent] if f.agent < len(roles) else '?'} {f.mode} from round "
        f"{f.from_round + 1}"
        for f in failures
    )


def chosen_failures(agents: Sequence[int], mode: str, first_round: int) -> list[FailureSpec]:
    """One failure per chosen agent, in agent order, from ``first_round`` counted from 1 as
    the page shows it (a spec counts from 0)."""
    return [FailureSpec(int(a), mode, int(first_round) - 1) for a in sorted(agents)]


def stored_failure_text(stored: Sequence[dict[str, Any]], roles: Sequence[str]) -> str:
    """:func:`failure_text` of the failures a fork run stored (``config["fork"]["failures"]``,
    one dict per :class:`FailureSpec`)."""
    return failure_text([FailureSpec(**f) for f in stored], roles)


@dataclass
class Fork:
    """A logged episode played again with and without failures."""

    run_id: str | None
    """The ``lab`` run both episodes were logged in (None when not logged)."""
    failed: EpisodeRecord
    """Episode 0 of the run: with the failures."""
    healthy: EpisodeRecord
    """Episode 1 of the run: the same task, seed and policy without them."""


def fork_episode(
    db: str | None,
    team_config: dict[str, Any],
    base_run: str,
    index: int,
    seed: int,
    policy: Any,
    policy_label: str,
    failures: Sequence[FailureSpec],
    log: bool = True,
) -> Fork:
    """Play held-out episode ``index`` of stream ``seed`` (episode ``index`` of ``base_run``)
    with ``policy`` twice — with ``failures`` and without — and log both as one run.

    Same task, same episode seed, same policy: the only difference is the failure, so
    rounds before the first failed round are identical (a fork at that round).
    """
    from core.experiment.evaluate import log_run, run_policy

    opts = fork_options(team_config)
    for f in failures:
        f.validate(len(opts.roles))
    if len({f.agent for f in failures}) >= len(opts.roles):
        raise ValueError("keep at least one agent healthy")
    failed = run_policy(opts, policy, 1, seed, failures=list(failures), first=index)[0]
    healthy = run_policy(opts, policy, 1, seed, failures=[], first=index)[0]
    run_id = None
    if log:
        fork = {
            "run": base_run,
            "episode": int(index),
            "failures": [f.to_dict() for f in failures],
            "policy": policy_label,
            "episodes": dict(enumerate(FORK_SIDES)),
            "label": f"fork of {base_run} #{index} · {policy_label} · "
            + failure_text(failures, opts.roles),
        }
        run_id = log_run(
            db, FORK_KIND, replace(opts, seed=seed), policy.name, seed, [failed, healthy],
            {"fork": fork},
        )  # fmt: skip
    return Fork(run_id, failed, healthy)


def measure_robustness(
    db: str | None,
    opts: TeamOptions,
    policies: Sequence[Any],
    episodes: int,
    seed: int,
    max_failed: int,
    mode: str = "crash",
    log: bool = True,
) -> list[dict[str, Any]]:
    """Every policy in ``policies`` with 0..``max_failed`` failed agents on the same
    ``episodes`` held-out tasks (:func:`core.experiment.evaluate.robustness_team`), logged
    as one robustness run tagged as the Failure lab's."""
    from core.experiment.evaluate import robustness_team

    return robustness_team(
        replace(opts, fail_prob=0.0, failures=""), None, episodes, seed, max_failed, mode,
        db=db, log=log, policies=list(policies), extra_config=dict(ROBUSTNESS_TAG),
    )  # fmt: skip
