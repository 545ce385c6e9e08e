"""``--backend local``: the OpenAI back-end on the llama.cpp server the project starts.

Everything the OpenAI back-end does (usage tokens, the response cache, retries, exact
prompts, masking) holds unchanged; this class names the back-end, fails a call at once
when the server is gone instead of retrying, plays one episode at a time, and schedules
calls for the engine:

* ``python`` (llama-cpp-python's server): one call at a time (``concurrency`` 1; it decodes
  one request at a time and keeps the prompt prefix of the last one);
* ``native`` (``llama-server``): a round's calls in flight together, each in its agent's
  slot (:func:`core.backends.native_server.slot_of`), so the server batches them. A request
  that continues a conversation (it holds an earlier reply) asks the slot to reuse its
  prefix (``cache_prompt``). One that starts a conversation (every agent's first request
  of an episode, every decision) starts from the task's *opening* (system prompt and
  problem, :func:`core.backends.prompts.opening`): computed once, alone, in a clean spare
  slot, saved, and restored into the conversation's slot (:class:`Openings`), so the
  agents' first requests compute only their own text. What a slot restores is then a
  function of the task's text alone, and an episode's replies depend on nothing an earlier
  episode left in the slots (docs/openai.md, "Replies that stay comparable").
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import urllib.error
import urllib.request
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from core.backends.cache import request_key
from core.backends.local_server import LocalServer
from core.backends.native_server import slot_of
from core.backends.openai_backend import MAX_TOKENS, OpenAIBackend, OpenAIBackendConfig
from core.backends.prompts import continues, opening
from core.records import Chat

log = logging.getLogger(__name__)

LOCAL_MAX_TOKENS: dict[tuple[str, str], int] = {
    **MAX_TOKENS,
    ("math", "agent"): 128,
    ("math", "check"): 96,
    ("math", "decision"): 64,
    ("mcq", "agent"): 80,
    ("mcq", "check"): 64,
    ("mcq", "decision"): 48,
    ("code", "agent"): 256,
    ("code", "check"): 256,
    ("code", "decision"): 256,
}
"""The local model's recipe: completion caps by (task kind, call kind), half of
:data:`MAX_TOKENS` for maths and multiple choice, two thirds for code: of 80 first-round
code replies (HumanEval train tasks 0-19, four roles, cap 384) 42 held a complete function
(it parses and defines the entry point), 41 of them within 256 tokens and 40 within 192;
the replies that run on past 256 tokens are the ones that ramble (benchmarks/RESULTS.md,
issue 18, "Code episodes").
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
LOCAL_PROMPT_STYLE = "full"
"""The local model's recipe: how the team's messages are worded
(:data:`core.backends.prompts.STYLES`; ``--prompt-style compact`` for the short one)."""
LOCAL_CONVERSATION_TOKENS = 2048
"""The local model's recipe: an agent's conversation that has grown past this many tokens
starts over (:func:`core.backends.prompts.conversation_start`). On 2 cores a request's
every token costs more the longer the context (SmolLM2-135M decodes ~3x slower at 5,000
tokens than under 1,000), and the server's context (``LocalServerConfig.n_ctx``, 4,096)
must still hold the new message and a reply: a code task's hub, reading three functions a
round, outgrew it in its third round (benchmarks/RESULTS.md, issue 18, "Code episodes")."""

LOCAL_WEIGHTS = "q8_0"
"""The local model's recipe: the shipped SmolLM2-135M-Instruct (Q4_1) is served as a copy
whose weights are stored as Q8_0 (:attr:`core.backends.local_server.LocalServerConfig.weights`),
made once. llama.cpp 0.3.36 has no fast matrix kernel for Q4_1 on x86, so the copy
processes prompts ~1.6x as fast on 2 cores and decodes ~12 % slower, and it is the same
model: Q8_0 holds each Q4_1 block all but exactly (perplexity +0.4 % on HumanEval code,
+0.3 % on GSM8K problems; Q4_0 would be faster still but +17 % / +14 %)
(benchmarks/RESULTS.md, issue 18, "The shipped model's weights as Q8_0"). A ``--model-file``
is served as it is: its user chose its quantisation."""


