"""``agentqmix``: train, evaluate, compare, benchmark, query and open the lab.

Every user mistake ends in one sentence on stderr and exit code 2 (see :func:`main`).
"""

from __future__ import annotations

import functools
import inspect
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from core.backends.registry import BACKENDS
from core.backends.society import PRESETS
from core.errors import StoreBusy, UserError
from core.tasks.registry import TASK_SOURCES
from core.team.failures import FAILURE_MODES
from core.team.options import TeamOptions
from core.team.runtime import TOKEN_PENALTIES
from core.team.topologies import FIXED_TOPOLOGIES

BENCHMARK_HELP = f"Task source: {', '.join(TASK_SOURCES)} or jsonl:PATH (the agent team)."

app = typer.Typer(
    name="agentqmix",
    help="Agent Q-Mix Lab: learn how a team of LLM agents should talk (QMIX over communication actions).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console(stderr=True)


def emit_json(obj: Any) -> None:
    """The one JSON object a ``--json`` command prints on stdout."""
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")


class ProgressBar:
    """A rich progress bar fed by the training loop's progress callback."""

    def __init__(self, total: int, label: str = "training"):
        self.bar = Progress(
            TextColumn(f"[bold]{label}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
            console=console,
        )
        self.task = self.bar.add_task(label, total=total, info="")

    def __enter__(self) -> ProgressBar:
        self.bar.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.__exit__(*exc)

    def __call__(self, done: int, total: int, summary: dict[str, float]) -> None:
        info = f"return {summary['return_ma']:+.3f}  ε {summary['epsilon']:.2f}"
        self.bar.update(self.task, completed=done, info=info)


# --------------------------------------------------------------------------- shared options

Env = Annotated[
    str | None, typer.Option(help="package.module:factory or path/file.py:factory (any env).")
]
Db = Annotated[
    str | None, typer.Option(help="DuckDB file; default $AGENTQMIX_DB or ./agentqmix.duckdb.")
]
NoLog = Annotated[bool, typer.Option("--no-log", help="Do not log episodes to the database.")]
Json = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]
Device = Annotated[str, typer.Option(help="auto (CUDA when present), cpu or cuda.")]
Seed = Annotated[int, typer.Option(min=0, max=2**63 - 1, help="Seed of the episode stream.")]


def _roles(text: str) -> tuple[str, ...]:
    return tuple(r.strip() for r in text.split(",") if r.strip())


@dataclass(frozen=True)
class TeamFlag:
    """One command-line flag that sets a :class:`TeamOptions` field (declared once, here)."""

    field: str
    """The TeamOptions field it sets."""
    option: Any
    """Its ``Annotated[type, typer.Option(...)]``."""
    to_field: Callable[[Any], Any] = lambda v: v
    """Flag value -> field value."""
    to_flag: Callable[[Any], Any] = lambda v: v
    """Field default -> flag default (every default lives in TeamOptions)."""


TEAM_FLAGS: dict[str, TeamFlag] = {
    "backend": TeamFlag(
        "backend", Annotated[str, typer.Option(help=f"Back-end: {', '.join(BACKENDS)}.")]
    ),
    "preset": TeamFlag(
        "preset", Annotated[str, typer.Option(help=f"Simulator preset: {', '.join(PRESETS)}.")]
    ),
    "model": TeamFlag("model", Annotated[str | None, typer.Option(help="Model name (openai).")]),
    "base_url": TeamFlag(
        "base_url",
        Annotated[
            str | None, typer.Option(help="OpenAI-compatible endpoint; default $OPENAI_BASE_URL.")
        ],
    ),
    "agents": TeamFlag(
        "roles",
        Annotated[str, typer.Option(help="Comma-separated roles, one per agent.")],
        _roles,
        ",".join,
    ),
    "rounds": TeamFlag(
        "rounds", Annotated[int, typer.Option(help="Communication rounds per episode.")]
    ),
    "token_weight": TeamFlag(
        "token_weight", Annotated[float, typer.Option(help="w_tok: the reward's token weight.")]
    ),
    "token_budget": TeamFlag(
        "token_budget",
        Annotated[
            float | None,
            typer.Option(help="Tokens at which the capped penalty saturates (default: preset's)."),
        ],
    ),
    "token_penalty": TeamFlag(
        "token_penalty",
        Annotated[
            str,
            typer.Option(help=f"Token penalty: {' or '.join(TOKEN_PENALTIES)} (capped = paper's)."),
        ],
    ),
    "fail_prob": TeamFlag(
        "fail_prob",
        Annotated[float, typer.Option(help="Random failure curriculum: P(agent fails).")],
    ),
    "fail": TeamFlag(
        "failures",
        Annotated[
            str,
            typer.Option(
                help=f"Inject failures: AGENT:MODE[@ROUND],... ({', '.join(FAILURE_MODES)})."
            ),
        ],
    ),
    "embedding": TeamFlag(
        "embedding", Annotated[str, typer.Option(help="Task embedding: hash or minilm.")]
    ),
    "concurrency": TeamFlag(
        "concurrency",
        Annotated[int, typer.Option(help="Episodes in lockstep (and openai calls) at once.")],
    ),
    "no_cache": TeamFlag(
        "use_cache",
        Annotated[bool, typer.Option("--no-cache", help="openai: do not read or write the cache.")],
        lambda v: not v,
        lambda v: not v,
    ),
    "cache_counts_tokens": TeamFlag(
        "cache_counts_tokens",
        Annotated[bool, typer.Option("--cache-counts-tokens", help="openai: hits count tokens.")],
    ),
    "cache_dir": TeamFlag(
        "cache_dir", Annotated[str | None, typer.Option(help="openai: response cache directory.")]
    ),
    "timeout": TeamFlag(
        "timeout_s", Annotated[float, typer.Option(help="openai: per-attempt timeout, seconds.")]
    ),
    "max_attempts": TeamFlag(
        "max_attempts", Annotated[int, typer.Option(help="openai: attempts per call.")]
    ),
}
TEAM = ("agents", "rounds", "token_weight", "token_budget", "token_penalty", "preset", "embedding")
BACKEND = ("backend", "model", "base_url", "concurrency", "no_cache")
OPENAI_EXTRA = ("cache_counts_tokens", "cache_dir", "timeout", "max_attempts")


def team_flags(*names: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give a command the team flags ``names`` (from :data:`TEAM_FLAGS`); the command
    receives them as one validated :class:`TeamOptions` in its ``opts`` parameter, with
    ``benchmark`` and ``seed`` taken from its own parameters of those names."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        defaults = TeamOptions()
        own = [p for p in inspect.signature(fn, eval_str=True).parameters.values()]
        added = [
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                default=TEAM_FLAGS[name].to_flag(getattr(defaults, TEAM_FLAGS[name].field)),
                annotation=TEAM_FLAGS[name].option,
            )
            for name in names
        ]

        @functools.wraps(fn)
        def command(**kwargs: Any) -> Any:
            fields = {TEAM_FLAGS[n].field: TEAM_FLAGS[n].to_field(kwargs.pop(n)) for n in names}
            for name in ("benchmark", "seed"):
                if kwargs.get(name) is not None:
                    fields[name] = kwargs[name]
            opts = TeamOptions(**fields)
            if kwargs.get("benchmark") is not None:
                opts.validate()
            return fn(**kwargs, opts=opts)

        params = [p for p in own if p.name != "opts"] + added
        command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params}
        return command

    return decorate


