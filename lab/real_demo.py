"""The first screen's real-model demo: a few episodes played by the local model, then Replay.

One button on the home page starts ``agentqmix eval --backend local`` as a lab job
(:mod:`lab.jobs`, which hands it the lab session's local model server): a small team on held-out GSM8K problems under a fixed topology, logged
into the lab's database like any run. The page follows the job by the run it logs (the
``runs`` row whose ``pid`` is the job's process) and, when episodes land, links each to
Replay, which shows the real prompts, replies, tokens and latencies.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pandas as pd

from lab.jobs import Job, TeamSpec, eval_command

REAL_DEMO_KIND = "real-demo"
"""The job kind of the demo (the home page lists only these)."""


@dataclass(frozen=True)
class RealDemoConfig:
    """What the real-model demo plays."""

    episodes: int = 3
    """Episodes (each a new held-out problem)."""
    benchmark: str = "gsm8k"
    """Grade-school maths: short questions a 135M-parameter model can at least attempt."""
    roles: tuple[str, ...] = ("solver", "analyst", "verifier")
    """The team: three agents keep an episode within a minute or two on two cores."""
    rounds: int = 2
    """Communication rounds: enough to see an agent read another's answer."""
    policy: str = "star"
    """A fixed topology (no checkpoint needed on a fresh clone)."""

    def validate(self) -> None:
        if not 1 <= self.episodes <= 20:
            raise ValueError(f"episodes must be in 1..20, got {self.episodes}")
        TeamSpec(self.benchmark, self.roles, self.rounds, backend="local").validate()


def real_demo_command(db: str | os.PathLike[str], config: RealDemoConfig) -> list[str]:
    """``agentqmix eval --backend local`` of the demo team, logged into ``db``."""
    config.validate()
    team = TeamSpec(config.benchmark, config.roles, config.rounds, backend="local")
    return eval_command(db, team, policy=config.policy, episodes=config.episodes)


def run_of(job: Job, runs: pd.DataFrame) -> pd.Series | None:
    """The run ``job`` logs (its process's ``runs`` row, started after the job), or None
    while the process has not opened it yet."""
    if runs.empty or "pid" not in runs:
        return None
    started = pd.Timestamp(job.started_at - 5, unit="s")
    mine = runs[(runs["pid"] == job.pid) & (pd.to_datetime(runs["started_at"]) >= started)]
    return None if mine.empty else mine.iloc[0]
