"""The first-start demo: a short training run and evaluations, so no page starts empty.

On ``sim`` this takes seconds: a small QMIX team trains on the mixed benchmark (with a
little failure curriculum), then the learned policy and every fixed topology are
evaluated, healthy and with one and two failed agents (the robustness curve).
Each step is an ordinary CLI command logging into the lab's database; ``compare`` runs
every policy in one process, which keeps the demo to four commands.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from lab.jobs import FailureChoice, Step, TrainParams, compare_command, train_command

FIXED_FOR_DEMO = ("single", "chain", "star", "full", "debate", "random")
"""Fixed topologies the demo compares the learned policy against."""


@dataclass
class DemoConfig:
    """How big the first-start demo is."""

    benchmark: str = "mixed"
    """Benchmark of every demo run."""
    train_episodes: int = 120
    """Training episodes (a few seconds on sim)."""
    eval_episodes: int = 24
    """Evaluation episodes per policy and failure setting."""
    agents: int = 4
    """Team size."""
    rounds: int = 3
    """Rounds per episode."""
    seed: int = 0
    """Seed of every demo run."""

    def validate(self) -> None:
        if self.train_episodes < 1 or self.eval_episodes < 1:
            raise ValueError(
                f"demo episodes must be >= 1, got {self.train_episodes}, {self.eval_episodes}"
            )


FAILURE_SETTINGS: tuple[tuple[FailureChoice, ...], ...] = (
    (),
    (FailureChoice(1, "crash", 0),),
    (FailureChoice(1, "crash", 0), FailureChoice(2, "byzantine", 1)),
)
"""Healthy, one crashed agent, and a crashed plus a byzantine one."""


def demo_steps(
    db: str | os.PathLike[str], workdir: Path, config: DemoConfig | None = None
) -> list[Step]:
    """The demo's commands in order: train, then evaluate learned + fixed under each failure setting."""
    config = config or DemoConfig()
    config.validate()
    checkpoint = workdir / "checkpoints" / "demo.pt"
    params = TrainParams(
        benchmark=config.benchmark,
        agents=config.agents,
        rounds=config.rounds,
        episodes=config.train_episodes,
        fail_prob=0.1,
        seed=config.seed,
    )
    steps = [Step("train a QMIX team", train_command(db, params, checkpoint))]
    for failures in FAILURE_SETTINGS:
        what = f"{len(failures)} failed agent(s)" if failures else "healthy team"
        argv = compare_command(
            db,
            config.benchmark,
            checkpoint=str(checkpoint),
            policies=FIXED_FOR_DEMO,
            failures=failures,
            episodes=config.eval_episodes,
            seed=config.seed,
            agents=config.agents,
            rounds=config.rounds,
        )
        steps.append(Step(f"compare learned vs fixed topologies ({what})", argv))
    return steps
