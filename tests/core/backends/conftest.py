"""Fixtures: a real chat-completions server on 127.0.0.1, stopped after each test; a real
proxy in front of the session's local model server that records what passes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from core.backends.local_server import LocalServer
from tests.core.backends.fake_openai import FakeOpenAIServer
from tests.core.backends.proxy import RecordingProxy


@pytest.fixture
def fake_server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(hang_s=1.0) as server:
        yield server


@pytest.fixture
def proxy(local_server: LocalServer) -> Iterator[RecordingProxy]:
    p = RecordingProxy(local_server.url)
    yield p
    p.close()