def print_table(rows: list[dict[str, Any]], columns: list[str], title: str) -> None:
    from rich.table import Table

    table = Table(title=title)
    for c in columns:
        table.add_column(c, justify="left" if c in ("policy", "mode") else "right")
    for row in rows:
        table.add_row(
            *(f"{row[c]:.3f}" if isinstance(row[c], float) else str(row[c]) for c in columns)
        )
    Console().print(table)


# --------------------------------------------------------------------------- train / eval


@app.command()
@team_flags(*TEAM, *BACKEND, "fail_prob")
def train(
    opts: TeamOptions,
    out: Annotated[Path | None, typer.Option(help="Where to write the checkpoint.")] = None,
    env: Env = None,
    benchmark: Annotated[str | None, typer.Option(help=BENCHMARK_HELP)] = None,
    episodes: Annotated[int, typer.Option(min=1, help="Episodes to train on.")] = 10000,
    mixer: Annotated[str, typer.Option(help="Mixer: qmix (monotonic) or vdn (sum).")] = "qmix",
    seed: Annotated[int, typer.Option(min=0, help="Seed of networks, exploration, episodes.")] = 0,
    device: Device = "auto",
    n_envs: Annotated[int, typer.Option(min=1, help="Episodes collected in lockstep.")] = 32,
    hidden: Annotated[
        int, typer.Option(min=1, help="Width of the GNN, GRU and Q-head layers.")
    ] = 128,
    threads: Annotated[
        int, typer.Option(min=0, help="torch CPU threads (0 = torch's default).")
    ] = 1,
    db: Db = None,
    no_log: NoLog = False,
    resume: Annotated[
        str | None, typer.Option(help="Continue run RUN_ID from its last checkpoint.")
    ] = None,
    eval_episodes: Annotated[
        int, typer.Option(min=0, help="Held-out episodes evaluated after training.")
    ] = 100,
    as_json: Json = False,
) -> None:
    """Train the QMIX team (--benchmark) or any protocol env (--env); writes a checkpoint."""
    from core.qmix.encoders import AgentNetConfig
    from core.qmix.mixers import MIXERS, MixerConfig
    from core.qmix.training import TrainConfig

    if mixer not in MIXERS:
        raise UserError(f"--mixer must be one of {', '.join(MIXERS)}, not {mixer!r}.")
    if resume:
        return _resume_training(resume, db, device, as_json)
    if (env is None) == (benchmark is None):
        raise UserError("train needs exactly one of --env SPEC or --benchmark NAME.")
    if out is None:
        raise UserError("train needs --out CKPT (where to write the checkpoint).")
    config = TrainConfig(
        episodes=episodes,
        seed=seed,
        device=device,
        n_envs=n_envs,
        cpu_threads=threads,
        agent=AgentNetConfig(gnn_hidden=hidden, gru_hidden=hidden, q_hidden=hidden),
        mixer=MixerConfig(kind=mixer),
    )
    if env is not None:
        from core.experiment.train import train_env
        from core.qmix.env import load_env

        load_env(env)  # a bad spec is one sentence, before any progress bar
        with ProgressBar(episodes) as bar:
            summary = train_env(env, config, out, progress=bar)
        if as_json:
            return emit_json(summary)
        console.print(
            f"[green]trained[/green] {summary['episodes']} episodes, {summary['updates']} updates; "
            f"greedy mean return over {summary['held_out']['episodes']} held-out episodes: "
            f"{summary['held_out']['mean_return']:.3f}; checkpoint {out}",
            soft_wrap=True,
        )
        return None
    from core.experiment import train_team

    with ProgressBar(episodes) as bar:
        outcome = train_team(
            opts, config, out, db=db, log=not no_log, progress=bar, eval_episodes=eval_episodes
        )
    _report_training(outcome, as_json)


