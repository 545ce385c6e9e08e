"""``agentqmix train``: Agent Q-Mix on the team (--benchmark) or any env (--env), a
learned-topology method (--method), or a stored run continued (--resume)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from core.cli.app import app
from core.cli.budget import budget_meter
from core.cli.flags import (
    BACKEND,
    BENCHMARK_HELP,
    LEARNED_METHODS,
    MAX_EPISODES,
    RECIPE_HELP,
    TEAM,
    Db,
    Device,
    Env,
    Json,
    NoLog,
    check_store_exists,
    checked,
    learner_flags,
    recipe_defaults,
    team_flags,
)
from core.cli.output import ProgressBar, console, emit_json, exit_if_no_call_answered
from core.errors import UserError
from core.team.options import TeamOptions
from core.team.recipes import (
    ENV_RECIPE,
    FINETUNE_RECIPE,
    TEAM_RECIPE,
    default_recipe,
    recipe_config,
)


@app.command()
@team_flags(*TEAM, *BACKEND, "fail_prob", "fail")
@learner_flags
def train(
    opts: TeamOptions,
    tuning: dict[str, Any],
    out: Annotated[Path | None, typer.Option(help="Where to write the checkpoint.")] = None,
    env: Env = None,
    benchmark: Annotated[str | None, typer.Option(help=BENCHMARK_HELP)] = None,
    episodes: Annotated[
        int | None,
        typer.Option(
            min=1, max=MAX_EPISODES, help=f"Episodes to train on ({recipe_defaults('episodes')})."
        ),
    ] = None,
    mixer: Annotated[str, typer.Option(help="Mixer: qmix (monotonic) or vdn (sum).")] = "qmix",
    recipe: Annotated[
        str | None,
        typer.Option(
            help="Settings tuned for an environment, under the flags given: "
            + "; ".join(f"{name} = {about}" for name, about in RECIPE_HELP.items())
            + f". Default: {TEAM_RECIPE} for --benchmark, {FINETUNE_RECIPE} for --init on a "
            f"real back-end, {ENV_RECIPE} for --env."
        ),
    ] = None,
    seed: Annotated[
        int, typer.Option(min=0, max=2**63 - 1, help="Seed of networks, exploration, episodes.")
    ] = 0,
    device: Device = "auto",
    n_envs: Annotated[
        int | None,
        typer.Option(
            min=1, max=4096, help=f"Episodes collected in lockstep ({recipe_defaults('n_envs')})."
        ),
    ] = None,
    hidden: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=4096,
            help="Width of the GNN, GRU and Q-head layers "
            f"({recipe_defaults('agent.gnn_hidden')}).",
        ),
    ] = None,
    threads: Annotated[
        int | None,
        typer.Option(
            min=0,
            max=256,
            help=f"torch CPU threads, 0 = torch's ({recipe_defaults('cpu_threads')}).",
        ),
    ] = None,
    db: Db = None,
    no_log: NoLog = False,
    resume: Annotated[
        str | None,
        typer.Option(
            help="Continue run RUN_ID from its last checkpoint (a fresh learner if it has "
            "none), numbering episodes after its last logged one."
        ),
    ] = None,
    eval_episodes: Annotated[
        int,
        typer.Option(min=0, max=MAX_EPISODES, help="Held-out episodes evaluated after training."),
    ] = 100,
    checkpoint_every_s: Annotated[
        float | None,
        typer.Option(
            help="Also checkpoint a logged run every this many seconds (default 30), "
            "besides every 10% of its episodes."
        ),
    ] = None,
    init: Annotated[
        Path | None,
        typer.Option(
            help="Continue this Agent Q-Mix checkpoint's policy (e.g. trained on the simulator) "
            "instead of a random one: its network shapes, ε from the schedule's end."
        ),
    ] = None,
    budget_tokens: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Stop cleanly before spending more tokens than this (--method qmix resumes).",
        ),
    ] = None,
    budget_calls: Annotated[
        int | None,
        typer.Option(
            min=1, help="Stop cleanly before more calls than this (--method qmix resumes)."
        ),
    ] = None,
    method: Annotated[
        str,
        typer.Option(
            help=f"What to train: {', '.join(LEARNED_METHODS)} (qmix = Agent Q-Mix; the others "
            "are the learned-topology methods of docs/baselines.md)."
        ),
    ] = "qmix",
    settings: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="A learned-topology method's setting, KEY=VALUE (repeatable), e.g. "
            "prune_ratio=0.3; docs/baselines.md lists them.",
        ),
    ] = None,
    train_tokens: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="A learned-topology method's budget in tokens too: it stops when its training "
            "episodes have spent this many or --episodes are played, whichever comes first "
            "(e.g. an Agent Q-Mix run's train_tokens: equal tokens).",
        ),
    ] = None,
    as_json: Json = False,
) -> None:
    """Train the QMIX team (--benchmark) or any protocol env (--env), or a learned-topology
    method (--method); writes a checkpoint.

    Settings start from a recipe (--recipe), each flag given overrides its one; the run and
    the checkpoint store them all. On a real back-end it first times a few calls and prints
    an estimate; a budget (--budget-tokens/--budget-calls, required off this machine) stops
    it cleanly."""
    from core.experiment import train_team
    from core.experiment.finetune import Budget

    if method not in LEARNED_METHODS:
        raise UserError(f"--method must be one of {', '.join(LEARNED_METHODS)}, not {method!r}.")
    budget = Budget(budget_tokens, budget_calls)
    if method != "qmix":
        _refuse_qmix_flags(method, tuning, recipe, env, resume, mixer, hidden, init)
        return _train_baseline(
            opts, method, settings or [], out, benchmark, episodes, seed, n_envs, threads, db,
            no_log, eval_episodes, as_json, train_tokens, budget,
        )  # fmt: skip
    if train_tokens is not None:
        raise UserError(
            "--train-tokens is for the learned-topology methods (--method gptswarm, ...)."
        )
    if settings:
        raise UserError("--set is for the learned-topology methods (--method gptswarm, ...).")
    tuning = _qmix_tuning(tuning, mixer, recipe, episodes, n_envs, threads, hidden)
    if resume:
        if tuning or recipe or mixer != "qmix":
            raise UserError(
                "--resume continues a run with the settings it stored; leave out the training "
                "settings (--recipe, --mixer, --episodes, --td-lambda, ...)."
            )
        return _resume_training(resume, db, device, as_json, out, checkpoint_every_s, budget)
    if (env is None) == (benchmark is None):
        raise UserError("train needs exactly one of --env SPEC or --benchmark NAME.")
    if out is None:
        raise UserError("train needs --out CKPT (where to write the checkpoint).")
    recipe = recipe or default_recipe(env is not None, opts.backend, init is not None)
    given = {**tuning, "seed": seed, "device": device, "mixer.kind": mixer}
    config = checked(recipe_config(recipe, given))
    if env is not None:
        if init is not None or budget.given:
            raise UserError("--init and the budgets train the agent team (--benchmark), not --env.")
        return _train_env(env, config, out, recipe, as_json)
    if init is not None and not init.is_file():
        raise UserError(f"--init {init} is not a checkpoint file.")
    with (
        budget_meter(opts, budget, config.episodes, init=init, in_flight=config.n_envs) as meter,
        ProgressBar(config.episodes, meter=meter) as bar,
    ):
        outcome = train_team(
            opts, config, out, db=db, log=not no_log, progress=bar, eval_episodes=eval_episodes,
            checkpoint_every_s=checkpoint_every_s, recipe=recipe, init=init, meter=meter,
        )  # fmt: skip
    _report_team_training(outcome, as_json, meter)


def _refuse_qmix_flags(
    method: str,
    tuning: dict[str, Any],
    recipe: str | None,
    env: str | None,
    resume: str | None,
    mixer: str,
    hidden: int | None,
    init: Path | None,
) -> None:
    """UserError naming the first flag given that only Agent Q-Mix takes (``train --method
    METHOD`` trains a learned-topology method, which takes its settings with ``--set``)."""
    if tuning or recipe is not None:
        raise UserError(
            "--recipe and the learner flags (--td-lambda, ...) are for --method qmix; "
            f"{method} takes its settings with --set."
        )
    qmix_only = {
        "--env": env is not None,
        "--resume": bool(resume),
        "--mixer": mixer != "qmix",
        "--hidden": hidden is not None,
    }
    flag = next((name for name, given in qmix_only.items() if given), None)
    if flag is not None:
        raise UserError(f"{flag} is for --method qmix; {method} takes its settings with --set.")
    if init is not None:
        raise UserError(
            f"--init continues an Agent Q-Mix checkpoint (--method qmix); {method} trains "
            "from its own initial weights."
        )


def _qmix_tuning(
    tuning: dict[str, Any],
    mixer: str,
    recipe: str | None,
    episodes: int | None,
    n_envs: int | None,
    threads: int | None,
    hidden: int | None,
) -> dict[str, Any]:
    """The recipe settings the user gave (dotted path -> value): the learner flags' and those
    of ``--episodes``, ``--n-envs``, ``--threads`` and ``--hidden`` (all three widths), once
    ``--mixer`` and ``--recipe`` are known names."""
    from core.qmix.mixers import MIXERS
    from core.team.recipes import get_recipe

    if mixer not in MIXERS:
        raise UserError(f"--mixer must be one of {', '.join(MIXERS)}, not {mixer!r}.")
    if recipe is not None:
        get_recipe(recipe)
    given = {"episodes": episodes, "n_envs": n_envs, "cpu_threads": threads}
    tuning = {**tuning, **{k: v for k, v in given.items() if v is not None}}
    if hidden is not None:
        tuning.update({f"agent.{k}": hidden for k in ("gnn_hidden", "gru_hidden", "q_hidden")})
    return tuning


def _train_env(env: str, config: Any, out: Path, recipe: str, as_json: bool) -> None:
    """``train --env SPEC``: any protocol env, no store, one line (or ``--json``)."""
    from core.experiment.train import train_env
    from core.qmix.env import load_env

    load_env(env)  # a bad spec is one sentence, before any progress bar
    with ProgressBar(config.episodes) as bar:
        summary = train_env(env, config, out, progress=bar, recipe=recipe)
    if as_json:
        return emit_json(summary)
    console.print(
        f"[green]trained[/green] {summary['episodes']} episodes, {summary['updates']} updates "
        f"({recipe} recipe); greedy mean return over {summary['held_out']['episodes']} "
        f"held-out episodes: {summary['held_out']['mean_return']:.3f}; checkpoint {out}",
        soft_wrap=True,
    )
    return None


def _train_baseline(
    opts: TeamOptions,
    method: str,
    settings: list[str],
    out: Path | None,
    benchmark: str | None,
    episodes: int | None,
    seed: int,
    n_envs: int | None,
    threads: int | None,
    db: str | None,
    no_log: bool,
    eval_episodes: int,
    as_json: bool,
    train_tokens: int | None = None,
    budget: Any = None,
) -> None:
    """``train --method NAME`` for a learned-topology method (docs/baselines.md); on a real
    back-end, the estimate, the budget and the paid-endpoint refusal of Agent Q-Mix's."""
    from core.baselines.registry import method_config, parse_pairs
    from core.baselines.training import BaselineTrainConfig
    from core.experiment.finetune import Budget
    from core.experiment.methods import train_baseline

    if benchmark is None:
        raise UserError(f"train --method {method} needs --benchmark NAME.")
    if out is None:
        raise UserError("train needs --out CKPT (where to write the checkpoint).")
    config = method_config(method, parse_pairs(settings))
    given = {
        "episodes": episodes, "n_envs": n_envs, "cpu_threads": threads, "max_tokens": train_tokens,
    }  # fmt: skip
    train_config = checked(
        BaselineTrainConfig(seed=seed, **{k: v for k, v in given.items() if v is not None})
    )
    with (
        budget_meter(
            opts, budget or Budget(), train_config.episodes, in_flight=train_config.n_envs
        ) as meter,
        ProgressBar(train_config.episodes, label=method, meter=meter) as bar,
    ):
        outcome = train_baseline(
            opts, method, config, train_config, out, db=db, log=not no_log,
            progress=lambda done, total, stats: bar(done, total, _bar_info(stats)),
            eval_episodes=eval_episodes, meter=meter,
        )  # fmt: skip
    state = outcome.state
    summary = {
        "method": method,
        "run_id": outcome.run_id,
        "checkpoint": str(outcome.checkpoint),
        "episodes": state.episodes_done,
        "updates": state.updates,
        "train_tokens": state.tokens,
        "stages": [s.what for s in state.stages],
        "held_out": outcome.evaluation,
    }
    after_stop = (
        "a learned-topology method does not resume: train it again with a larger "
        "--budget-tokens/--budget-calls"
    )
    _report_training(summary, outcome, as_json, meter, after_stop, what=f"{method}: ")


