"""``agentqmix sweep``: the token/accuracy front on Ray, its progress bar and its table."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from core.cli.app import app
from core.cli.budget import BudgetCalls, BudgetTokens, budget_meter
from core.cli.flags import (
    BACKEND,
    BENCHMARK_HELP,
    LEARNED_METHODS,
    MAX_EPISODES,
    TEAM,
    Db,
    Json,
    NoLog,
    checked,
    learner_flags,
    team_flags,
)
from core.cli.output import ProgressBar, console, emit_json
from core.team.options import TeamOptions
from core.team.recipes import TEAM_RECIPE, recipe_value
from core.team.settings import PASS_THROUGH_RULES
from core.team.topologies import FIXED_TOPOLOGIES


@app.command()
@team_flags(  # --token-weights and --pass-through are lists here: axes of the grid
    *(n for n in TEAM if n not in ("token_weight", "pass_through")), *BACKEND, "fail_prob"
)
@learner_flags
def sweep(
    opts: TeamOptions,
    tuning: dict[str, Any],
    benchmark: Annotated[str, typer.Option(help=BENCHMARK_HELP)],
    token_weights: Annotated[
        str, typer.Option(help="Comma-separated token weights, one set of trials each.")
    ],
    seeds: Annotated[str, typer.Option(help="Comma-separated training seeds.")],
    out: Annotated[Path, typer.Option(help="Folder for the checkpoints and sweep.json.")],
    episodes: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=MAX_EPISODES,
            help=f"Training episodes per trial (the {TEAM_RECIPE} recipe's "
            f"{recipe_value(TEAM_RECIPE, 'episodes'):,}).",
        ),
    ] = None,
    eval_episodes: Annotated[
        int, typer.Option(min=1, help="K: held-out tasks every trial and topology plays.")
    ] = 100,
    eval_seed: Annotated[
        int, typer.Option(min=0, max=2**63 - 1, help="E: the held-out stream of the K tasks.")
    ] = 0,
    ray_address: Annotated[
        str | None,
        typer.Option(help="Join this Ray cluster (HOST:PORT); default: a local Ray."),
    ] = None,
    max_parallel: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Trials at once (default: the cluster's CPUs; --backend local: 1 task of "
            "any kind, as its one server decodes one call at a time).",
        ),
    ] = None,
    topologies: Annotated[
        str,
        typer.Option(help="Comma-separated fixed topologies played beside the trials."),
    ] = ",".join(FIXED_TOPOLOGIES),
    n_envs: Annotated[
        int, typer.Option(min=1, max=4096, help="Episodes collected in lockstep.")
    ] = 32,
    hidden: Annotated[
        int, typer.Option(min=1, max=4096, help="Width of the GNN, GRU and Q-head layers.")
    ] = 128,
    methods: Annotated[
        str,
        typer.Option(
            help=f"Comma-separated methods to train: {', '.join(LEARNED_METHODS)} "
            "(a trial per method, knob value, token weight and seed)."
        ),
    ] = "qmix",
    knob: Annotated[
        list[str] | None,
        typer.Option(
            help="A learned-topology method's knob values, METHOD[.SETTING]=V1,V2 "
            "(repeatable), e.g. agentprune=0.3,0.5 (its prune_ratio)."
        ),
    ] = None,
    pass_through: Annotated[
        str,
        typer.Option(
            help=f"Comma-separated decision rules ({', '.join(PASS_THROUGH_RULES)}): every "
            "trial and fixed topology is played under each, one front per rule (unanimous = "
            "the consensus pass-through, not in the paper)."
        ),
    ] = TeamOptions.pass_through,
    db: Db = None,
    no_log: NoLog = False,
    resume: Annotated[
        str | None,
        typer.Option(
            help="Continue sweep SWEEP_ID (give its flags again): run only the trials and "
            "fixed topologies it has not stored."
        ),
    ] = None,
    budget_tokens: BudgetTokens = None,
    budget_calls: BudgetCalls = None,
    as_json: Json = False,
) -> None:
    """The token/accuracy front: train one policy per (method, knob, decision rule, token
    weight, seed) on Ray, then evaluate every trial and fixed topology (under each rule) on
    the same held-out tasks."""
    from core.baselines.training import BaselineTrainConfig
    from core.experiment.sweep import run_sweep
    from core.experiment.sweep_plan import (
        SweepConfig,
        parse_knobs,
        parse_methods,
        parse_pass_through,
        parse_seeds,
        parse_token_weights,
        parse_topologies,
    )
    from core.team.recipes import recipe_config

    config = SweepConfig(
        token_weights=parse_token_weights(token_weights),
        seeds=parse_seeds(seeds),
        out=out,
        eval_episodes=eval_episodes,
        eval_seed=eval_seed,
        ray_address=ray_address,
        max_parallel=max_parallel,
        topologies=parse_topologies(topologies),
        methods=parse_methods(methods),
        knobs=parse_knobs(knob or []),
        resume=resume,
        pass_through=parse_pass_through(pass_through),
    )
    budget = {"episodes": episodes} if episodes is not None else {}
    widths = {f"agent.{k}": hidden for k in ("gnn_hidden", "gru_hidden", "q_hidden")}
    given = {**tuning, **widths, **budget, "n_envs": n_envs, "device": "cpu"}
    train_config = checked(recipe_config(TEAM_RECIPE, given))
    baseline_config = BaselineTrainConfig(**budget, n_envs=max(n_envs, 2))
    from core.experiment.budget import check_budget, sweep_episodes
    from core.experiment.finetune import Budget

    spend = Budget(budget_tokens, budget_calls)
    check_budget(opts, spend, ray_address)  # before the sweep makes anything
    planned = sweep_episodes(config, train_config.episodes)
    with SweepBar(sum(config.counts())) as bar:
        result = run_sweep(
            opts, config, train_config, db=db, log=not no_log, progress=bar,
            report=bar.report, baseline_config=baseline_config, notice=bar.note,
            budget=lambda: budget_meter(opts, spend, planned, ray_address=ray_address),
        )  # fmt: skip
    if as_json:
        emit_json(result)
    else:
        _print_sweep(result)
    if result["interrupted"]:
        console.print(
            f"interrupted: kept {len(result['trials'])} finished trials (logged), "
            f"cancelled {len(result['cancelled'])}.",
            soft_wrap=True,
        )
        raise typer.Exit(130)
    if result["failed"]:
        raise typer.Exit(1)


class SweepBar(ProgressBar):
    """Trials and fixed topologies done out of all, with how many trials run and how many
    failed; it appears with the first report, so that a mistake found before any work
    prints no empty bar. Each finished part is also a line of its own: a bar is not drawn
    where stderr is no terminal (a log file, a CI job), a line is."""

    def __init__(self, total: int):
        super().__init__(total, label="sweep")
        self.started = False

    def __enter__(self) -> SweepBar:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.started:
            self.bar.__exit__(*exc)

    def __call__(self, status: Any) -> None:  # type: ignore[override]
        if not self.started:
            self.bar.__enter__()
            self.started = True
        info = f"{status.running} trials running"
        if status.fixed_running:
            info += f", {status.fixed_running} topologies"
        if status.failed:
            info += f", {status.failed} failed"
        done = status.done + status.failed + status.fixed_done
        self.bar.update(self.task, completed=done, info=info)

    def report(self, line: str) -> None:
        self.bar.console.print(f"[red]failed:[/red] {line}", highlight=False, soft_wrap=True)

    def note(self, line: str) -> None:
        self.bar.console.print(line, highlight=False, soft_wrap=True, markup=False)


def _knob_text(point: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v:g}" for k, v in (point.get("knob") or {}).items())


def _print_sweep(result: dict[str, Any]) -> None:
    from rich.table import Table

    def ci(row: dict[str, Any], key: str, fmt: str) -> str:
        lo_hi = row[key + "_ci"]
        bounds = f" [{lo_hi[0]:{fmt}}, {lo_hi[1]:{fmt}}]" if lo_hi else ""
        return f"{row[key]:{fmt}}{bounds}"

    def point(p: dict[str, Any]) -> tuple[Any, ...]:
        return (p["kind"], p["policy"], p["pass_through"], p["token_weight"], p["seed"],
                _knob_text(p))  # fmt: skip

    front = {point(p) for p in result["front"]}
    # A sweep played only under the paper's rule reads as before; with the pass-through, each
    # row names its rule and each rule has a front of its own.
    rules = result["pass_through"] != [TeamOptions.pass_through]
    table = Table(
        title=f"{result['benchmark']}: {result['eval_episodes']} held-out tasks (eval seed "
        f"{result['eval_seed']}); [lo, hi] = 95% interval; * = on the accuracy/token front"
        + (" of its pass-through rule" if rules else ""),
        caption="A fixed topology's reward is given at each swept token weight, in order.",
    )
    columns = ["policy", *(["pass_through"] if rules else []), "token_weight", "seed"]
    for name in (*columns, "accuracy", "mean_tokens", "mean_reward", ""):
        table.add_column(name, justify="left" if name == "policy" else "right")
    for t in result["trials"]:
        on = point({"kind": "trial", "policy": t["method"], **t}) in front
        table.add_row(
            t["method"] + (f" ({_knob_text(t)})" if t["knob"] else ""),
            *([t["pass_through"]] if rules else []), f"{t['token_weight']:g}",
            str(t["seed"]), ci(t, "accuracy", ".3f"), ci(t, "mean_tokens", ".0f"),
            ci(t, "mean_reward", ".3f"), "*" if on else "",
        )  # fmt: skip
    for f in result["fixed"]:
        on = point({"kind": "fixed", "token_weight": None, "seed": None, **f}) in front
        weights = " / ".join(f"{r['token_weight']:g}" for r in f["rewards"])
        rewards = " / ".join(f"{r['mean_reward']:.3f}" for r in f["rewards"])
        table.add_row(
            f["policy"], *([f["pass_through"]] if rules else []), weights, "",
            ci(f, "accuracy", ".3f"), ci(f, "mean_tokens", ".0f"), rewards, "*" if on else "",
        )  # fmt: skip
    Console().print(table)