def _report_training(outcome: Any, as_json: bool) -> None:
    summary = {
        "run_id": outcome.run_id,
        "checkpoint": str(outcome.checkpoint),
        "episodes": outcome.state.episodes_done,
        "updates": outcome.state.learner.updates,
        "held_out": outcome.evaluation,
    }
    if as_json:
        emit_json(summary)
        return
    ev = outcome.evaluation
    line = f"[green]trained[/green] {summary['episodes']} episodes, {summary['updates']} updates"
    if ev:
        line += (
            f"; held-out accuracy {ev['accuracy']:.3f}, mean tokens {ev['mean_tokens']:.0f}, "
            f"mean reward {ev['mean_reward']:.3f}"
        )
    console.print(line + f"; run {outcome.run_id}; checkpoint {outcome.checkpoint}", soft_wrap=True)


def _resume_training(run_id: str, db: str | None, device: str, as_json: bool) -> None:
    from core.experiment import options_from_dict, train_config_from_dict, train_team
    from core.store.queries import get_run

    info = get_run(db, run_id)
    if info is None:
        raise UserError(f"no run {run_id!r} in the database.")
    if info.kind != "train" or "team" not in info.config or "train" not in info.config:
        raise UserError(f"run {run_id} is not a team training run; only those can be resumed.")
    if not info.checkpoint or not Path(info.checkpoint).is_file():
        raise UserError(f"run {run_id} has no checkpoint file to resume from.")
    opts = options_from_dict(info.config["team"])
    config = train_config_from_dict(info.config["train"])
    config.device = device
    with ProgressBar(config.episodes, label="resuming") as bar:
        outcome = train_team(
            opts, config, Path(info.checkpoint), db=db, progress=bar, resume_run=run_id
        )
    _report_training(outcome, as_json)


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
    as_json: Json = False,
) -> None:
    """Run a policy greedily and decentralised (each agent on its own Q-values), held out."""
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

    chosen = resolve_policy(policy, checkpoint, opts, device)
    summary, _ = evaluate_team(opts, chosen, episodes, seed, db=db, log=not no_log, first=first)
    if summary["calls"] and summary["failed_calls"] == summary["calls"]:
        console.print(
            "[yellow]warning:[/yellow] every call to the back-end failed; check --model, "
            "--base-url and the API key (errors are in the llm_calls table).",
            soft_wrap=True,
        )
    if as_json:
        emit_json(summary)
    else:
        console.print(
            f"{summary['policy']}: {summary['episodes']} episodes, accuracy {summary['accuracy']:.3f}, "
            f"mean tokens {summary['mean_tokens']:.0f}, mean reward {summary['mean_reward']:.3f}",
            soft_wrap=True,
        )


