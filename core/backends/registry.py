"""Back-ends by name: ``--backend NAME`` and ``--help`` read this registry.

Each entry builds a back-end from the team's options (any object with the attributes of
:class:`BackendSettings`); adding a back-end is one line here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from core.backends.base import Backend

if TYPE_CHECKING:
    from core.backends.local_server import LocalServerConfig
    from core.backends.openai_backend import OpenAIBackendConfig


class BackendSettings(Protocol):
    """The options a back-end is built from (the team options carry them)."""

    backend: str
    preset: str
    society: str | None
    model: str | None
    base_url: str | None
    concurrency: int
    use_cache: bool
    cache_counts_tokens: bool
    cache_dir: str | None
    timeout_s: float | None
    max_attempts: int
    model_file: str | None
    local_engine: str
    roles: tuple[str, ...]
    max_tokens: int | None
    prompt_layout: str | None
    prompt_style: str | None
    verify_tests: str
    deadline_s: float | None
    sandbox: str


OPENAI_TIMEOUT_S = 60.0
"""Per-attempt timeout of a remote endpoint, unless ``--timeout`` says otherwise."""
LOCAL_TIMEOUT_S = 600.0
"""Per-attempt timeout on the local server: a slow call there is slow compute on a shared
CPU (a busy one took 60+ s for one), and cutting it only starts it over."""
OPENAI_DEADLINE_S = 120.0
"""Wall-clock limit of one call to a remote endpoint, every attempt and back-off included."""
LOCAL_DEADLINE_S = 1800.0
"""The same on the local server: several of its slow attempts must fit."""


def _cache_dir(opts: BackendSettings) -> str | None:
    """The response cache's folder, checked writable (created if missing) before the first
    call or the server's start: a cache that cannot be written would fail a run mid-way."""
    from core.backends.cache import default_cache_dir
    from core.paths import check_output_dir

    if not opts.use_cache:
        return opts.cache_dir
    return str(check_output_dir(opts.cache_dir or default_cache_dir(), "--cache-dir"))


def check_settings(opts: BackendSettings) -> None:
    """What building a real back-end checks first (its cache folder), without building it:
    a command that prints something before its run starts says a mistake in one sentence."""
    if opts.backend in ("openai", "local"):
        _cache_dir(opts)
    if opts.backend == "local" and opts.model_file is not None:
        from core.backends.local_server import check_model_file

        check_model_file(opts.model_file)


def _sim(opts: BackendSettings) -> Backend:
    from core.backends.society import SimBackend, get_preset, load_society

    return SimBackend(load_society(opts.society) if opts.society else get_preset(opts.preset))


@dataclass(frozen=True)
class RequestRecipe:
    """How a real back-end writes its requests (stored in a run's config as ``prompting``)."""

    caps: dict[tuple[str, str], int]
    """Completion caps by (task kind, call kind)."""
    peer_chars: int
    """An earlier reply shown in a prompt is cut to this many characters."""
    layout: str
    """``fresh`` or ``conversation`` (:data:`core.backends.prompts.LAYOUTS`)."""
    conversation_tokens: int | None
    """A conversation longer than this starts over (``None``: never)."""
    verify_tests: str = "examples"
    """What execute_verify runs code on (:data:`core.backends.prompts.VERIFY_TESTS`)."""
    style: str = "full"
    """How the team's messages are worded (:data:`core.backends.prompts.STYLES`)."""


def _request_recipe(opts: BackendSettings, local: bool) -> RequestRecipe:
    """The local model's recipe, or every other server's; ``--prompt-layout`` and
    ``--prompt-style`` override the recipe's layout and style."""
    from core.backends import local_backend as lb
    from core.backends.openai_backend import MAX_TOKENS, style_caps
    from core.backends.prompts import PEER_TEXT_CHARS

    if local:
        recipe = RequestRecipe(
            lb.LOCAL_MAX_TOKENS, lb.LOCAL_PEER_CHARS, lb.LOCAL_PROMPT_LAYOUT,
            lb.LOCAL_CONVERSATION_TOKENS, style=lb.LOCAL_PROMPT_STYLE,
        )  # fmt: skip
    else:
        recipe = RequestRecipe(MAX_TOKENS, PEER_TEXT_CHARS, "fresh", None)
    style = opts.prompt_style or recipe.style
    return replace(
        recipe, caps=style_caps(recipe.caps, style), layout=opts.prompt_layout or recipe.layout,
        verify_tests=opts.verify_tests, style=style,
    )  # fmt: skip


