"""The first-start demo: a short training run and evaluations, so no page starts empty.

On ``sim`` it takes well under a minute: a small QMIX team trains on the mixed benchmark
(with a little failure curriculum), the learned policy is evaluated, and ``robustness``
runs the learned policy and every fixed topology healthy and with one and two crashed
agents (which also fills the Compare page). Each step is an ordinary CLI command logging
into the lab's database; three commands, because each process pays the import of torch.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from lab.jobs import Step, TeamSpec, TrainParams, eval_command, robustness_command, train_command


@dataclass
class DemoConfig:
    """How big the first-start demo is."""

    team: TeamSpec = field(default_factory=TeamSpec)
    """The demo team (the default four roles on the mixed benchmark)."""
    train_episodes: int = 64
    """Training episodes (a short run: the point is a populated lab, not a strong policy)."""
    hidden: int = 64
    """Network width of the demo policy (smaller trains faster)."""
    eval_episodes: int = 24
    """Evaluation episodes per policy and failure count."""
    seed: int = 0
    """Seed of every demo run."""

    def validate(self) -> None:
        self.team.validate()
        if self.train_episodes < 1 or self.eval_episodes < 1:
            raise ValueError(
                f"demo episodes must be >= 1, got {self.train_episodes}, {self.eval_episodes}"
            )


def demo_steps(
    db: str | os.PathLike[str], workdir: Path, config: DemoConfig | None = None
) -> list[Step]:
    """The demo's commands in order: train, evaluate the learned policy, robustness sweep."""
    config = config or DemoConfig()
    config.validate()
    checkpoint = str(workdir / "checkpoints" / "demo.pt")
    params = TrainParams(
        team=config.team,
        episodes=config.train_episodes,
        fail_prob=0.1,
        seed=config.seed,
        eval_episodes=0,
        hidden=config.hidden,
    )
    return [
        Step("train a QMIX team", train_command(db, params, Path(checkpoint))),
        Step(
            "evaluate the learned policy",
            eval_command(
                db,
                config.team,
                checkpoint=checkpoint,
                episodes=config.eval_episodes,
                seed=config.seed,
            ),
        ),
        Step(
            "learned vs fixed topologies, with 0–2 failed agents",
            robustness_command(
                db,
                config.team,
                checkpoint=checkpoint,
                episodes=config.eval_episodes,
                seed=config.seed,
            ),
        ),
    ]
