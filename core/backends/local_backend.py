"""``--backend local``: the OpenAI back-end on the llama.cpp server the project starts.

Everything the OpenAI back-end does (usage tokens, the response cache, retries, exact
prompts, masking) holds unchanged; this class only names the back-end, sends one call at
a time (one llama.cpp instance decodes one request at a time and keeps the prompt prefix
of the last one), and fails a call at once when the server is gone instead of retrying.
"""

from __future__ import annotations

from core.backends.local_server import LocalServer
from core.backends.openai_backend import OpenAIBackend, OpenAIBackendConfig


class LocalBackend(OpenAIBackend):
    """An :class:`OpenAIBackend` bound to a running :class:`LocalServer`."""

    name = "local"

    def __init__(self, server: LocalServer, config: OpenAIBackendConfig) -> None:
        super().__init__(config)
        self.server = server

    def endpoint_down(self) -> str | None:
        return self.server.gone()