@app.command()
@team_flags(*TEAM, *BACKEND, "fail")
def compare(
    opts: TeamOptions,
    benchmark: Annotated[str, typer.Option(help=BENCHMARK_HELP)],
    checkpoint: Annotated[
        Path | None, typer.Option(help="Learned policy to compare (optional).")
    ] = None,
    episodes: Annotated[int, typer.Option(min=1, help="Held-out episodes per policy.")] = 100,
    seed: Seed = 0,
    device: Device = "auto",
    db: Db = None,
    no_log: NoLog = False,
    as_json: Json = False,
) -> None:
    """The learned policy and every fixed topology on the same seeded held-out tasks."""
    from core.experiment import compare_team

    rows = compare_team(opts, checkpoint, episodes, seed, db=db, log=not no_log, device=device)
    rows.sort(key=lambda r: -r["mean_reward"])
    if as_json:
        emit_json({"benchmark": benchmark, "episodes": episodes, "seed": seed, "policies": rows})
    else:
        print_table(
            rows,
            ["policy", "accuracy", "mean_tokens", "mean_reward"],
            f"{benchmark}, {episodes} held-out episodes",
        )


@app.command()
@team_flags(*TEAM, "concurrency")
def robustness(
    opts: TeamOptions,
    benchmark: Annotated[str, typer.Option(help=BENCHMARK_HELP)],
    checkpoint: Annotated[Path | None, typer.Option(help="Learned policy (optional).")] = None,
    episodes: Annotated[int, typer.Option(min=1, help="Held-out episodes per point.")] = 100,
    max_failed: Annotated[int, typer.Option(min=0, help="Largest number of failed agents.")] = 2,
    mode: Annotated[str, typer.Option(help=f"Failure mode: {', '.join(FAILURE_MODES)}.")] = "crash",
    seed: Seed = 0,
    device: Device = "auto",
    db: Db = None,
    no_log: NoLog = False,
    as_json: Json = False,
) -> None:
    """Accuracy and reward vs number of failed agents: learned policy against fixed topologies."""
    from core.experiment import robustness_team

    if mode not in FAILURE_MODES:
        raise UserError(f"--mode must be one of {', '.join(FAILURE_MODES)}, not {mode!r}.")
    rows = robustness_team(
        opts, checkpoint, episodes, seed, max_failed, mode, db=db, log=not no_log, device=device
    )
    if as_json:
        emit_json({"benchmark": benchmark, "mode": mode, "episodes": episodes, "points": rows})
    else:
        print_table(
            rows,
            ["policy", "failed_agents", "accuracy", "mean_tokens", "mean_reward"],
            f"robustness ({mode})",
        )


# --------------------------------------------------------------------------- the store


@app.command()
def runs(db: Db = None, as_json: Json = False) -> None:
    """List runs with their headline figures (episodes, accuracy, tokens, reward, status)."""
    from core.store import commands

    commands.print_table(
        commands.runs(db), as_json=as_json, title="runs", width=None if sys.stdout.isatty() else 200
    )


@app.command()
def sql(
    query: Annotated[
        str, typer.Argument(help="One read-only statement, e.g. SELECT ... FROM episodes.")
    ],
    db: Db = None,
    as_json: Json = False,
) -> None:
    """Run read-only SQL against the episode store and print a table."""
    from core.store import commands

    commands.print_table(
        commands.sql(query, db), as_json=as_json, width=None if sys.stdout.isatty() else 200
    )