def local_weights(model_file: str | None) -> str | None:
    """The weight type the local recipe serves ``model_file`` as: :data:`LOCAL_WEIGHTS`
    for the shipped model (``None``), the file as it is for a user's own."""
    return LOCAL_WEIGHTS if model_file is None else None


OPENING_FILES = 4
"""How many tasks' openings the native engine keeps saved, one file each in the server's
slot directory (SmolLM2-135M holds 23 KB of KV cache a token: a 300-token opening is 7 MB).
An episode has one opening; a few more let the next policy's episodes on the same tasks
find theirs."""


def _post(root: str, path: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
    req = urllib.request.Request(
        root + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


class Openings:
    """The tasks' openings one native server holds saved (:data:`OPENING_FILES`, least
    recently used dropped first), and the two steps that share one: computing it in the
    spare slot and saving it (once per opening), restoring it into a slot (each
    conversation that starts with it). Thread-safe: a round's first requests, sent
    together, wait while the first of them computes the opening, so it is computed alone
    (no other slot's tokens in its batches) and its state depends on its text alone."""

    def __init__(self) -> None:
        self._files: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()
        self._supported: bool | None = None
        self.computed = 0
        """Openings computed (and saved)."""
        self.restored = 0
        """Conversations that started from a restored opening."""
        self.tokens_computed = 0
        """The openings' tokens, computed once each."""
        self.tokens_restored = 0
        """Tokens restored into slots: what the conversations did not compute whole (less
        the last one or two, which a request's own text may tokenize otherwise)."""

    def open(self, root: str, chat: Chat, slot: int, spare: int, timeout: float) -> int:
        """Put ``chat``'s opening (:func:`core.backends.prompts.opening`) into ``slot`` of
        the server at ``root`` (its URL without ``/v1``), computing it in slot ``spare``
        when no file holds it yet; the tokens restored."""
        key = request_key({"opening": chat})
        with self._lock:
            name = self._files.pop(key, None)
            if name is None:
                name = self._file_for_new()
                _post(root, "/chat/completions", {
                    "messages": chat, "max_tokens": 0, "temperature": 0.0,
                    "id_slot": spare, "cache_prompt": False,
                }, timeout)  # fmt: skip
                saved = _post(root, f"/slots/{spare}?action=save", {"filename": name}, timeout)
                self.computed += 1
                self.tokens_computed += int(saved.get("n_saved", 0))
            self._files[key] = name
            done = _post(root, f"/slots/{slot}?action=restore", {"filename": name}, timeout)
            self.restored += 1
            self.tokens_restored += int(done.get("n_restored", 0))
        return int(done.get("n_restored", 0))

    def supported(self, root: str, timeout: float) -> bool:
        """Whether the server at ``root`` lists its slots (``GET /slots``: llama-server
        does); asked once. A server that does not (a stand-in speaking only the OpenAI
        API) is sent every prompt whole."""
        with self._lock:
            if self._supported is None:
                try:
                    with urllib.request.urlopen(f"{root}/slots", timeout=timeout) as resp:
                        self._supported = isinstance(json.loads(resp.read()), list)
                except urllib.error.HTTPError:
                    self._supported = False  # the server answered: it has no such route
                except (OSError, ValueError):
                    return False  # not answered (gone, or too slow): ask again next time
            return self._supported

    def _file_for_new(self) -> str:
        """A file for a new opening: a free one of this object's :data:`OPENING_FILES`, or
        the least recently used one's. Named after the process and this object: back-ends
        of other processes attached to the same server keep files of their own."""
        names = {f"opening-{os.getpid()}-{id(self):x}-{i}.bin" for i in range(OPENING_FILES)}
        free = sorted(names - set(self._files.values()))
        return free[0] if free else self._files.popitem(last=False)[1]


@dataclass
class SlotStats:
    """What one slot of the native engine served (from its responses)."""

    requests: int = 0
    reused: int = 0
    """Requests that found part of their prompt in the slot (``cached_tokens`` > 0)."""
    prompt_tokens: int = 0
    cached_tokens: int = 0
    """Prompt tokens taken from the slot's KV cache, not computed."""
    prompt_ms: float = 0.0
    """The server's time computing prompt tokens (batched with other slots' work)."""
    predicted_tokens: int = 0
    predicted_ms: float = 0.0


class LocalBackend(OpenAIBackend):
    """An :class:`OpenAIBackend` bound to a running :class:`LocalServer`."""

    name = "local"
    one_episode_at_a_time = True
    """Episodes of a batch are played in turn (the team env reads it): each agent keeps one
    slot, so two episodes at once would evict each other's conversations."""

    def __init__(self, server: LocalServer, config: OpenAIBackendConfig) -> None:
        super().__init__(config)
        self.server = server
        self.native = server.model.config.engine == "native"
        self.slot_stats = [SlotStats() for _ in range(server.slots if self.native else 0)]
        """Per slot of the native engine, what it served (index = slot)."""
        self.openings = Openings()
        self.opened: dict[int, Chat | None] = {}
        """Per slot, the opening restored into it for its current request (None: none)."""

    def endpoint_down(self) -> str | None:
        return self.server.gone()

    def slot(self, request: dict[str, Any]) -> int:
        """The slot of the agent a request is for (``request["sample"]`` = ``[episode seed,
        agent]``)."""
        return slot_of(int(request["sample"][1]), self.server.slots)

    def request_extras(self, request: dict[str, Any]) -> dict[str, Any]:
        if not self.native:
            return {}
        # The compact style's worked examples are assistant turns too: not a conversation.
        reuse = continues(request["messages"]) or self.opened.get(self.slot(request)) is not None
        return {"id_slot": self.slot(request), "cache_prompt": reuse}

    async def _once(self, request: dict[str, Any], timeout: float) -> Any:
        if self.native:
            slot = self.slot(request)
            self.opened[slot] = await asyncio.to_thread(self._open, request["messages"], slot)
        return await super()._once(request, timeout)

    def _open(self, messages: Chat, slot: int) -> Chat | None:
        """Start ``slot`` from the task's opening when ``messages`` starts a conversation
        (:class:`Openings`); the opening, or None (it continues one, or sharing failed:
        then the request computes its prompt whole, from a clean slot)."""
        chat = opening(messages)
        root = self.server.url.removesuffix("/v1")
        if chat is None or not self.openings.supported(root, self.config.timeout_s):
            return None
        try:
            self.openings.open(root, chat, slot, self.server.slots - 1, self.config.timeout_s)
        except (OSError, ValueError) as err:
            log.warning("could not share the task's opening with slot %d: %s", slot, err)
            return None
        return chat

    def observe(self, request: dict[str, Any], resp: Any) -> None:
        if not self.native:
            return
        extra = getattr(resp, "model_extra", None) or {}
        timings = extra.get("timings") if isinstance(extra.get("timings"), dict) else {}
        usage = getattr(resp, "usage", None)
        details = getattr(usage, "prompt_tokens_details", None)
        cached = int(getattr(details, "cached_tokens", 0) or 0)
        stats = self.slot_stats[self.slot(request)]
        stats.requests += 1
        stats.reused += cached > 0
        stats.prompt_tokens += int(getattr(usage, "prompt_tokens", 0) or 0)
        stats.cached_tokens += cached
        stats.prompt_ms += float(timings.get("prompt_ms", 0.0))
        stats.predicted_tokens += int(timings.get("predicted_n", 0))
        stats.predicted_ms += float(timings.get("predicted_ms", 0.0))
