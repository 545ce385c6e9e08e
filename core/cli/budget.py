"""What every command on a real back-end shares: the budget flags, and the run opened
within its budget (:func:`core.experiment.budget.real_run`: a paid endpoint without a
budget refused, the estimate printed, the hard spend cap attached)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from core.cli.output import console
from core.team.options import TeamOptions

BudgetTokens = Annotated[
    int | None,
    typer.Option(
        "--budget-tokens",
        min=1,
        help="A real back-end's hard cap on the tokens the server bills (required off this "
        "machine); no call is sent that could pass it.",
    ),
]
BudgetCalls = Annotated[
    int | None,
    typer.Option("--budget-calls", min=1, help="A real back-end's hard cap on calls sent."),
]


def budget_meter(
    opts: TeamOptions,
    budget: Any,
    episodes: int,
    spent: tuple[int, int] = (0, 0),
    split: str = "train",
    init: Path | None = None,
    policy: Any = None,
    probed: str | None = None,
    ray_address: str | None = None,
    in_flight: int | None = None,
) -> Any:
    """A real back-end's run (:func:`core.experiment.budget.real_run`, a context): refuse a
    paid endpoint without a budget, attach the hard spend cap, print the estimate (its
    probe played by ``policy``, or ``init``'s when given); it yields the meter the run
    spends against (None on the simulator without a budget). ``in_flight``: episodes the
    run plays at once (a training recipe's ``n_envs``)."""
    from core.experiment.budget import probe_policy, real_run
    from core.experiment.finetune import Budget

    if init is not None:
        policy, probed = probe_policy(opts, init)
    return real_run(
        opts, budget or Budget(), episodes, say, spent, split, policy, probed, ray_address,
        in_flight,
    )  # fmt: skip


def say(line: str) -> None:
    """One plain line on stderr (no markup: it may quote a server's text)."""
    console.print(line, soft_wrap=True, highlight=False, markup=False)
