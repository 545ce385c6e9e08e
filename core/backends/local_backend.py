"""``--backend local``: the OpenAI back-end on the llama.cpp server the project starts.

Everything the OpenAI back-end does (usage tokens, the response cache, retries, exact
prompts, masking) holds unchanged; this class only names the back-end, sends one call at
a time (one llama.cpp instance decodes one request at a time and keeps the prompt prefix
of the last one), and fails a call at once when the server is gone instead of retrying.
"""

from __future__ import annotations

from core.backends.local_server import LocalServer
from core.backends.openai_backend import MAX_TOKENS, OpenAIBackend, OpenAIBackendConfig

LOCAL_MAX_TOKENS: dict[tuple[str, str], int] = {
    **MAX_TOKENS,
    ("math", "agent"): 128,
    ("math", "check"): 96,
    ("math", "decision"): 64,
    ("mcq", "agent"): 80,
    ("mcq", "check"): 64,
    ("mcq", "decision"): 48,
}
"""The local model's recipe: completion caps by (task kind, call kind), half of
:data:`MAX_TOKENS` for maths and multiple choice (code keeps room for a whole function).
A small model on a CPU pays for every token twice — once to write it, again when a
teammate reads it — and rambles past its answer line; benchmarks/RESULTS.md (issue 18,
"Threads and the local model's recipe") measures time and answers read. ``--max-tokens``
still sets one cap for all."""
LOCAL_PEER_CHARS = 800
"""The local model's recipe: an earlier reply is cut to this many characters in a prompt
(the default is 3,000): prompt tokens are processed at ~115 a second on 2 cores."""
LOCAL_PROMPT_LAYOUT = "conversation"
"""The local model's recipe: each agent's requests are one growing conversation
(:data:`core.backends.prompts.LAYOUTS`), so the server's prompt cache
(``LocalServerConfig.prompt_cache_mb``) restores an agent's last request and reply and
computes only the new message (benchmarks/RESULTS.md, issue 18, "Prompt layout")."""


class LocalBackend(OpenAIBackend):
    """An :class:`OpenAIBackend` bound to a running :class:`LocalServer`."""

    name = "local"

    def __init__(self, server: LocalServer, config: OpenAIBackendConfig) -> None:
        super().__init__(config)
        self.server = server

    def endpoint_down(self) -> str | None:
        return self.server.gone()
