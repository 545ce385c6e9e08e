"""Back-ends by name: ``--backend NAME`` and ``--help`` read this registry.

Each entry builds a back-end from the team's options (any object with the attributes of
:class:`BackendSettings`); adding a back-end is one line here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from core.backends.base import Backend


class BackendSettings(Protocol):
    """The options a back-end is built from (the team options carry them)."""

    backend: str
    preset: str
    model: str | None
    base_url: str | None
    concurrency: int
    use_cache: bool
    cache_counts_tokens: bool
    cache_dir: str | None
    timeout_s: float
    max_attempts: int
    sandbox: str


def _sim(opts: BackendSettings) -> Backend:
    from core.backends.society import SimBackend, get_preset

    return SimBackend(get_preset(opts.preset))


def _openai(opts: BackendSettings) -> Backend:
    from core.backends.openai_backend import OpenAIBackend, OpenAIBackendConfig

    return OpenAIBackend(
        OpenAIBackendConfig(
            model=opts.model or "",
            base_url=opts.base_url,
            concurrency=opts.concurrency,
            use_cache=opts.use_cache,
            cache_counts_tokens=opts.cache_counts_tokens,
            cache_dir=opts.cache_dir,
            timeout_s=opts.timeout_s,
            max_attempts=opts.max_attempts,
            sandbox=opts.sandbox,
        )
    )


BACKENDS: dict[str, Callable[[BackendSettings], Backend]] = {"sim": _sim, "openai": _openai}
"""Name -> factory. ``sim`` is the synthetic society (offline); ``openai`` any compatible endpoint."""

LABEL_BACKENDS = frozenset({"sim"})
"""Back-ends whose answers to code tasks are labels, not programs: no generated code runs.
Every other back-end's code answers run in the sandbox (a new back-end is assumed to)."""


def make_backend(opts: BackendSettings) -> Backend:
    return BACKENDS[opts.backend](opts)
