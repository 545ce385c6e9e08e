"""``agentqmix study transfer``: learned policies trained on the simulator against every
fixed topology on real agents (:mod:`core.experiment.study`); the same command with the
same ``--out`` resumes a stopped study."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from core.cli.app import app
from core.cli.budget import BudgetCalls, BudgetTokens, say
from core.cli.flags import BACKEND, BENCHMARK_HELP, OPENAI_EXTRA, TEAM, Db, Json, team_flags
from core.cli.output import console, emit_json, print_table
from core.team.options import TeamOptions
from core.team.topologies import FIXED_TOPOLOGIES

study_app = typer.Typer(
    help="Studies on real agents (transfer: does a simulator-trained policy pay?).",
    no_args_is_help=True,
)
app.add_typer(study_app, name="study")


@study_app.command("transfer")
@team_flags(*TEAM, *BACKEND, *OPENAI_EXTRA)
def transfer(
    opts: TeamOptions,
    out: Annotated[Path, typer.Option(help="The study's folder (the same one resumes it).")],
    benchmark: Annotated[str, typer.Option(help=BENCHMARK_HELP)] = "mixed",
    tasks: Annotated[int, typer.Option(min=1, help="Held-out real tasks each policy plays.")] = 20,
    stream: Annotated[int, typer.Option(min=0, help="Seed of the held-out stream.")] = 1000,
    train_episodes: Annotated[
        int, typer.Option(min=1, help="Simulated training episodes on each society.")
    ] = 2000,
    train_seed: Annotated[int, typer.Option(min=0, help="Seed of the trainings.")] = 0,
    n_envs: Annotated[int, typer.Option(min=1, help="Simulated episodes in lockstep.")] = 32,
    calibrate_tasks: Annotated[
        int,
        typer.Option(min=0, help="Without --society: real episodes per fixed topology to fit on."),
    ] = 4,
    finetune_episodes: Annotated[
        int, typer.Option(min=0, help="Real episodes fine-tuning the calibrated policy (0: none).")
    ] = 0,
    topologies: Annotated[
        str,
        typer.Option(
            help=f"Fixed topologies to play: comma-separated, or all ({', '.join(FIXED_TOPOLOGIES)})."
        ),
    ] = "all",
    draws: Annotated[
        int, typer.Option(min=1, help="Simulated plays of each task per policy.")
    ] = 20,
    bootstrap: Annotated[int, typer.Option(min=1, help="Bootstrap resamples over tasks.")] = 2000,
    seed: Annotated[int, typer.Option(min=0, help="Seeds predictions and the bootstrap.")] = 0,
    db: Db = None,
    budget_tokens: BudgetTokens = None,
    budget_calls: BudgetCalls = None,
    as_json: Json = False,
) -> None:
    """Train on the stock (--preset) and the calibrated simulator (--society, else fitted here), then play the learned policies and
    every fixed topology on the same held-out real tasks: paired differences with intervals,
    McNemar on correctness, and how well the simulator ranked them."""
    from core.experiment.finetune import Budget
    from core.experiment.study import StudyConfig, run_study

    chosen = tuple(FIXED_TOPOLOGIES) if topologies == "all" else tuple(
        t.strip() for t in topologies.split(",") if t.strip()
    )  # fmt: skip
    config = StudyConfig(
        benchmark=benchmark, tasks=tasks, stream=stream, train_episodes=train_episodes,
        train_seed=train_seed, n_envs=n_envs, society=opts.society, calibrate_tasks=calibrate_tasks,
        base=opts.preset, finetune_episodes=finetune_episodes, topologies=chosen, draws=draws,
        bootstrap=bootstrap, seed=seed,
    )  # fmt: skip
    outcome = run_study(config, opts, out, db, Budget(budget_tokens, budget_calls), say)
    if as_json:
        emit_json({"folder": str(out), "run_id": outcome.run_id, **outcome.result})
        return
    print_study(outcome.result)
    console.print(f"wrote {out / 'result.json'}; logged as run {outcome.run_id}")


def print_study(result: dict[str, Any]) -> None:
    """The study's three tables: per policy, ranking agreement, paired differences."""
    from core.experiment.study_tables import difference_rows, policy_rows, ranking_rows

    for rows, title in (
        (policy_rows(result), f"{result['tasks']} held-out real tasks per policy"),
        (ranking_rows(result), "simulated vs real ranking of fixed topologies"),
        (difference_rows(result), f"paired differences ({result['interval']})"),
    ):
        if rows:
            print_table(rows, list(rows[0]), title)
