"""The flags commands share, each declared once: the team flags (a :class:`TeamOptions`
field each), the learner flags (a recipe setting each) and the common ones (``--db``...)."""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

import typer

from core.backends.registry import BACKENDS
from core.backends.society import PRESETS
from core.baselines.names import METHOD_NAMES
from core.errors import UserError
from core.qmix.config import PRECISIONS
from core.tasks.registry import TASK_SOURCES
from core.team.failures import FAILURE_MODES
from core.team.options import TeamOptions, parse_roles
from core.team.recipes import RECIPES, recipe_value
from core.team.settings import IDLE_RULES, PASS_THROUGH_RULES, TOKEN_PENALTIES

LEARNED_METHODS = ("qmix", *METHOD_NAMES)
"""``train --method``: Agent Q-Mix (the default) or a learned-topology method."""
BENCHMARK_HELP = f"Task source: {', '.join(TASK_SOURCES)} or jsonl:PATH (the agent team)."
MAX_EPISODES = 10**9
"""Largest episode count a flag takes: the store numbers episodes with 32-bit integers."""


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


def check_store_exists(db: str | None) -> None:
    """``--resume`` continues a run of an existing store; it never creates one."""
    from core.store.engine import resolve_db

    if not resolve_db(db).exists():
        raise UserError(
            f"No episode store at {resolve_db(db)}; --resume needs the --db the run was logged to."
        )


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
    "prompt_style": TeamFlag(
        "prompt_style",
        Annotated[
            str | None,
            typer.Option(
                help="openai/local: full (persona, round instruction, answer format) or "
                "compact (a one-line system prompt, worked examples, the question; for "
                "small models); default: full."
            ),
        ],
    ),
    "verify_tests": TeamFlag(
        "verify_tests",
        Annotated[
            str,
            typer.Option(
                help="openai/local: what execute_verify runs code on: examples (the "
                "docstring's) or examples+written (plus the agent's own test cases, one more "
                "call); never the hidden tests."
            ),
        ],
    ),
    "agents": TeamFlag(
        "roles",
        Annotated[str, typer.Option(help="Comma-separated roles, one per agent.")],
        parse_roles,
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
    "actions": TeamFlag(
        "actions",
        Annotated[
            str,
            typer.Option(
                help="Action set: all (six actions) or graph (no execute_verify: only what a "
                "communication graph expresses; docs/baselines.md, Protocols)."
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
    "actions",
)
BACKEND = (
    "backend",
    "model",
    "base_url",
    "model_file",
    "local_engine",
    "max_tokens",
    "prompt_layout",
    "prompt_style",
    "verify_tests",
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
    "policy_ema": LearnerFlag(
        "learner.policy_ema",
        float,
        "Rate per update of the moving average of the weights that is the greedy policy "
        "(0 = the online weights)",
        0,
        high=1,
    ),  # fmt: skip
    "lr_decay_to": LearnerFlag(
        "learner.lr_decay_to",
        float,
        "Learning rate at the end of its linear decay, as a share of --lr (1 = constant)",
        0,
        low_open=True,
        high=1,
    ),  # fmt: skip
    "lr_decay_fraction": LearnerFlag(
        "learner.lr_decay_fraction",
        float,
        "Share of the run's updates over which the learning rate falls",
        0,
        low_open=True,
        high=1,
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
