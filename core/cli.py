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

from core.errors import UserError

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


# --------------------------------------------------------------------------- generic env


@app.command()
def train(
    out: Annotated[Path, typer.Option(help="Where to write the checkpoint.")],
    env: Annotated[str | None, typer.Option(help="package.module:factory or path/file.py:factory")] = None,
    episodes: Annotated[int, typer.Option(min=1, help="Episodes to train on.")] = 2000,
    mixer: Annotated[str, typer.Option(help="qmix or vdn.")] = "qmix",
    seed: Annotated[int, typer.Option(help="Seed for networks, exploration and episodes.")] = 0,
    device: Annotated[str, typer.Option(help="auto (CUDA when present), cpu or cuda.")] = "auto",
    n_envs: Annotated[int, typer.Option(min=1, help="Episodes collected in lockstep.")] = 8,
    hidden: Annotated[int, typer.Option(min=1, help="Width of the GNN, GRU and Q-head layers.")] = 128,
) -> None:
    """Train a QMIX team and write a checkpoint; prints a summary."""
    from core.checkpoint import save_checkpoint
    from core.encoders import AgentNetConfig
    from core.env import load_env
    from core.mixers import MIXERS, MixerConfig
    from core.runner import rollout, summarize
    from core.training import TrainConfig
    from core.training import train as run_training

    if mixer not in MIXERS:
        raise UserError(f"--mixer must be one of {', '.join(MIXERS)}, not {mixer!r}.")
    if env is None:
        raise UserError("train needs --env SPEC (or --benchmark NAME for the agent team).")
    config = TrainConfig(
        episodes=episodes,
        seed=seed,
        device=device,
        n_envs=n_envs,
        agent=AgentNetConfig(gnn_hidden=hidden, gru_hidden=hidden, q_hidden=hidden),
        mixer=MixerConfig(kind=mixer),
    )
    load_env(env)  # fail fast on a bad spec, before any work
    with ProgressBar(episodes) as bar:
        state = run_training(lambda: load_env(env), config, progress=bar)
    from core.policy import QMixPolicy
    from core.runner import episode_seed

    policy = QMixPolicy(state.agent, state.mixer, state.device, epsilon=0.0)
    envs = [load_env(env) for _ in range(8)]
    results = []
    for start in range(0, 32, 8):
        seeds = [episode_seed(seed, start + i, held_out=True) for i in range(8)]
        results += rollout(envs, state.shapes, policy, seeds)
    summary = summarize(results)
    save_checkpoint(
        out, state.agent, state.mixer, state.shapes, config.agent, config.mixer,
        env={"spec": env}, meta={"episodes": state.episodes_done, "seed": seed, "greedy": summary},
    )
    console.print(
        f"[green]trained[/green] {state.episodes_done} episodes, {state.learner.updates} updates; "
        f"greedy mean return over {summary['episodes']} held-out episodes: {summary['mean_return']:.3f}; "
        f"checkpoint: {out}"
    )


@app.command("eval")
def evaluate(
    checkpoint: Annotated[Path, typer.Option(help="Checkpoint written by train.")],
    env: Annotated[str | None, typer.Option(help="package.module:factory or path/file.py:factory")] = None,
    episodes: Annotated[int, typer.Option(min=1, help="Held-out episodes to run.")] = 32,
    seed: Annotated[int, typer.Option(help="Seed of the held-out episode stream.")] = 0,
    device: Annotated[str, typer.Option(help="auto, cpu or cuda.")] = "auto",
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Run the greedy, decentralised policy (each agent on its own Q-values)."""
    from core.checkpoint import load_checkpoint
    from core.env import EnvShapes, load_env
    from core.policy import QMixPolicy
    from core.runner import episode_seed, rollout, summarize
    from core.seeding import resolve_device, seed_everything

    dev = resolve_device(device)
    if env is None:
        raise UserError("eval needs --env SPEC (or --benchmark NAME for the agent team).")
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


# --------------------------------------------------------------------------- benchmarks


@bench_app.command("learner")
def bench_learner(
    agents: Annotated[int, typer.Option(min=1, help="Agents per team.")] = 3,
    batch: Annotated[int, typer.Option(min=1, help="Episodes per update.")] = 32,
    rounds: Annotated[int, typer.Option(min=1, help="Rounds per episode.")] = 3,
    device: Annotated[str, typer.Option(help="auto, cpu or cuda.")] = "auto",
    seconds: Annotated[float, typer.Option(min=0.1, help="How long to time updates.")] = 5.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Time learner updates at the default network sizes on random data."""
    from core.bench import learner_benchmark

    result = learner_benchmark(n_agents=agents, batch=batch, rounds=rounds, device=device, seconds=seconds)
    if as_json:
        emit_json(result)
    else:
        console.print(f"{result['train_steps_per_s']} learner updates/s on {result['device']}")


def main(argv: list[str] | None = None) -> int:
    """Entry point: user errors become one line on stderr and exit code 2.

    Click itself reports bad flags and values (one line, exit 2); :class:`UserError`
    covers what only the command can tell (a missing file, a corrupt checkpoint).
    """
    try:
        app(args=argv, standalone_mode=True)
        return_code = 0
    except UserError as exc:
        console.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
        return_code = 2
    except SystemExit as exc:
        return_code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    if argv is None:
        sys.exit(return_code)
    return return_code
