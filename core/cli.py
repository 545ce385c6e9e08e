"""``agentqmix``: train, evaluate, compare, benchmark, query and open the lab.

Every user mistake ends in one sentence on stderr and exit code 2 (see :func:`main`).
"""

from __future__ import annotations

import functools
import inspect
import json
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from core.backends.registry import BACKENDS
from core.backends.society import PRESETS
from core.baselines.names import METHOD_NAMES
from core.errors import StoreBusy, UserError
from core.qmix.config import PRECISIONS
from core.tasks.registry import TASK_SOURCES
from core.team.failures import FAILURE_MODES
from core.team.options import TeamOptions
from core.team.recipes import ENV_RECIPE, RECIPES, TEAM_RECIPE, recipe_value
from core.team.runtime import IDLE_RULES, PASS_THROUGH_RULES, TOKEN_PENALTIES
from core.team.topologies import FIXED_TOPOLOGIES

LEARNED_METHODS = ("qmix", *METHOD_NAMES)
"""``train --method``: Agent Q-Mix (the default) or a learned-topology method."""
BENCHMARK_HELP = f"Task source: {', '.join(TASK_SOURCES)} or jsonl:PATH (the agent team)."
MAX_EPISODES = 10**9
"""Largest episode count a flag takes: the store numbers episodes with 32-bit integers."""

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

    def __init__(self, total: int, label: str = "training", meter: Any = None):
        self.bar = Progress(
            TextColumn(f"[bold]{label}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
            console=console,
        )
        self.task = self.bar.add_task(label, total=total, info="")
        self.meter = meter
        """A :class:`~core.experiment.finetune.BudgetMeter`: the bar shows what was spent."""

    def __enter__(self) -> ProgressBar:
        self.bar.__enter__()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if exc_type is not None:
            # The error is the one line the user should see; not a half-drawn bar before it.
            self.bar.live.transient = True
        self.bar.__exit__(exc_type, *exc)

    def __call__(self, done: int, total: int, summary: dict[str, float]) -> None:
        info = f"return {summary['return_ma']:+.3f}"
        if "epsilon" in summary:
            info += f"  ε {summary['epsilon']:.2f}"
        if self.meter is not None:
            info += f"  {self.meter.describe()}"
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


def _check_device(value: str) -> str:
    """Every command's ``--device``, checked before any work (``cuda`` without a GPU too)."""
    from core.qmix.seeding import resolve_device

    resolve_device(value)
    return value


Device = Annotated[
    str, typer.Option(help="auto (CUDA when present), cpu or cuda.", callback=_check_device)
]
Seed = Annotated[int, typer.Option(min=0, max=2**63 - 1, help="Seed of the episode stream.")]
Resume = Annotated[
    str | None,
    typer.Option(
        help="Continue evaluation run RUN_ID where it stopped: the episodes it has not "
        "logged, under the same id (its own settings; other flags are ignored)."
    ),
]


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
    "society": TeamFlag(
        "society",
        Annotated[
            str | None,
            typer.Option(
                help="Society file (agentqmix calibrate --out): replaces --preset, budget included."
            ),
        ],
    ),
    "model": TeamFlag("model", Annotated[str | None, typer.Option(help="Model name (openai).")]),
    "base_url": TeamFlag(
        "base_url",
        Annotated[
            str | None, typer.Option(help="OpenAI-compatible endpoint; default $OPENAI_BASE_URL.")
        ],
    ),
    "model_file": TeamFlag(
        "model_file",
        Annotated[
            str | None,
            typer.Option(help="local: GGUF model file (default: SmolLM2-135M-Instruct Q4_1)."),
        ],
    ),
    "local_engine": TeamFlag(
        "local_engine",
        Annotated[
            str,
            typer.Option(
                help="local: native (llama.cpp's llama-server, a slot per agent, a round's "
                "calls batched) or python (llama-cpp-python's server, one call at a time)."
            ),
        ],
    ),
    "max_tokens": TeamFlag(
        "max_tokens",
        Annotated[
            int | None,
            typer.Option(help="openai/local: completion cap per call (default: by task kind)."),
        ],
    ),
    "prompt_layout": TeamFlag(
        "prompt_layout",
        Annotated[
            str | None,
            typer.Option(
                help="openai/local: fresh (a new chat each turn) or conversation (one growing "
                "chat per agent, for prefix caches); default: conversation on local, fresh "
                "on openai."
            ),
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
    "idle": TeamFlag(
        "idle",
        Annotated[
            str,
            typer.Option(
                help=f"Idle agents ({' or '.join(IDLE_RULES)}): solo_process after round 0 with "
                "an answer and no edge: keep it without a call (default) or call it anyway."
            ),
        ],
    ),
    "pass_through": TeamFlag(
        "pass_through",
        Annotated[
            str,
            typer.Option(
                help=f"Decision agent ({' or '.join(PASS_THROUGH_RULES)}): unanimous = when every "
                "final answer agrees, return it without a call (not in the paper; default off)."
            ),
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
        Annotated[
            int,
            typer.Option(
                help="Episodes in lockstep and openai calls in flight (local: always 1 call)."
            ),
        ],
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
        "timeout_s",
        Annotated[
            float | None,
            typer.Option(
                help="openai/local: per-attempt timeout, seconds (default 60; local 600)."
            ),
        ],
    ),
    "sandbox": TeamFlag(
        "sandbox",
        Annotated[
            str,
            typer.Option(
                help="Where generated code runs: auto or bwrap (bubblewrap, else refuse to "
                "run) or process (the weaker sandbox, warned about on every run)."
            ),
        ],
    ),
    "max_attempts": TeamFlag(
        "max_attempts", Annotated[int, typer.Option(help="openai: attempts per call.")]
    ),
    "deadline": TeamFlag(
        "deadline_s",
        Annotated[
            float | None,
            typer.Option(
                help="openai/local: seconds one call may take, retries included "
                "(default 120; local 1800)."
            ),
        ],
    ),
}
TEAM = (
    "agents",
    "rounds",
    "token_weight",
    "token_budget",
    "token_penalty",
    "idle",
    "pass_through",
    "preset",
    "society",
    "embedding",
)
BACKEND = (
    "backend",
    "model",
    "base_url",
    "model_file",
    "local_engine",
    "max_tokens",
    "prompt_layout",
    "concurrency",
    "no_cache",
    "sandbox",
)
OPENAI_EXTRA = ("cache_counts_tokens", "cache_dir", "timeout", "max_attempts", "deadline")


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
            opts.validate()  # every flag, also those a command then ignores (--env)
            return fn(**kwargs, opts=opts)

        params = [p for p in own if p.name != "opts"] + added
        command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params}
        return command

    return decorate


@dataclass(frozen=True)
class LearnerFlag:
    """One command-line flag that sets a training setting (declared once, here). Its default
    is the recipe's (``--recipe``); the help shows each recipe's value."""

    path: str
    """The dotted :class:`~core.qmix.config.TrainConfig` path it sets (``learner.td_lambda``)."""
    kind: type
    """int, float, bool (a ``--x/--no-x`` switch) or str."""
    help: str
    low: float | None = None
    """The smallest value allowed (exclusive when ``low_open``)."""
    low_open: bool = False
    high: float | None = None
    """The largest value allowed."""
    choices: tuple[str, ...] = ()

    def check(self, flag: str, value: Any) -> Any:
        """``value`` if it is allowed, else a UserError naming ``flag``."""
        if self.choices and value not in self.choices:
            raise UserError(f"{flag} must be one of {', '.join(self.choices)}, not {value!r}.")
        if self.kind not in (int, float):
            return value
        low_ok = self.low is None or (value > self.low if self.low_open else value >= self.low)
        if not (math.isfinite(value) and low_ok and (self.high is None or value <= self.high)):
            bounds = []
            if self.low is not None:
                bounds.append(f"{'>' if self.low_open else '>='} {self.low:g}")
            if self.high is not None:
                bounds.append(f"<= {self.high:g}")
            raise UserError(f"{flag} must be a finite number {' and '.join(bounds)}, not {value}.")
        return value


LEARNER_FLAGS: dict[str, LearnerFlag] = {
    "max_updates": LearnerFlag(
        "max_updates", int, "Learner updates in the whole run at most (0 = no cap)", 0
    ),
    "collect_ahead": LearnerFlag(
        "collect_ahead", bool, "Play the next episodes in a child process while the learner trains"
    ),
    "lr": LearnerFlag("learner.lr", float, "Adam learning rate", 0, low_open=True),
    "gamma": LearnerFlag("learner.gamma", float, "Discount across rounds", 0, high=1),
    "batch_size": LearnerFlag("learner.batch_size", int, "Episodes per update", 1),
    "buffer_size": LearnerFlag("learner.buffer_size", int, "Episodes in the replay buffer", 1),
    "double_q": LearnerFlag(
        "learner.double_q", bool, "Double-Q: online network picks, target network values"
    ),
    "grad_clip": LearnerFlag(
        "learner.grad_clip", float, "Max global gradient norm", 0, low_open=True
    ),
    "target_update_interval": LearnerFlag(
        "learner.target_update_interval", int, "Updates between hard target copies", 1
    ),
    "tau": LearnerFlag(
        "learner.tau", float, "Soft target update rate per update (0 = hard copies)", 0, high=1
    ),
    "updates_per_episode": LearnerFlag(
        "learner.updates_per_episode",
        float,
        "Learner updates per collected episode",
        0,
        low_open=True,
    ),  # fmt: skip
    "td_lambda": LearnerFlag(
        "learner.td_lambda", float, "λ of the TD(λ) targets (0 = one-step targets)", 0, high=1
    ),
    "precision": LearnerFlag(
        "learner.precision", str, "Arithmetic of the forward passes", choices=PRECISIONS
    ),
    "epsilon_start": LearnerFlag("exploration.start", float, "ε at the first episode", 0, high=1),
    "epsilon_finish": LearnerFlag("exploration.finish", float, "ε after annealing", 0, high=1),
    "epsilon_anneal": LearnerFlag(
        "exploration.anneal_fraction",
        float,
        "Share of the episodes over which ε falls",
        0,
        low_open=True,
        high=1,
    ),  # fmt: skip
}
"""Every learner, schedule and exploration setting not already a flag of its own
(``--episodes``, ``--n-envs``, ``--hidden``, ``--threads``, ``--mixer``)."""


RECIPE_HELP = {
    name: recipe.about
    + (
        " (" + ", ".join(f"{k.rpartition('.')[2]} {v:g}" for k, v in recipe.overrides.items()) + ")"
        if recipe.overrides
        else ""
    )
    for name, recipe in RECIPES.items()
}
"""What ``--recipe`` lists: each recipe and the settings it sets."""


def recipe_defaults(*paths: str) -> str:
    """What each recipe trains with at ``paths`` (the first path's value), for a help text:
    ``default 32``, or ``textbook 0; society 0.8`` where they differ."""
    values = {name: recipe_value(name, paths[0]) for name in RECIPES}
    shown = {name: f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else str(v)
             for name, v in values.items()}  # fmt: skip
    if len(set(shown.values())) == 1:
        return f"default {next(iter(shown.values()))}"
    return "; ".join(f"{name} {v}" for name, v in shown.items())


def checked(config: Any) -> Any:
    """``config`` (a TrainConfig) if its settings fit together, else one sentence."""
    try:
        config.validate()
    except ValueError as exc:  # a combination no single flag's check can see
        raise UserError(f"the training settings do not fit together: {exc}.") from None
    return config


def _learner_option(name: str, spec: LearnerFlag) -> Any:
    help_text = f"{spec.help} ({recipe_defaults(spec.path)})."
    if spec.kind is bool:
        flag = "--" + name.replace("_", "-")
        return Annotated[
            bool | None, typer.Option(f"{flag}/--no-{flag[2:]}", help=help_text, show_default=False)
        ]
    return Annotated[spec.kind | None, typer.Option(help=help_text, show_default=False)]


def learner_flags(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Give a command every flag of :data:`LEARNER_FLAGS`; it receives the ones the user gave
    as ``tuning`` (dotted path -> checked value), for :func:`~core.team.recipes.recipe_config`."""
    own = [p for p in inspect.signature(fn, eval_str=True).parameters.values()]
    added = [
        inspect.Parameter(
            name,
            inspect.Parameter.KEYWORD_ONLY,
            default=None,
            annotation=_learner_option(name, spec),
        )
        for name, spec in LEARNER_FLAGS.items()
    ]

    @functools.wraps(fn)
    def command(**kwargs: Any) -> Any:
        tuning = {}
        for name, spec in LEARNER_FLAGS.items():
            value = kwargs.pop(name)
            if value is not None:
                tuning[spec.path] = spec.check("--" + name.replace("_", "-"), value)
        return fn(**kwargs, tuning=tuning)

    params = [p for p in own if p.name != "tuning"] + added
    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params}
    return command


def print_table(rows: list[dict[str, Any]], columns: list[str], title: str) -> None:
    from rich.table import Table

    table = Table(title=title)
    for c in columns:
        table.add_column(c, justify="left" if c in ("policy", "method", "mode") else "right")
    for row in rows:
        table.add_row(
            *(f"{row[c]:.3f}" if isinstance(row[c], float) else str(row[c]) for c in columns)
        )
    Console().print(table)


# --------------------------------------------------------------------------- train / eval


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
            + f". Default: {TEAM_RECIPE} for --benchmark, {ENV_RECIPE} for --env."
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
    from core.experiment.finetune import Budget
    from core.qmix.mixers import MIXERS
    from core.team.recipes import get_recipe, recipe_config

    if method not in LEARNED_METHODS:
        raise UserError(f"--method must be one of {', '.join(LEARNED_METHODS)}, not {method!r}.")
    if method != "qmix":
        if tuning or recipe is not None:
            raise UserError(
                "--recipe and the learner flags (--td-lambda, ...) are for --method qmix; "
                f"{method} takes its settings with --set."
            )
        if env is not None or resume or mixer != "qmix" or hidden is not None:
            flag = (
                "--env"
                if env
                else "--resume"
                if resume
                else "--mixer"
                if mixer != "qmix"
                else "--hidden"
            )
            raise UserError(f"{flag} is for --method qmix; {method} takes its settings with --set.")
        if init is not None:
            raise UserError(
                f"--init continues an Agent Q-Mix checkpoint (--method qmix); {method} trains "
                "from its own initial weights."
            )
        return _train_baseline(
            opts, method, settings or [], out, benchmark, episodes, seed, n_envs, threads, db,
            no_log, eval_episodes, as_json, train_tokens, Budget(budget_tokens, budget_calls),
        )  # fmt: skip
    if train_tokens is not None:
        raise UserError(
            "--train-tokens is for the learned-topology methods (--method gptswarm, ...)."
        )
    if settings:
        raise UserError("--set is for the learned-topology methods (--method gptswarm, ...).")
    if mixer not in MIXERS:
        raise UserError(f"--mixer must be one of {', '.join(MIXERS)}, not {mixer!r}.")
    if recipe is not None:
        get_recipe(recipe)
    given = {"episodes": episodes, "n_envs": n_envs, "cpu_threads": threads}
    tuning = {**tuning, **{k: v for k, v in given.items() if v is not None}}
    if hidden is not None:
        tuning.update({f"agent.{k}": hidden for k in ("gnn_hidden", "gru_hidden", "q_hidden")})
    budget = Budget(budget_tokens, budget_calls)
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
    recipe = recipe or (ENV_RECIPE if env is not None else TEAM_RECIPE)
    given = {**tuning, "seed": seed, "device": device, "mixer.kind": mixer}
    config = checked(recipe_config(recipe, given))
    if env is not None:
        from core.experiment.train import train_env

        if init is not None or budget.given:
            raise UserError("--init and the budgets train the agent team (--benchmark), not --env.")
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
    from core.experiment import train_team

    if init is not None and not init.is_file():
        raise UserError(f"--init {init} is not a checkpoint file.")
    meter = _budget_meter(opts, budget, config.episodes)
    with ProgressBar(config.episodes, meter=meter) as bar:
        outcome = train_team(
            opts,
            config,
            out,
            db=db,
            log=not no_log,
            progress=bar,
            eval_episodes=eval_episodes,
            checkpoint_every_s=checkpoint_every_s,
            recipe=recipe,
            init=init,
            meter=meter,
        )
    _report_training(outcome, as_json, meter)


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
    meter = _budget_meter(opts, budget or Budget(), train_config.episodes)
    with ProgressBar(train_config.episodes, label=method, meter=meter) as bar:
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
    if meter is not None:
        summary["spent"] = {"tokens": meter.tokens, "calls": meter.calls}
        summary["stopped"] = outcome.stopped
    if as_json:
        return emit_json(summary)
    line = (
        f"[green]trained[/green] {method}: {state.episodes_done} episodes, {state.updates} updates"
    )
    ev = outcome.evaluation
    if ev:
        line += (
            f"; held-out accuracy {ev['accuracy']:.3f}, mean tokens {ev['mean_tokens']:.0f}, "
            f"mean reward {ev['mean_reward']:.3f}"
        )
    if meter is not None:
        line += f"; spent {meter.describe()}"
    console.print(line + f"; run {outcome.run_id}; checkpoint {outcome.checkpoint}", soft_wrap=True)
    if outcome.stopped:
        console.print(
            f"{outcome.stopped}; a learned-topology method does not resume: train it again "
            "with a larger --budget-tokens/--budget-calls",
            soft_wrap=True,
            highlight=False,
        )
    return None


def _bar_info(stats: dict[str, float]) -> dict[str, float]:
    """What the training bar shows for a learned-topology method: its last batch's reward."""
    return {"return_ma": stats["reward"]}


def _budget_meter(
    opts: TeamOptions, budget: Any, episodes: int, spent: tuple[int, int] = (0, 0)
) -> Any:
    """A real back-end's run: refuse a paid endpoint without a budget, time a few calls and
    print the estimate; the meter the run spends against (None on the simulator without one)."""
    from core.experiment.finetune import BudgetMeter, needs_budget, probe

    budget.validate()
    if needs_budget(opts) and not budget.given:
        raise UserError(
            "--backend openai off this machine may bill: give --budget-tokens N and/or "
            "--budget-calls N (a local --base-url such as http://127.0.0.1:8000/v1 needs none)."
        )
    if opts.backend == "sim":
        return BudgetMeter(budget, *spent) if budget.given else None
    estimate = probe(opts, episodes)
    console.print(estimate.describe(budget), soft_wrap=True, highlight=False)
    tokens, calls = spent
    return BudgetMeter(budget, tokens + estimate.probe_tokens, calls + estimate.probe_sent)


def _report_training(outcome: Any, as_json: bool, meter: Any = None) -> None:
    summary = {
        "run_id": outcome.run_id,
        "checkpoint": str(outcome.checkpoint),
        "episodes": outcome.state.episodes_done,
        "updates": outcome.state.learner.updates,
        "train_tokens": outcome.train_tokens,
        "held_out": outcome.evaluation,
    }
    if meter is not None:
        summary["spent"] = {"tokens": meter.tokens, "calls": meter.calls}
        summary["stopped"] = outcome.stopped
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
    if meter is not None:
        line += f"; spent {meter.describe()}"
    console.print(line + f"; run {outcome.run_id}; checkpoint {outcome.checkpoint}", soft_wrap=True)
    if outcome.stopped:
        console.print(
            f"{outcome.stopped}; resume with agentqmix train --resume {outcome.run_id} "
            "(raise the budget with --budget-tokens/--budget-calls)",
            soft_wrap=True,
            highlight=False,
        )


def _check_store_exists(db: str | None) -> None:
    """``--resume`` continues a run of an existing store; it never creates one."""
    from core.store.engine import resolve_db

    if not resolve_db(db).exists():
        raise UserError(
            f"No episode store at {resolve_db(db)}; --resume needs the --db the run was logged to."
        )


def _resume_training(
    run_id: str,
    db: str | None,
    device: str,
    as_json: bool,
    out: Path | None = None,
    checkpoint_every_s: float | None = None,
    budget: Any = None,
) -> None:
    from core.experiment import options_from_dict, train_config_from_dict, train_team
    from core.store.queries import get_run

    _check_store_exists(db)

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
    config = train_config_from_dict(info.config["train"], recipe)
    config.device = device
    from core.experiment.finetune import Budget
    from core.store.queries import run_spend

    stored = (info.config.get("finetune") or {}).get("budget") or {}
    given = budget if budget is not None and budget.given else Budget(**stored)
    meter = _budget_meter(opts, given, config.episodes, run_spend(db, run_id))
    with ProgressBar(config.episodes, label="resuming", meter=meter) as bar:
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
    _report_training(outcome, as_json, meter)


def _resume_evaluation(
    run_id: str, db: str | None, device: str, as_json: bool, command: str
) -> None:
    """``eval/compare/robustness --resume RUN_ID``: play what the run has not logged yet."""
    from core.experiment.evaluate import compare_rows, resume_evaluation, robustness_rows

    _check_store_exists(db)
    plan, rows, benchmark = resume_evaluation(db, run_id, device, command)
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
    as_json: Json = False,
) -> None:
    """Run a policy greedily and decentralised (each agent on its own Q-values), held out."""
    if resume:
        return _resume_evaluation(resume, db, device, as_json, "eval")
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
    summary, _ = evaluate_team(
        opts, chosen, episodes, seed, db=db, log=not no_log, first=first, checkpoint=checkpoint
    )
    _report_evaluation(summary, as_json)


def _report_evaluation(summary: dict[str, Any], as_json: bool) -> None:
    if summary["calls"] and summary["failed_calls"] == summary["calls"]:
        console.print(
            "[yellow]warning:[/yellow] every call to the back-end failed (errors are in the "
            "llm_calls table); with --backend openai, check --model, --base-url and the API key.",
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
    benchmark: Annotated[str | None, typer.Option(help=BENCHMARK_HELP)] = None,
    checkpoint: Annotated[
        list[Path] | None,
        typer.Option(
            help="Learned policy to compare (repeatable; any family: qmix or a "
            "learned-topology method)."
        ),
    ] = None,
    episodes: Annotated[int, typer.Option(min=1, help="Held-out episodes per policy.")] = 100,
    seed: Seed = 0,
    device: Device = "auto",
    db: Db = None,
    no_log: NoLog = False,
    resume: Resume = None,
    as_json: Json = False,
) -> None:
    """Every learned policy given and every fixed topology on the same seeded held-out
    tasks, with 95% intervals and the accuracy/token front."""
    from core.experiment import compare_team

    if resume:
        return _resume_evaluation(resume, db, device, as_json, "compare")
    if benchmark is None:
        raise UserError("compare needs --benchmark NAME (or --resume RUN_ID).")
    rows = compare_team(
        opts, checkpoint or [], episodes, seed, db=db, log=not no_log, device=device
    )
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
    as_json: Json = False,
) -> None:
    """Accuracy and reward vs number of failed agents: learned policy against fixed topologies."""
    from core.experiment import robustness_team

    if resume:
        return _resume_evaluation(resume, db, device, as_json, "robustness")
    if benchmark is None:
        raise UserError("robustness needs --benchmark NAME (or --resume RUN_ID).")
    if mode not in FAILURE_MODES:
        raise UserError(f"--mode must be one of {', '.join(FAILURE_MODES)}, not {mode!r}.")
    rows = robustness_team(
        opts,
        checkpoint or [],
        episodes,
        seed,
        max_failed,
        mode,
        db=db,
        log=not no_log,
        device=device,
    )
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
    as_json: Json = False,
) -> None:
    """The token/accuracy front: train one policy per (method, knob, decision rule, token
    weight, seed) on Ray, then evaluate every trial and fixed topology (under each rule) on
    the same held-out tasks."""
    from core.baselines.training import BaselineTrainConfig
    from core.experiment.sweep import (
        SweepConfig,
        parse_knobs,
        parse_methods,
        parse_pass_through,
        parse_seeds,
        parse_token_weights,
        parse_topologies,
        run_sweep,
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
    with SweepBar(sum(config.counts())) as bar:
        result = run_sweep(
            opts, config, train_config, db=db, log=not no_log, progress=bar,
            report=bar.report, baseline_config=baseline_config, notice=bar.note,
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


# --------------------------------------------------------------------------- calibration


@app.command()
def calibrate(
    run: Annotated[
        list[str], typer.Option(help="RUN_ID of a real run to fit on (repeat for several).")
    ],
    out: Annotated[Path, typer.Option(help="Where to write the fitted society (JSON).")],
    check_fraction: Annotated[
        float, typer.Option(help="Share of the tasks held out to check the fit (by task hash).")
    ] = 0.3,
    draws: Annotated[
        int, typer.Option(help="Simulated replays of each held-out real episode.")
    ] = 20,
    base: Annotated[
        str, typer.Option(help=f"Preset the fit shrinks toward: {', '.join(PRESETS)}.")
    ] = "flash-lite",
    prior_scale: Annotated[
        float, typer.Option(help="Widen (>1) or narrow (<1) the priors around --base.")
    ] = 1.0,
    name: Annotated[
        str | None, typer.Option(help="Name of the fitted society (default calibrated-MODEL).")
    ] = None,
    seed: Annotated[int, typer.Option(min=0, max=2**63 - 1, help="Seeds replays, bootstrap.")] = 0,
    db: Db = None,
    no_log: NoLog = False,
    as_json: Json = False,
) -> None:
    """Fit the synthetic society to real runs; check it on tasks the fit never saw."""
    from core.experiment.calibrate import CalibrateOptions
    from core.experiment.calibrate import calibrate as run_calibration

    options = CalibrateOptions(
        runs=tuple(run), out=out, check_fraction=check_fraction, draws=draws, base=base,
        prior_scale=prior_scale, seed=seed, name=name,
    )  # fmt: skip
    with console.status("calibrating") as status:
        result = run_calibration(
            options, db=db, log=not no_log, progress=lambda m: status.update(m)
        )
    if as_json:
        emit_json({"out": str(out), "run_id": result.run_id, **result.report()})
        return
    _print_calibration(result)


def _ci(t: Any, fmt: str) -> str:
    return f"{t[0]:{fmt}} ({t[1]:{fmt}}, {t[2]:{fmt}})"


def _print_calibration(result: Any) -> None:
    from rich.markup import escape
    from rich.table import Table

    out = Console(width=None if sys.stdout.isatty() else 200)
    fit, split = result.fit, result.split
    table = Table(title=f"fitted parameters of {fit.config.name} (base {result.extra['base']})")
    for col in ("parameter", "stock", "fitted (95% interval)", "n"):
        table.add_column(col, justify="left" if col == "parameter" else "right")
    for p in fit.params:
        table.add_row(p.name, f"{p.stock:.4g}", f"{p.value:.4g} ({p.lo:.4g}, {p.hi:.4g})", str(p.n))
    out.print(table)
    out.print("[bold]kept at the base preset's value:[/bold]")
    for what, why in fit.stock.items():
        out.print(escape(f"  {what}: {why}"), highlight=False, soft_wrap=True)
    out.print(
        f"[bold]simulated vs real[/bold]: fitted on {split['fit_episodes']} episodes of "
        f"{split['fit_tasks']} tasks; checked on {split['check_episodes']} episodes of "
        f"{split['check_tasks']} other tasks (split by task hash, {split['check_fraction']:.0%} "
        f"held out), each replayed {split['draws']}x in the fitted society. (lo, hi) = 95% "
        "bootstrap interval over tasks; err = simulated - real; base err = the base preset's.",
        highlight=False,
        soft_wrap=True,
    )
    for title, rows in (
        ("per policy", result.by_topology),
        ("per action (calls)", result.by_action),
    ):
        t = Table(title=f"held-out check, {title}")
        for col in (
            "group", "n", "real acc", "sim acc", "err acc", "base err",
            "real tokens", "sim tokens", "err tokens", "base err",
        ):  # fmt: skip
            t.add_column(col, justify="left" if col == "group" else "right")
        for r in rows:
            t.add_row(
                r["group"], str(r["n"]), _ci(r["real_acc"], ".2f"), _ci(r["sim_acc"], ".2f"),
                _ci(r["err_acc"], "+.2f"), f"{r['stock_err_acc'][0]:+.2f}",
                _ci(r["real_tok"], ".0f"), _ci(r["sim_tok"], ".0f"),
                _ci(r["err_tok"], "+.0f"), f"{r['stock_err_tok'][0]:+.0f}",
            )  # fmt: skip
        out.print(t)
    console.print(
        f"wrote {result.out}" + (f"; logged as run {result.run_id}" if result.run_id else ""),
        soft_wrap=True,
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
    timeout: Annotated[
        float | None,
        typer.Option(
            help="Stop the statement after this many seconds of running and fetching it "
            "(default 60; Ctrl-C stops it too)."
        ),
    ] = None,
    max_rows: Annotated[
        int | None,
        typer.Option(
            help="Print at most this many rows, --json too (default 1000; 0 = no cap); "
            "stderr says when the result had more."
        ),
    ] = None,
) -> None:
    """Run read-only SQL against the episode store and print a table."""
    from core.store import commands

    # Unset flags take the defaults of commands.sql (SQL_TIMEOUT_S, SQL_MAX_ROWS), which
    # this module cannot import without loading DuckDB for every command.
    given = {"timeout": timeout, "max_rows": max_rows}
    try:
        table = commands.sql(query, db, **{k: v for k, v in given.items() if v is not None})
    except KeyboardInterrupt:
        console.print("interrupted: the query was stopped.", highlight=False)
        raise typer.Exit(130) from None
    commands.print_table(table, as_json=as_json, width=None if sys.stdout.isatty() else 200)
    if table.cut_at is not None:
        console.print(
            f"showing the first {table.cut_at} rows; the result has more: raise --max-rows "
            "(0 = no cap) or page with LIMIT/OFFSET.",
            highlight=False,
            soft_wrap=True,
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
def repair(db: Db = None) -> None:
    """Rebuild a damaged episode store from what it still reads back and the spools."""
    from core.store import commands

    console.print(commands.repair(db).summary(), soft_wrap=True, markup=False, highlight=False)


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
    """UserError unless ``path`` is a readable DuckDB file or a new file in a folder this user
    can write. A store this user can read but not write opens read-only (said in one line)."""
    import duckdb

    from core.store.engine import attached, check_file, write_problem

    problem = write_problem(path)
    if not check_file(path):
        if problem is not None:
            raise UserError(
                f"cannot create database {path}: {problem}; pass --db a path in a folder you "
                "can write."
            )
        return
    try:
        with attached(path, write=False, timeout=5.0) as cur:
            cur.execute("SELECT count(*) FROM duckdb_tables()").fetchone()
    except duckdb.Error as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UserError(f"{path} is not a readable DuckDB database ({first}).") from err
    if problem is not None:
        console.print(
            f"opening {path} read-only ({problem}): replay and compare work; training, forks "
            "and deleting runs are off.",
            soft_wrap=True, markup=False, highlight=False,
        )  # fmt: skip


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

BENCHMARKS: dict[str, str] = {
    "learner": "learner updates/s, multiply-adds and the machine's matmul rate",
    "store": "logging throughput, one-episode load latency, training slowdown from logging",
    "lab": "page render times and replay-slider latency on a large store",
    "openai-concurrency": "seconds per episode against a local server with fixed latency",
    "sim-calibration": "accuracy and tokens per fixed topology and difficulty (the simulator)",
    "calibration-real": "simulated vs real per action and policy on held-out real episodes",
    "actions-by-difficulty": "what a trained policy does on easy and hard tasks",
    "headroom": "the oracle, a hand-written adaptive plan and the best fixed plan per task",
    "fuzz-checker": "the maths checker on random explosive expressions (time per check)",
    "humaneval-checker": "every HumanEval reference passes and an exit-0 forgery fails",
    "extraction": "our maths answer reading vs math-verify: recorded replies, hostile answers",
    "learning": "learned policy vs every fixed topology on held-out episodes, paired SEs",
    "rollouts": "rollout episodes/s of the learned policy on the simulator, per lockstep width",
    "scaling": "learner updates/s and rollout episodes/s against agents N and rounds T, memory",
    "games": "the classic-games suite's claims on several seeds (docs/games.md)",
    "time-to-quality": "wall seconds until default training reaches held-out reward thresholds",
    "real": "local model: seconds per episode by topology, tokens/s, runtime overhead",
    "weights": "local model: the shipped Q4_1 file against its Q8_0 copy (speed, perplexity)",
    "baselines": "learned-topology methods vs Agent Q-Mix and fixed topologies: paired SEs, graphs",
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
    import os
    import subprocess

    if name is None or name in ("--help", "-h"):
        console.print("benchmarks (agentqmix bench NAME [OPTIONS]):")
        for key, what in BENCHMARKS.items():
            console.print(f"  {key:<24} {what}", highlight=False)
        return
    if name not in BENCHMARKS:
        raise UserError(f"no benchmark {name!r}; choose one of {', '.join(BENCHMARKS)}.")
    module = "benchmarks." + name.replace("-", "_")
    # The benchmarks of this checkout, not of whichever one is installed.
    root = str(Path(__file__).resolve().parent.parent)
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": path}
    raise typer.Exit(subprocess.call([sys.executable, "-m", module, *ctx.args], env=env))


def main(argv: list[str] | None = None) -> int:
    """Entry point: user errors become one line on stderr and exit code 2.

    Click's own errors (a bad flag or value) are shown the same way, without its usage
    block; :class:`UserError` covers what only the command can tell (a missing file, a
    corrupt checkpoint).
    """
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        _check_utf8(args)
        result = app(args=args, standalone_mode=False)
        return_code = result if isinstance(result, int) else 0
    except (UserError, StoreBusy) as exc:
        return_code = _error(str(exc), args)
    except typer.TyperException as exc:  # click's usage errors (typer vendors click)
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        # An empty message: the help text was already printed (no command given).
        return_code = _error(f"{message.rstrip('.')}. See --help.", args) if message.strip() else 2
    except typer.Abort:
        console.print("Aborted!")
        return_code = 1
    except SystemExit as exc:
        return_code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    if argv is None:
        sys.exit(return_code)
    return return_code


def _error(message: str, args: Sequence[str] = ()) -> int:
    """Print ``error: message`` as one line (never as rich markup) and return exit code 2.

    Credentials are masked (:func:`core.sanitize.mask_message`): those of any URL in the
    message, parsed or not, the secrets of the environment (``OPENAI_API_KEY``...) and
    those of every URL among the command's arguments."""
    from rich.markup import escape

    from core.sanitize import mask_message, secrets_in_environment, url_secrets

    urls = [part for arg in args for part in (arg, arg.partition("=")[2])]
    secrets = secrets_in_environment() + [s for url in urls for s in url_secrets(url)]
    message = mask_message(message, secrets)
    line = " ".join(part.strip() for part in message.splitlines() if part.strip())
    console.print(f"[red]error:[/red] {escape(line)}", highlight=False, soft_wrap=True)
    return 2


def _check_utf8(args: list[str]) -> None:
    # Python decodes argv bytes that are not UTF-8 as lone surrogates; they would only
    # fail later, deep in DuckDB or a JSON encoder.
    for position, arg in enumerate(args, start=1):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            raise UserError(f"argument {position} is not valid UTF-8 text.") from None


if __name__ == "__main__":
    main()
