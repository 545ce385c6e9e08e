"""``agentqmix``: train, evaluate, compare, benchmark, query and open the lab.

Every user mistake ends in one sentence on stderr and exit code 2 (see :func:`main`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from core.errors import StoreBusy, UserError

app = typer.Typer(
    name="agentqmix",
    help="Agent Q-Mix Lab: learn how a team of LLM agents should talk (QMIX over communication actions).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
bench_app = typer.Typer(help="Benchmarks that print JSON.", no_args_is_help=True)
app.add_typer(bench_app, name="bench")
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

Benchmark = Annotated[
    str | None, typer.Option(help="math, code, mcq, mixed or jsonl:PATH (the agent team).")
]
Env = Annotated[
    str | None, typer.Option(help="package.module:factory or path/file.py:factory (any env).")
]
Backend = Annotated[str, typer.Option(help="sim (synthetic society, offline) or openai.")]
Preset = Annotated[
    str, typer.Option(help="Synthetic-society preset: flash-lite, oss-120b, balanced.")
]
Model = Annotated[str | None, typer.Option(help="Model name (openai back-end).")]
BaseUrl = Annotated[
    str | None, typer.Option(help="OpenAI-compatible endpoint; default $OPENAI_BASE_URL.")
]
Agents = Annotated[str, typer.Option(help="Comma-separated roles, one per agent.")]
Rounds = Annotated[int, typer.Option(min=1, help="Communication rounds per episode.")]
TokenWeight = Annotated[
    float, typer.Option(min=0.0, help="w_tok: reward penalty per token budget.")
]
TokenBudget = Annotated[
    float | None, typer.Option(min=1.0, help="Tokens at which the penalty saturates.")
]
Concurrency = Annotated[int, typer.Option(min=1, help="Episodes and LLM calls in flight at once.")]
NoCache = Annotated[
    bool, typer.Option("--no-cache", help="openai: do not read or write the response cache.")
]
CacheCounts = Annotated[
    bool, typer.Option("--cache-counts-tokens", help="openai: cache hits count tokens.")
]
CacheDir = Annotated[str | None, typer.Option(help="openai: response cache directory.")]
Timeout = Annotated[float, typer.Option(min=0.1, help="openai: per-attempt timeout in seconds.")]
Attempts = Annotated[int, typer.Option(min=1, help="openai: attempts per call.")]
Db = Annotated[
    str | None, typer.Option(help="DuckDB file; default $AGENTQMIX_DB or ./agentqmix.duckdb.")
]
NoLog = Annotated[bool, typer.Option("--no-log", help="Do not log episodes to the database.")]
Json = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]
Device = Annotated[str, typer.Option(help="auto (CUDA when present), cpu or cuda.")]


def team_options(params: dict[str, Any]) -> Any:
    """TeamOptions from a command's parameters (pass ``locals()``): CLI flag names map to
    TeamOptions fields, flags a command does not have keep TeamOptions' defaults."""
    from core.experiment import TeamOptions

    renamed = {"fail": "failures", "timeout": "timeout_s"}
    fields = TeamOptions.__dataclass_fields__
    kwargs = {renamed.get(k, k): v for k, v in params.items() if renamed.get(k, k) in fields}
    if "agents" in params:
        kwargs["roles"] = tuple(r.strip() for r in params["agents"].split(",") if r.strip())
    if "no_cache" in params:
        kwargs["use_cache"] = not params["no_cache"]
    opts = TeamOptions(**kwargs)
    opts.validate()
    opts.failure_specs()  # a bad --fail is reported before any work
    return opts


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
def train(
    out: Annotated[Path | None, typer.Option(help="Where to write the checkpoint.")] = None,
    env: Env = None,
    benchmark: Benchmark = None,
    episodes: Annotated[int, typer.Option(min=1, help="Episodes to train on.")] = 10000,
    mixer: Annotated[str, typer.Option(help="qmix or vdn.")] = "qmix",
    seed: Annotated[int, typer.Option(help="Seed for networks, exploration and episodes.")] = 0,
    device: Device = "auto",
    n_envs: Annotated[int, typer.Option(min=1, help="Episodes collected in lockstep.")] = 32,
    hidden: Annotated[
        int, typer.Option(min=1, help="Width of the GNN, GRU and Q-head layers.")
    ] = 128,
    threads: Annotated[
        int, typer.Option(min=0, help="torch CPU threads (0 = torch's default).")
    ] = 1,
    backend: Backend = "sim",
    preset: Preset = "flash-lite",
    model: Model = None,
    base_url: BaseUrl = None,
    agents: Agents = "solver,coder,analyst,verifier",
    rounds: Rounds = 3,
    token_weight: TokenWeight = 0.1,
    token_budget: TokenBudget = None,
    fail_prob: Annotated[
        float, typer.Option(min=0.0, max=0.99, help="Random failure curriculum.")
    ] = 0.0,
    concurrency: Concurrency = 8,
    no_cache: NoCache = False,
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
    from core.encoders import AgentNetConfig
    from core.mixers import MIXERS, MixerConfig
    from core.training import TrainConfig

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
        return _train_env(env, config, out, as_json)
    from core.experiment import train_team

    opts = team_options(locals())
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


def _train_env(env: str, config: Any, out: Path, as_json: bool) -> None:
    from core.env import load_env
    from core.experiment import save_training_checkpoint
    from core.policy import QMixPolicy
    from core.runner import episode_seed, rollout, summarize
    from core.training import train as run_training

    load_env(env)  # fail fast on a bad spec, before any work
    with ProgressBar(config.episodes) as bar:
        state = run_training(lambda: load_env(env), config, progress=bar)
    policy = QMixPolicy(state.agent, state.mixer, state.device, epsilon=0.0)
    envs = [load_env(env) for _ in range(8)]
    results = []
    for start in range(0, 32, 8):
        results += rollout(
            envs,
            state.shapes,
            policy,
            [episode_seed(config.seed, start + i, True) for i in range(8)],
        )
    summary = summarize(results)
    save_training_checkpoint(out, state, config, None, env, {"greedy": summary})
    if as_json:
        emit_json({"checkpoint": str(out), "episodes": state.episodes_done, "held_out": summary})
    else:
        console.print(
            f"[green]trained[/green] {state.episodes_done} episodes, {state.learner.updates} updates; "
            f"greedy mean return over {summary['episodes']} held-out episodes: "
            f"{summary['mean_return']:.3f}; checkpoint {out}",
            soft_wrap=True,
        )


@app.command("eval")
def evaluate(
    checkpoint: Annotated[Path | None, typer.Option(help="Checkpoint written by train.")] = None,
    policy: Annotated[
        str | None,
        typer.Option(help="A fixed topology: single, chain, star, ring, full, debate, random."),
    ] = None,
    env: Env = None,
    benchmark: Benchmark = None,
    episodes: Annotated[int, typer.Option(min=1, help="Held-out episodes to run.")] = 32,
    first: Annotated[int, typer.Option(min=0, help="Index of the first held-out episode.")] = 0,
    seed: Annotated[int, typer.Option(help="Seed of the held-out episode stream.")] = 0,
    device: Device = "auto",
    fail: Annotated[
        str,
        typer.Option(
            help="Inject failures: AGENT:MODE[@ROUND],... (crash, timeout, byzantine, garbled)."
        ),
    ] = "",
    backend: Backend = "sim",
    preset: Preset = "flash-lite",
    model: Model = None,
    base_url: BaseUrl = None,
    agents: Agents = "solver,coder,analyst,verifier",
    rounds: Rounds = 3,
    token_weight: TokenWeight = 0.1,
    token_budget: TokenBudget = None,
    concurrency: Concurrency = 8,
    no_cache: NoCache = False,
    cache_counts_tokens: CacheCounts = False,
    cache_dir: CacheDir = None,
    timeout: Timeout = 60.0,
    max_attempts: Attempts = 4,
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
        return _eval_env(env, checkpoint, episodes, seed, device, as_json)
    from core.experiment import evaluate_team, resolve_policy

    opts = team_options(locals())
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


def _eval_env(
    env: str, checkpoint: Path, episodes: int, seed: int, device: str, as_json: bool
) -> None:
    from core.checkpoint import load_checkpoint
    from core.env import EnvShapes, load_env
    from core.policy import QMixPolicy
    from core.runner import episode_seed, rollout, summarize
    from core.seeding import resolve_device, seed_everything

    dev = resolve_device(device)
    first = load_env(env)
    ckpt = load_checkpoint(checkpoint, dev, expect=EnvShapes.of(first))
    seed_everything(seed)
    policy = QMixPolicy(ckpt.agent, ckpt.mixer, dev, epsilon=0.0)
    envs = [first] + [load_env(env) for _ in range(min(episodes, 8) - 1)]
    results = []
    for start in range(0, episodes, len(envs)):
        n = min(len(envs), episodes - start)
        seeds = [episode_seed(seed, start + i, held_out=True) for i in range(n)]
        results += rollout(envs[:n], ckpt.shapes, policy, seeds)
    summary = summarize(results)
    if as_json:
        emit_json(summary)
    else:
        console.print(f"{summary['episodes']} episodes, mean return {summary['mean_return']:.3f}")


@app.command()
def compare(
    benchmark: Annotated[str, typer.Option(help="math, code, mcq, mixed or jsonl:PATH.")],
    checkpoint: Annotated[
        Path | None, typer.Option(help="Learned policy to compare (optional).")
    ] = None,
    episodes: Annotated[int, typer.Option(min=1, help="Held-out episodes per policy.")] = 100,
    seed: Annotated[int, typer.Option(help="Seed of the held-out episode stream.")] = 0,
    device: Device = "auto",
    fail: Annotated[
        str, typer.Option(help="Inject failures in every episode: AGENT:MODE[@ROUND],...")
    ] = "",
    backend: Backend = "sim",
    preset: Preset = "flash-lite",
    model: Model = None,
    base_url: BaseUrl = None,
    agents: Agents = "solver,coder,analyst,verifier",
    rounds: Rounds = 3,
    token_weight: TokenWeight = 0.1,
    token_budget: TokenBudget = None,
    concurrency: Concurrency = 8,
    no_cache: NoCache = False,
    db: Db = None,
    no_log: NoLog = False,
    as_json: Json = False,
) -> None:
    """The learned policy and every fixed topology on the same seeded held-out tasks."""
    from core.experiment import compare_team

    opts = team_options(locals())
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
def robustness(
    benchmark: Annotated[str, typer.Option(help="math, code, mcq, mixed or jsonl:PATH.")],
    checkpoint: Annotated[Path | None, typer.Option(help="Learned policy (optional).")] = None,
    episodes: Annotated[int, typer.Option(min=1, help="Held-out episodes per point.")] = 100,
    max_failed: Annotated[int, typer.Option(min=0, help="Largest number of failed agents.")] = 2,
    mode: Annotated[str, typer.Option(help="crash, timeout, byzantine or garbled.")] = "crash",
    seed: Annotated[int, typer.Option(help="Seed of the held-out episode stream.")] = 0,
    device: Device = "auto",
    preset: Preset = "flash-lite",
    agents: Agents = "solver,coder,analyst,verifier",
    rounds: Rounds = 3,
    token_weight: TokenWeight = 0.1,
    concurrency: Concurrency = 8,
    db: Db = None,
    no_log: NoLog = False,
    as_json: Json = False,
) -> None:
    """Accuracy and reward vs number of failed agents: learned policy against fixed topologies."""
    from core.experiment import robustness_team
    from core.team.failures import FAILURE_MODES

    if mode not in FAILURE_MODES:
        raise UserError(f"--mode must be one of {', '.join(FAILURE_MODES)}, not {mode!r}.")
    opts = team_options(locals())
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
    open_browser: Annotated[
        bool, typer.Option("--open", help="Open a browser tab (only where there is a display).")
    ] = False,
) -> None:
    """Serve the Streamlit lab headless and print its URL (an empty database gets a demo)."""
    import os

    from core.store.engine import resolve_db

    root = Path(__file__).resolve().parent.parent
    if not (root / "app.py").is_file():
        raise UserError(f"the lab's app.py is missing from {root}; reinstall with pip install -e .")
    path = resolve_db(db)
    check_lab_database(path)
    check_port_free(port)
    argv = [sys.executable, "-m", "lab.launch", "--db", str(path), "--port", str(port)]
    sys.stdout.flush()
    sys.stderr.flush()
    # Become the launcher (same pid): a signal sent to `agentqmix lab` reaches the process
    # that owns the Streamlit server and stops it.
    os.chdir(root)
    os.execv(sys.executable, argv + (["--open"] if open_browser else []))


def check_lab_database(path: Path) -> None:
    """UserError unless ``path`` is a readable DuckDB file or a new file in an existing folder."""
    import duckdb

    from core.store.engine import attached, check_file

    if not check_file(path):
        return
    try:
        with attached(path, write=False, timeout=5.0) as cur:
            cur.execute("SELECT count(*) FROM duckdb_tables()").fetchone()
    except duckdb.Error as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UserError(f"{path} is not a readable DuckDB database ({first}).") from err


def check_port_free(port: int) -> None:
    """UserError if another program already listens on 127.0.0.1:``port``."""
    import socket

    with socket.socket() as s:
        # As the server will: a port left in TIME_WAIT by a stopped lab is free to reuse.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError as err:
            raise UserError(
                f"port {port} on 127.0.0.1 is in use ({err.strerror}); pass another --port."
            ) from err


# --------------------------------------------------------------------------- benchmarks


@bench_app.command("learner")
def bench_learner(
    agents: Annotated[int, typer.Option(min=1, help="Agents per team.")] = 3,
    batch: Annotated[int, typer.Option(min=1, help="Episodes per update.")] = 32,
    rounds: Annotated[int, typer.Option(min=1, help="Rounds per episode.")] = 3,
    device: Annotated[str, typer.Option(help="auto, cpu or cuda.")] = "auto",
    seconds: Annotated[float, typer.Option(min=0.1, help="How long to time updates.")] = 5.0,
    threads: Annotated[
        int, typer.Option(min=0, help="torch CPU threads (0 = torch's default).")
    ] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Time learner updates at the default network sizes on random data."""
    from core.bench import learner_benchmark

    result = learner_benchmark(
        n_agents=agents, batch=batch, rounds=rounds, device=device, seconds=seconds, threads=threads
    )
    if as_json:
        emit_json(result)
    else:
        console.print(f"{result['train_steps_per_s']} learner updates/s on {result['device']}")


@bench_app.command("store")
def bench_store(
    rows: Annotated[
        int, typer.Option(min=1000, help="Agent-step rows in the load test database.")
    ] = 1_000_000,
    episodes: Annotated[int, typer.Option(min=10, help="Episodes in the throughput test.")] = 4000,
    train_episodes: Annotated[
        int, typer.Option(min=0, help="Episodes of the logging-on/off training job.")
    ] = 256,
    as_json: Json = False,
) -> None:
    """Logging throughput, one-episode load latency, training slowdown from logging."""
    from core.store.bench import run_store_bench

    result = run_store_bench(rows=rows, throughput_episodes=episodes, train_episodes=train_episodes)
    if as_json:
        emit_json(result)
    else:
        console.print_json(data=result)


@bench_app.command("lab")
def bench_lab(
    episodes: Annotated[
        int, typer.Option(min=100, help="Episodes in the benchmark store.")
    ] = 100_000,
    db: Annotated[
        str | None, typer.Option(help="Keep (and reuse) the benchmark store here.")
    ] = None,
    as_json: Json = False,
) -> None:
    """Page render times and replay-slider latency on a large store (AppTest)."""
    from lab.bench import run_lab_bench

    result = run_lab_bench(episodes=episodes, db=db)
    if as_json:
        emit_json(result)
    else:
        console.print_json(data=result, default=str)


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