def _bar_info(stats: dict[str, float]) -> dict[str, float]:
    """What the training bar shows for a learned-topology method: its last batch's reward."""
    return {"return_ma": stats["reward"]}


def _report_team_training(outcome: Any, as_json: bool, meter: Any = None) -> None:
    """An Agent Q-Mix run's report (trained or resumed); a budget's stop says how to resume."""
    summary = {
        "run_id": outcome.run_id,
        "checkpoint": str(outcome.checkpoint),
        "episodes": outcome.state.episodes_done,
        "updates": outcome.state.learner.updates,
        "train_tokens": outcome.train_tokens,
        "held_out": outcome.evaluation,
    }
    after_stop = (
        f"resume with agentqmix train --resume {outcome.run_id} "
        "(raise the budget with --budget-tokens/--budget-calls)"
    )
    _report_training(summary, outcome, as_json, meter, after_stop)


def _report_training(
    summary: dict[str, Any],
    outcome: Any,
    as_json: bool,
    meter: Any,
    after_stop: str,
    what: str = "",
) -> None:
    """The one training report, of Agent Q-Mix and the learned-topology methods alike:
    ``summary`` (with what was spent under a budget) as ``--json``, else one line, and when a
    budget stopped the run, ``after_stop`` (what to do next)."""
    if meter is not None:
        summary["spent"] = {"tokens": meter.tokens, "calls": meter.calls}
        summary["stopped"] = outcome.stopped
    held_out = [outcome.evaluation] if outcome.evaluation else []
    if as_json:
        emit_json(summary)
        return exit_if_no_call_answered(held_out)
    ev = outcome.evaluation
    line = (
        f"[green]trained[/green] {what}{summary['episodes']} episodes, {summary['updates']} updates"
    )
    if ev:
        line += (
            f"; held-out accuracy {ev['accuracy']:.3f}, mean tokens {ev['mean_tokens']:.0f}, "
            f"mean reward {ev['mean_reward']:.3f}"
        )
    if meter is not None:
        line += f"; spent {meter.describe()}"
    console.print(line + f"; run {outcome.run_id}; checkpoint {outcome.checkpoint}", soft_wrap=True)
    if outcome.stopped:
        console.print(f"{outcome.stopped}; {after_stop}", soft_wrap=True, highlight=False)
    exit_if_no_call_answered(held_out)