@app.command()
def export(
    run: Annotated[str, typer.Option(help="RUN_ID to export.")],
    parquet: Annotated[Path, typer.Option(help="Folder to write one Parquet file per table into.")],
    db: Db = None,
) -> None:
    """Write a run's tables as Parquet files."""
    from core.store import commands

    counts = commands.export_run(run, parquet, db)
    console.print(
        f"wrote {', '.join(f'{t} ({n} rows)' for t, n in counts.items())} to {parquet}",
        soft_wrap=True,
    )


@app.command("delete-run")
def delete_run(run: Annotated[str, typer.Option(help="RUN_ID to delete.")], db: Db = None) -> None:
    """Delete a run and every row it logged."""
    from core.store import commands

    counts = commands.delete_run(run, db)
    console.print(f"deleted run {run} ({sum(counts.values())} rows)")


@app.command()
def lab(
    db: Db = None,
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port on 127.0.0.1.")] = 8501,
    headless: Annotated[bool, typer.Option("--headless", help="Do not open a browser.")] = False,
) -> None:
    """Open the Streamlit lab (builds a small demo first if the database is empty)."""
    import os
    import subprocess

    from core.store.engine import resolve_db

    root = Path(__file__).resolve().parent.parent
    app_file = root / "app.py"
    if not app_file.is_file():
        raise UserError(f"the lab's app.py is missing from {root}; reinstall with pip install -e .")
    env = {**os.environ, "AGENTQMIX_DB": str(resolve_db(db))}
    cmd = [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(app_file),
        "--server.address",
        "127.0.0.1",
        "--server.port",
        str(port),
        "--server.headless",
        "true" if headless else "false",
    ]
    console.print(f"lab on http://127.0.0.1:{port}  (database {env['AGENTQMIX_DB']})")
    raise typer.Exit(subprocess.call(cmd, cwd=root, env=env))


# --------------------------------------------------------------------------- benchmarks

BENCHMARKS: dict[str, str] = {
    "learner": "learner updates/s, multiply-adds and the machine's matmul rate",
    "store": "logging throughput, one-episode load latency, training slowdown from logging",
    "lab": "page render times and replay-slider latency on a large store",
    "openai-concurrency": "seconds per episode against a local server with fixed latency",
    "sim-calibration": "accuracy and tokens per fixed topology and difficulty (the simulator)",
    "actions-by-difficulty": "what a trained policy does on easy and hard tasks",
    "rollouts": "rollout episodes/s of the learned policy on the simulator, per lockstep width",
    "scaling": "learner updates/s and rollout episodes/s against agents N and rounds T, memory",
}
"""``agentqmix bench NAME``: the modules of ``benchmarks/`` (``benchmarks.<name>``), run as
their own process so that the lab's benchmark never loads the lab into ``core``."""


@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    add_help_option=False,
    help="Benchmarks that print JSON: "
    + "; ".join(f"{name} ({what})" for name, what in BENCHMARKS.items())
    + ". `agentqmix bench NAME --help` lists a benchmark's options.",
)
def bench(
    ctx: typer.Context,
    name: Annotated[str | None, typer.Argument(help="Which benchmark.")] = None,
) -> None:
    import subprocess

    if name is None or name in ("--help", "-h"):
        console.print("benchmarks (agentqmix bench NAME [OPTIONS]):")
        for key, what in BENCHMARKS.items():
            console.print(f"  {key:<24} {what}", highlight=False)
        return
    if name not in BENCHMARKS:
        raise UserError(f"no benchmark {name!r}; choose one of {', '.join(BENCHMARKS)}.")
    module = "benchmarks." + name.replace("-", "_")
    raise typer.Exit(subprocess.call([sys.executable, "-m", module, *ctx.args]))


def main(argv: list[str] | None = None) -> int:
    """Entry point: user errors become one line on stderr and exit code 2.

    Click itself reports bad flags and values (one line, exit 2); :class:`UserError`
    covers what only the command can tell (a missing file, a corrupt checkpoint).
    """
    try:
        app(args=argv, standalone_mode=True)
        return_code = 0
    except (UserError, StoreBusy) as exc:
        console.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
        return_code = 2
    except SystemExit as exc:
        return_code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    if argv is None:
        sys.exit(return_code)
    return return_code


if __name__ == "__main__":
    main()
