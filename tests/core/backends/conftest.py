"""Fixtures: a real chat-completions server on 127.0.0.1, stopped after each test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.core.backends.fake_openai import FakeOpenAIServer


@pytest.fixture
def fake_server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(hang_s=1.0) as server:
        yield server