def _client_config(opts: BackendSettings, local: bool, **endpoint: Any) -> OpenAIBackendConfig:
    """The OpenAI back-end's settings from the options; ``endpoint`` names the server
    (model, base URL, concurrency...). ``local``: the local server's timeout, deadline and
    request recipe (:func:`_request_recipe`)."""
    from core.backends.openai_backend import OpenAIBackendConfig

    recipe = _request_recipe(opts, local)
    return OpenAIBackendConfig(
        **endpoint,
        use_cache=opts.use_cache,
        cache_counts_tokens=opts.cache_counts_tokens,
        cache_dir=_cache_dir(opts),
        timeout_s=opts.timeout_s or (LOCAL_TIMEOUT_S if local else OPENAI_TIMEOUT_S),
        max_attempts=opts.max_attempts,
        max_tokens=opts.max_tokens,
        completion_caps=recipe.caps,
        peer_chars=recipe.peer_chars,
        prompt_layout=recipe.layout,
        prompt_style=recipe.style,
        conversation_tokens=recipe.conversation_tokens,
        verify_tests=recipe.verify_tests,
        deadline_s=opts.deadline_s or (LOCAL_DEADLINE_S if local else OPENAI_DEADLINE_S),
        sandbox=opts.sandbox,
    )


def _openai(opts: BackendSettings) -> Backend:
    from core.backends.openai_backend import OpenAIBackend

    return OpenAIBackend(
        _client_config(
            opts, False, model=opts.model or "", base_url=opts.base_url,
            concurrency=opts.concurrency,
        )
    )  # fmt: skip


def prompt_settings(opts: BackendSettings) -> dict[str, Any] | None:
    """How a real back-end of these options writes its requests (stored in the run's
    config): the completion cap of each (task kind, call kind), the cut of earlier replies
    in a prompt, the prompt layout, the conversation budget and, when it is not ``full``,
    the prompt style (so the configs of runs in the full style stay as they were, and a
    sweep stored before styles existed resumes). None for the synthetic society (it is
    asked nothing)."""
    if opts.backend not in ("openai", "local"):
        return None
    recipe = _request_recipe(opts, opts.backend == "local")
    style = {"style": recipe.style} if recipe.style != "full" else {}
    return {
        "max_tokens": {
            f"{domain}/{kind}": opts.max_tokens or cap
            for (domain, kind), cap in recipe.caps.items()
        },
        "peer_chars": recipe.peer_chars,
        "layout": recipe.layout,
        "conversation_tokens": recipe.conversation_tokens,
        "verify_tests": recipe.verify_tests,
        **style,
    }


def local_model_server(opts: BackendSettings) -> LocalServerConfig:
    """The local recipe's server for the options' ``--model-file`` (``None`` = the shipped
    model) and ``--local-engine``: every place that starts or looks for the local server
    asks this, so that they agree on it (a process that starts it for others, a sweep's
    driver or the lab, and its children). The native engine gets a slot per agent and one
    for the decision agent."""
    from core.backends.local_backend import local_weights
    from core.backends.local_server import LocalServerConfig

    slots = len(opts.roles) + 1 if opts.local_engine == "native" else 1
    return LocalServerConfig(
        model_file=opts.model_file, engine=opts.local_engine, slots=slots,
        weights=local_weights(opts.model_file),
    )  # fmt: skip


def local_identity(opts: BackendSettings) -> dict[str, Any]:
    """What a run on the local model stores of its server in its config: the engine, its
    slots and threads (the threads are chosen when the server starts: this starts it, or
    finds the running one)."""
    from core.backends.local_server import serve

    server = serve(local_model_server(opts))
    return {"engine": server.model.config.engine, "slots": server.slots,
            "threads": server.threads}  # fmt: skip


def _local(opts: BackendSettings) -> Backend:
    from core.backends.local_backend import LocalBackend
    from core.backends.local_server import serve

    _cache_dir(opts)  # checked before the server starts
    server = serve(local_model_server(opts))
    return LocalBackend(
        server,
        _client_config(
            opts, True, model=server.model.name,
            base_url=server.url,
            # python: one llama-cpp-python instance decodes one request at a time;
            # native: every slot busy at once (a round's calls, batched by the server).
            concurrency=server.slots, cache_endpoint=server.model.cache_endpoint,
        ),
    )  # fmt: skip


BACKENDS: dict[str, Callable[[BackendSettings], Backend]] = {
    "sim": _sim,
    "openai": _openai,
    "local": _local,
}
"""Name -> factory. ``sim`` is the synthetic society (offline); ``openai`` any compatible
endpoint; ``local`` a GGUF model served by llama.cpp on 127.0.0.1, started by the project."""

LABEL_BACKENDS = frozenset({"sim"})
"""Back-ends whose answers to code tasks are labels, not programs: no generated code runs.
Every other back-end's code answers run in the sandbox (a new back-end is assumed to)."""


def make_backend(opts: BackendSettings) -> Backend:
    return BACKENDS[opts.backend](opts)