def _resume_training(
    run_id: str,
    db: str | None,
    device: str,
    as_json: bool,
    out: Path | None = None,
    checkpoint_every_s: float | None = None,
    budget: Any = None,
) -> None:
    from core.experiment import options_from_dict, train_team
    from core.store.queries import get_run
    from core.team.recipes import stored_train_config

    check_store_exists(db)

    info = get_run(db, run_id)
    if info is None:
        raise UserError(f"no run {run_id!r} in the database.")
    if info.kind != "train" or "team" not in info.config or "train" not in info.config:
        raise UserError(f"run {run_id} is not a team training run; only those can be resumed.")
    if "method" in info.config:
        method = info.config["method"].get("name", "a learned-topology method")
        raise UserError(
            f"run {run_id} trained {method}; only Agent Q-Mix runs resume (train {method} again)."
        )
    opts = options_from_dict(info.config["team"])
    recipe = info.config.get("recipe", TEAM_RECIPE)  # runs before recipes were the society's
    config = stored_train_config(info.config["train"], recipe)
    config.device = device
    from core.experiment.finetune import Budget
    from core.store.queries import run_spend

    stored = (info.config.get("finetune") or {}).get("budget") or {}
    given = budget if budget is not None and budget.given else Budget(**stored)
    with (
        budget_meter(
            opts, given, config.episodes, run_spend(db, run_id), in_flight=config.n_envs
        ) as meter,
        ProgressBar(config.episodes, label="resuming", meter=meter) as bar,
    ):
        outcome = train_team(
            opts,
            config,
            out,
            db=db,
            progress=bar,
            resume_run=run_id,
            checkpoint_every_s=checkpoint_every_s,
            recipe=recipe,
            meter=meter,
        )
    _report_team_training(outcome, as_json, meter)
