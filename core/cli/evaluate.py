"""``agentqmix eval``, ``compare`` and ``robustness``: policies played on held-out tasks,
and an evaluation run continued (--resume)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer

from core.cli.app import app
from core.cli.budget import BudgetCalls, BudgetTokens, budget_meter, say
from core.cli.flags import (
    BACKEND,
    BENCHMARK_HELP,
    OPENAI_EXTRA,
    TEAM,
    Db,
    Device,
    Env,
    Json,
    NoLog,
    Resume,
    Seed,
    check_store_exists,
    team_flags,
)
from core.cli.output import console, emit_json, exit_if_no_call_answered, print_table
from core.errors import UserError
from core.team.failures import FAILURE_MODES
from core.team.options import TeamOptions
from core.team.topologies import FIXED_TOPOLOGIES

SourceRun = Annotated[
    str | None,
    typer.Option(
        help="The training run whose checkpoint this evaluates (stored as the run's "
        "config source_run: the lab lists the evaluation under that run)."
    ),
]


def _resume_evaluation(
    run_id: str, db: str | None, device: str, as_json: bool, command: str, budget: Any = None
) -> None:
    """``eval/compare/robustness --resume RUN_ID``: play what the run has not logged yet
    (within ``budget``, else the one the run stored)."""
    from core.experiment.evaluate import compare_rows, resume_evaluation, robustness_rows

    check_store_exists(db)
    plan, rows, benchmark = resume_evaluation(db, run_id, device, command, budget, say)
    if plan.command == "eval":
        summary = {"policy": plan.policies[0], **rows[0], "run_id": run_id}
        summary["mean_return"] = summary["mean_reward"]
        _report_evaluation(summary, as_json)
    elif plan.command == "compare":
        rows = compare_rows(plan, rows, run_id)
        _report_comparison(rows, benchmark, plan.episodes, plan.seed, as_json)
    else:
        rows = robustness_rows(plan, rows, run_id)
        _report_robustness(rows, benchmark, plan.mode, plan.episodes, as_json)


@app.command("eval")
@team_flags(*TEAM, *BACKEND, *OPENAI_EXTRA, "fail")
def evaluate(
    opts: TeamOptions,
    checkpoint: Annotated[Path | None, typer.Option(help="Checkpoint written by train.")] = None,
    policy: Annotated[
        str | None, typer.Option(help=f"A fixed topology: {', '.join(FIXED_TOPOLOGIES)}.")
    ] = None,
    env: Env = None,
    benchmark: Annotated[str | None, typer.Option(help=BENCHMARK_HELP)] = None,
    episodes: Annotated[int, typer.Option(min=1, help="Held-out episodes to run.")] = 32,
    first: Annotated[int, typer.Option(min=0, help="Index of the first held-out episode.")] = 0,
    seed: Seed = 0,
    device: Device = "auto",
    db: Db = None,
    no_log: NoLog = False,
    resume: Resume = None,
    source_run: SourceRun = None,
    budget_tokens: BudgetTokens = None,
    budget_calls: BudgetCalls = None,
    as_json: Json = False,
) -> None:
    """Run a policy greedily and decentralised (each agent on its own Q-values), held out;
    on a real back-end, after an estimate and within the budget given."""
    from core.experiment.evaluate import source_run_config
    from core.experiment.finetune import Budget

    budget = Budget(budget_tokens, budget_calls)
    if resume:
        return _resume_evaluation(resume, db, device, as_json, "eval", budget)
    if (env is None) == (benchmark is None):
        raise UserError("eval needs exactly one of --env SPEC or --benchmark NAME.")
    if env is not None:
        if checkpoint is None:
            raise UserError("eval --env needs --checkpoint CKPT.")
        from core.experiment.evaluate import evaluate_env

        summary = evaluate_env(env, checkpoint, episodes, seed, device)
        if as_json:
            return emit_json(summary)
        console.print(f"{summary['episodes']} episodes, mean return {summary['mean_return']:.3f}")
        return None
    from core.experiment import evaluate_team, resolve_policy

    source = source_run_config(db, source_run) if not no_log else {}
    chosen = resolve_policy(policy, checkpoint, opts, device)
    with budget_meter(
        replace(opts, seed=seed), budget, episodes, split="eval", policy=chosen,
        probed=f"{chosen.name} (the policy evaluated)",
    ):  # fmt: skip
        summary, _ = evaluate_team(
            opts, chosen, episodes, seed, db=db, log=not no_log, first=first,
            checkpoint=checkpoint, extra_config={**budget.run_config(), **source},
        )  # fmt: skip
    _report_evaluation(summary, as_json)


def _report_evaluation(summary: dict[str, Any], as_json: bool) -> None:
    if as_json:
        emit_json(summary)
    else:
        console.print(
            f"{summary['policy']}: {summary['episodes']} episodes, accuracy {summary['accuracy']:.3f}, "
            f"mean tokens {summary['mean_tokens']:.0f}, mean reward {summary['mean_reward']:.3f}",
            soft_wrap=True,
        )
    exit_if_no_call_answered([summary])


@app.command()
@team_flags(*TEAM, *BACKEND, "fail")
def compare(
    opts: TeamOptions,
    benchmark: Annotated[str | None, typer.Option(help=BENCHMARK_HELP)] = None,
    checkpoint: Annotated[
        list[Path] | None,
        typer.Option(
            help="Learned policy to compare (repeatable; any family: qmix or a "
            "learned-topology method)."
        ),
    ] = None,
    episodes: Annotated[int, typer.Option(min=1, help="Held-out episodes per policy.")] = 100,
    topologies: Annotated[
        str | None,
        typer.Option(
            help=f"Fixed topologies to play beside the checkpoints, comma-separated "
            f"({', '.join(FIXED_TOPOLOGIES)}; none for none); default: every one."
        ),
    ] = None,
    seed: Seed = 0,
    device: Device = "auto",
    db: Db = None,
    no_log: NoLog = False,
    resume: Resume = None,
    source_run: SourceRun = None,
    budget_tokens: BudgetTokens = None,
    budget_calls: BudgetCalls = None,
    as_json: Json = False,
) -> None:
    """Every learned policy given and every fixed topology on the same seeded held-out
    tasks, with 95% intervals and the accuracy/token front (on a real back-end, after an
    estimate and within the budget given)."""
    from core.experiment import compare_team
    from core.experiment.evaluate import parse_topologies, source_run_config
    from core.experiment.finetune import Budget

    budget = Budget(budget_tokens, budget_calls)
    if resume:
        return _resume_evaluation(resume, db, device, as_json, "compare", budget)
    if benchmark is None:
        raise UserError("compare needs --benchmark NAME (or --resume RUN_ID).")
    fixed = parse_topologies(topologies)
    if not fixed and not checkpoint:
        raise UserError("compare --topologies none needs at least one --checkpoint CKPT.")
    source = source_run_config(db, source_run) if not no_log else {}
    total = episodes * (len(checkpoint or []) + len(fixed))
    with budget_meter(replace(opts, seed=seed), budget, total, split="eval"):
        rows = compare_team(
            opts, checkpoint or [], episodes, seed, db=db, log=not no_log, device=device,
            topologies=fixed, extra_config={**budget.run_config(), **source},
        )  # fmt: skip
    _report_comparison(rows, benchmark, episodes, seed, as_json, opts.token_weight)


def _report_comparison(
    rows: list[dict[str, Any]],
    benchmark: str,
    episodes: int,
    seed: int,
    as_json: bool,
    token_weight: float | None = None,
) -> None:
    rows.sort(key=lambda r: -r["mean_reward"])
    if as_json:
        emit_json({"benchmark": benchmark, "episodes": episodes, "seed": seed, "policies": rows})
    else:
        print_table(
            [_shown(r) for r in rows],
            ["policy", "method", "trained_w", "accuracy", "mean_tokens", "mean_reward", "front"],
            f"{benchmark}, {episodes} held-out episodes"
            + ("" if token_weight is None else f" (reward at w_tok {token_weight:g})")
            + "; front: on the accuracy/token front",
        )
    exit_if_no_call_answered(rows)


def _shown(row: dict[str, Any]) -> dict[str, Any]:
    """A compare or robustness row as the table prints it: the trained token weight and the
    front as short text."""
    weight = row.get("token_weight")
    knob = ", ".join(f"{k} {v:g}" for k, v in (row.get("knob") or {}).items())
    method = row.get("method", row["policy"]) + (f" ({knob})" if knob else "")
    return {
        **row,
        "method": method,
        "trained_w": "—" if weight is None else f"{weight:g}",
        "front": "*" if row.get("front") else "",
    }


@app.command()
@team_flags(*TEAM, *BACKEND)
def robustness(
    opts: TeamOptions,
    benchmark: Annotated[str | None, typer.Option(help=BENCHMARK_HELP)] = None,
    checkpoint: Annotated[
        list[Path] | None, typer.Option(help="Learned policy (repeatable; any family).")
    ] = None,
    episodes: Annotated[int, typer.Option(min=1, help="Held-out episodes per point.")] = 100,
    max_failed: Annotated[int, typer.Option(min=0, help="Largest number of failed agents.")] = 2,
    mode: Annotated[str, typer.Option(help=f"Failure mode: {', '.join(FAILURE_MODES)}.")] = "crash",
    seed: Seed = 0,
    device: Device = "auto",
    db: Db = None,
    no_log: NoLog = False,
    resume: Resume = None,
    budget_tokens: BudgetTokens = None,
    budget_calls: BudgetCalls = None,
    as_json: Json = False,
) -> None:
    """Accuracy and reward vs number of failed agents: learned policy against fixed
    topologies (on a real back-end, after an estimate and within the budget given)."""
    from core.experiment import robustness_team
    from core.experiment.finetune import Budget

    budget = Budget(budget_tokens, budget_calls)
    if resume:
        return _resume_evaluation(resume, db, device, as_json, "robustness", budget)
    if benchmark is None:
        raise UserError("robustness needs --benchmark NAME (or --resume RUN_ID).")
    if mode not in FAILURE_MODES:
        raise UserError(f"--mode must be one of {', '.join(FAILURE_MODES)}, not {mode!r}.")
    total = episodes * (len(checkpoint or []) + len(FIXED_TOPOLOGIES)) * (max_failed + 1)
    with budget_meter(replace(opts, seed=seed), budget, total, split="eval"):
        rows = robustness_team(
            opts, checkpoint or [], episodes, seed, max_failed, mode, db=db, log=not no_log,
            device=device, extra_config=budget.run_config(),
        )  # fmt: skip
    _report_robustness(rows, benchmark, mode, episodes, as_json)


def _report_robustness(
    rows: list[dict[str, Any]], benchmark: str, mode: str, episodes: int, as_json: bool
) -> None:
    if as_json:
        emit_json({"benchmark": benchmark, "mode": mode, "episodes": episodes, "points": rows})
    else:
        print_table(
            [_shown(r) for r in rows],
            ["policy", "method", "failed_agents", "accuracy", "mean_tokens", "mean_reward"],
            f"robustness ({mode})",
        )
    exit_if_no_call_answered(rows)
