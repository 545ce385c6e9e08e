"""Real LLM agents over any OpenAI-compatible chat-completions endpoint (docs/openai.md).

OpenAI itself, or a local vLLM / llama.cpp / Ollama server, chosen by ``base_url``
and ``model``. Calls are bounded by an ``asyncio.Semaphore`` so that the calls of
one layer (and of several episodes) are in flight together up to ``concurrency``;
each call has a timeout and is retried with exponential back-off and jitter on 429,
5xx, connection errors, timeouts and malformed responses, up to ``max_attempts``.
A call that still fails gives a failed turn (``TurnResult.failed``) with the reason
in ``LLMCall.error``; the runtime marks the agent failed for the round.

Every call records the chat messages it sent (``LLMCall.prompt``, secrets masked), also
when it failed or was served from the cache; the store keeps each distinct prompt once.

Token counts come only from the responses' ``usage``; a response without a valid one
(both counts whole numbers in ``[0, MAX_CALL_TOKENS]``) is recorded with
``usage_reported=False`` and zero tokens. Cache hits cost no tokens unless
``cache_counts_tokens``. Every reply, cache entry and error is cleaned and scrubbed
(:mod:`core.sanitize`) before it becomes a record: no lone surrogate or NUL, no
API key or base-URL password, even when the server echoes them back.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import os
import random
import time
from dataclasses import dataclass, field
from typing import Any

import openai
from openai import AsyncOpenAI

try:  # the HTTP library under the openai client: httpx2 from openai 3, httpx before
    import httpx2 as httpx
except ImportError:  # pragma: no cover - older openai
    import httpx  # type: ignore[no-redef]

from core.actions import Action
from core.backends import prompts
from core.backends.base import AgentTurn, DecisionTurn, TurnResult
from core.backends.cache import ResponseCache, default_cache_dir, public_url, request_key
from core.backends.spend import Reservation, SpendMeter, attached
from core.records import DECISION_AGENT, LLMCall
from core.sandbox import BACKENDS as SANDBOX_BACKENDS
from core.sandbox import SandboxConfig
from core.sanitize import clean_text, scrub, url_secrets, usage_counts
from core.tasks.base import Task
from core.tasks.code_checker import CheckResult, run_examples_check, written_examples

log = logging.getLogger(__name__)

NO_KEY = "not-needed"
"""Sent when no key is configured: local servers (vLLM, llama.cpp, Ollama) ignore it."""
SPEND_POLL_S = 0.05
"""How often a request that waits for room under the spend cap looks again."""
RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})

MAX_TOKENS: dict[tuple[str, str], int] = {
    ("math", "agent"): 256,
    ("math", "check"): 192,
    ("math", "decision"): 128,
    ("mcq", "agent"): 160,
    ("mcq", "check"): 128,
    ("mcq", "decision"): 96,
    ("code", "agent"): 384,
    ("code", "check"): 384,
    ("code", "decision"): 384,
}
"""Default completion cap by (task kind, call kind) — ``agent``: an agent's turn; ``check``:
execute_verify's follow-up; ``decision``: the decision agent (docs/openai.md). Enough for a
short derivation and the answer lines; a code reply must hold a whole function."""
DEFAULT_MAX_TOKENS = 256
"""The cap for a task kind the table does not name."""
COMPACT_MAX_TOKENS: dict[tuple[str, str], int] = {
    ("math", "agent"): 48,
    ("math", "check"): 48,
    ("math", "decision"): 48,
    ("mcq", "agent"): 24,
    ("mcq", "check"): 24,
    ("mcq", "decision"): 24,
}
"""The compact prompt style's caps (:data:`core.backends.prompts.STYLES`), on every back-end:
its replies are one line (a two-step calculation and its answer line is ~25 tokens), so
what runs past the cap is rambling. Code keeps the recipe's caps: a function is as long as
it is."""


def style_caps(caps: dict[tuple[str, str], int], style: str) -> dict[tuple[str, str], int]:
    """The completion caps a back-end with ``caps`` uses in prompt style ``style``: the
    compact style's own (:data:`COMPACT_MAX_TOKENS`) where they are lower."""
    if style != "compact":
        return caps
    return {**caps, **{k: min(v, caps.get(k, v)) for k, v in COMPACT_MAX_TOKENS.items()}}


def examples_confidence(checked: int) -> float:
    """The least confidence code earns by passing ``checked`` examples: 0.6, 0.7, then 0.8
    from three on. Examples are weak evidence (wrong code passes them often); the hidden
    tests' verdict, which verification cannot see, gave 0.9."""
    return 0.5 + 0.1 * min(checked, 3) if checked > 0 else 0.0


@dataclass
class OpenAIBackendConfig:
    """How to reach the model and how to call it."""

    model: str
    """Model name as the server knows it (``gpt-4o-mini``, ``Qwen/Qwen2.5-7B-Instruct``...)."""
    base_url: str | None = None
    """Endpoint, e.g. ``http://127.0.0.1:8000/v1``; ``None`` = ``$OPENAI_BASE_URL`` or OpenAI."""
    api_key_env: str = "OPENAI_API_KEY"
    """Environment variable holding the key; servers that ignore keys work without one."""
    api_key: str | None = field(default=None, repr=False)
    """An explicit key (overrides the environment); never shown in repr, logs or records."""
    temperature: float = 0.7
    """Sampling temperature."""
    max_tokens: int | None = None
    """Completion length cap per call; ``None`` = :attr:`completion_caps` by task kind and
    call kind (small models ramble: one agent once wrote 643 tokens to answer a sum)."""
    completion_caps: dict[tuple[str, str], int] | None = None
    """The caps by (task kind, call kind); ``None`` = :data:`MAX_TOKENS`. The local model's
    recipe has its own (``core.backends.local_backend.LOCAL_MAX_TOKENS``)."""
    peer_chars: int = prompts.PEER_TEXT_CHARS
    """An earlier reply shown in a prompt (a peer's, the agent's own, a final the decision
    agent reads) is cut to this many characters."""
    prompt_layout: str = "fresh"
    """How an agent's requests are written (:data:`core.backends.prompts.LAYOUTS`): ``fresh``
    (a new chat every turn) or ``conversation`` (one growing chat per agent, which a server
    with a prefix cache computes only the new part of; the local model's recipe)."""
    prompt_style: str = "full"
    """How the team's messages are worded (:data:`core.backends.prompts.STYLES`): ``full``
    (persona, round instruction, answer format and confidence) or ``compact`` (a one-line
    system prompt, worked examples as earlier turns, the question; for small models)."""
    conversation_tokens: int | None = None
    """``conversation`` layout: once an agent's conversation has grown past this many tokens
    (the server's count of its last request and reply), its next request starts a new one
    (:func:`core.backends.prompts.conversation_start`); ``None`` = never. It must leave room
    in the server's context for a new message and a reply: a request longer than the
    context fails as a call. The local model's recipe sets it."""
    timeout_s: float = 60.0
    """Per-attempt timeout, seconds."""
    max_attempts: int = 4
    """Attempts per call (1 = no retries)."""
    deadline_s: float = 120.0
    """Wall-clock limit of one call, every attempt and back-off included: a server that
    drips bytes, streams for ever or never ends its headers costs at most this."""
    max_response_bytes: int = 8 * 1024 * 1024
    """Largest response body read; a larger one is a failed attempt (a 1,024-token reply
    is about 5 KB)."""
    backoff_base_s: float = 0.5
    """First retry delay; doubles per attempt, with jitter."""
    backoff_max_s: float = 8.0
    """Longest delay between attempts (also caps a server's Retry-After)."""
    concurrency: int = 8
    """Calls in flight at once, across all agents and episodes. 1 = the server decodes one
    call at a time (one llama.cpp instance): the team then sends its calls one by one in
    a stable order, so each call reuses the prompt prefix the previous one left cached."""
    cache_endpoint: str | None = None
    """Names the endpoint in the response cache's keys; ``None`` = the base URL. The local
    model passes its file's digest, since its port changes every run."""
    cache_dir: str | None = None
    """Response cache directory; ``None`` = ``$AGENTQMIX_CACHE`` or ``~/.cache/agentqmix/responses``."""
    use_cache: bool = True
    """Read and write the response cache."""
    cache_counts_tokens: bool = False
    """Count a cache hit's recorded usage against the token budget."""
    seed: int | None = None
    """Base sampling seed sent to the server (plus the episode seed); ``None`` = send none."""
    sandbox_timeout_s: float = 10.0
    """Wall-clock limit for running an agent's code on its examples (execute_verify)."""
    verify_tests: str = "examples"
    """What execute_verify runs code on (:data:`core.backends.prompts.VERIFY_TESTS`):
    ``examples`` (the docstring's; no extra call) or ``examples+written`` (plus the agent's
    own test cases, written in one more call)."""
    sandbox: str = "auto"
    """Where code answers run: ``auto``/``bwrap`` (bubblewrap, or refuse) or ``process``."""

    def validate(self) -> None:
        if not self.model:
            raise ValueError("model must be a non-empty model name")
        if not 0.0 <= self.temperature <= 2.0:
            raise ValueError(f"temperature must be in [0, 2], got {self.temperature}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.completion_caps is not None and min(self.completion_caps.values(), default=1) < 1:
            raise ValueError(f"completion caps must be >= 1, got {self.completion_caps}")
        if self.peer_chars < 1:
            raise ValueError(f"peer_chars must be >= 1, got {self.peer_chars}")
        if self.conversation_tokens is not None and self.conversation_tokens < 1:
            raise ValueError(f"conversation_tokens must be >= 1, got {self.conversation_tokens}")
        if self.verify_tests not in prompts.VERIFY_TESTS:
            raise ValueError(
                f"verify_tests must be one of {prompts.VERIFY_TESTS}, got {self.verify_tests!r}"
            )
        if self.prompt_style not in prompts.STYLES:
            raise ValueError(
                f"prompt_style must be one of {prompts.STYLES}, got {self.prompt_style!r}"
            )
        if self.prompt_layout not in prompts.LAYOUTS:
            raise ValueError(
                f"prompt_layout must be one of {prompts.LAYOUTS}, got {self.prompt_layout!r}"
            )
        if not self.timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s}")
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}")
        if not self.deadline_s > 0:
            raise ValueError(f"deadline_s must be > 0, got {self.deadline_s}")
        if self.max_response_bytes < 1024:
            raise ValueError(f"max_response_bytes must be >= 1024, got {self.max_response_bytes}")
        if self.backoff_base_s < 0 or self.backoff_max_s < self.backoff_base_s:
            raise ValueError(
                f"need 0 <= backoff_base_s <= backoff_max_s, got {self.backoff_base_s}, "
                f"{self.backoff_max_s}"
            )
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {self.concurrency}")
        if not self.sandbox_timeout_s > 0:
            raise ValueError(f"sandbox_timeout_s must be > 0, got {self.sandbox_timeout_s}")
        if self.sandbox not in SANDBOX_BACKENDS:
            raise ValueError(f"sandbox must be one of {SANDBOX_BACKENDS}, got {self.sandbox!r}")


class _CappedBody(httpx.AsyncByteStream):
    """A response body that fails once more than ``cap`` bytes have arrived."""

    def __init__(self, inner: Any, cap: int) -> None:
        self.inner, self.cap = inner, cap

    async def __aiter__(self) -> Any:
        seen = 0
        async for chunk in self.inner:
            seen += len(chunk)
            if seen > self.cap:
                raise httpx.ReadError(f"response larger than {self.cap} bytes")
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


class _CappedTransport(httpx.AsyncBaseTransport):
    """The usual transport, with every response body capped at ``cap`` bytes: a server
    that streams for ever cannot grow the process's memory."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: Any) -> Any:
        response = await self.inner.handle_async_request(request)
        length = response.headers.get("content-length", "")
        if length.isdigit() and int(length) > self.cap:
            await response.aclose()
            raise httpx.ReadError(f"response of {length} bytes; the limit is {self.cap}")
        return httpx.Response(
            status_code=response.status_code,
            headers=response.headers,
            stream=_CappedBody(response.stream, self.cap),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self.inner.aclose()


@dataclass
class _Completion:
    text: str
    call: LLMCall


class _Malformed(Exception):
    """A 200 response that carries no usable completion."""


class OpenAIBackend:
    """Plays the agents with a real model. Safe to call concurrently from one event loop."""

    answers_are_programs = True
    synchronous = False

    name = "openai"

    def __init__(self, config: OpenAIBackendConfig, spend: SpendMeter | None = None) -> None:
        config.validate()
        self.config = config
        self.spend = spend or attached()
        """The run's hard spend cap (:mod:`core.backends.spend`): every request reserves its
        worst case there before it is sent; None = no cap."""
        self._budget_stop: str | None = None
        self.model = config.model
        self.serial = config.concurrency == 1
        """One call at a time: the team sends its calls one by one, in agent order."""
        self.sandbox = config.sandbox
        self.base_url = config.base_url or os.environ.get("OPENAI_BASE_URL") or None
        key = config.api_key or os.environ.get(config.api_key_env) or ""
        self._key = key or NO_KEY
        self._secrets = [s for s in (key, config.api_key) if s] + url_secrets(self.base_url)
        self.cache = (
            ResponseCache(config.cache_dir or default_cache_dir(), self._secrets)
            if config.use_cache
            else None
        )
        self.stats: dict[str, int] = {
            "requests": 0,
            "cache_hits": 0,
            "retries": 0,
            "failed_calls": 0,
            "cached_prompt_tokens": 0,
            "cached_completion_tokens": 0,
        }
        """Counters over the back-end's life; ``cached_*`` = usage served from the cache."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: AsyncOpenAI | None = None
        self._sem: asyncio.Semaphore | None = None
        self._sandbox_sem: asyncio.Semaphore | None = None
        self._retired: list[AsyncOpenAI] = []

    def __repr__(self) -> str:
        return f"OpenAIBackend(model={self.model!r}, base_url={public_url(self.base_url)!r})"

    # -- plumbing ---------------------------------------------------------------------

    def _bind_loop(self) -> tuple[AsyncOpenAI, asyncio.Semaphore]:
        # The HTTP pool and the semaphores belong to one event loop; a caller that runs
        # several asyncio.run() in turn gets fresh ones instead of a "different loop" error.
        loop = asyncio.get_running_loop()
        if self._loop is not loop or self._client is None or self._sem is None:
            if self._client is not None:
                # Its pool belongs to a closed loop; keeping a reference stops its finaliser
                # from scheduling a close on the new loop (which fails noisily).
                self._retired.append(self._client)
            self._loop = loop
            self._client = AsyncOpenAI(
                api_key=self._key,
                base_url=self.base_url,
                max_retries=0,
                timeout=self.config.timeout_s,
                http_client=openai.DefaultAsyncHttpxClient(
                    transport=_CappedTransport(self.config.max_response_bytes)
                ),
            )
            self._sem = asyncio.Semaphore(self.config.concurrency)
            self._sandbox_sem = asyncio.Semaphore(max(1, (os.cpu_count() or 2) - 1))
        return self._client, self._sem

    def endpoint_down(self) -> str | None:
        """Why the endpoint can no longer answer, when the back-end knows it for sure (the
        local model's server exited); ``None`` = try the call."""
        return None

    def budget_stop(self) -> str | None:
        """Why the run must stop at its budget (the spend cap refused one of this back-end's
        requests), or None."""
        return self._budget_stop

    def scrub(self, text: str) -> str:
        """``text`` fit to store or show: cleaned, and the API key, the base URL's password
        and any URL's ``user:password@`` replaced by ``***``."""
        return scrub(clean_text(text), self._secrets)

    def _request(
        self, messages: list[dict[str, str]], sample: list[int], max_tokens: int
    ) -> dict[str, Any]:
        seed = None if self.config.seed is None else self.config.seed + sample[0]
        return {
            "base_url": self.config.cache_endpoint or public_url(self.base_url),
            "model": self.model,
            "messages": messages,
            "temperature": self.config.temperature,
            "max_tokens": max_tokens,
            "seed": seed,
            # Which draw this is (episode seed, agent): distinct agents and episodes get
            # distinct samples, and re-running the same evaluation hits the cache.
            "sample": sample,
        }

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        cap = self.config.backoff_max_s
        if retry_after is not None:
            return min(max(retry_after, 0.0), cap)
        delay = min(cap, self.config.backoff_base_s * 2**attempt)
        return delay * random.uniform(0.5, 1.0)

    async def _once(
        self, request: dict[str, Any], timeout: float
    ) -> tuple[str, tuple[int, int] | None]:
        """One attempt: the reply's scrubbed text and its checked ``(prompt, completion)``
        usage (``None`` = not reported). Everything taken from the response is checked
        here, inside the caller's retry ``try``: a malformed reply is a failed attempt."""
        client, sem = self._bind_loop()
        kwargs: dict[str, Any] = {
            "model": request["model"],
            "messages": request["messages"],
            "temperature": request["temperature"],
            "max_tokens": request["max_tokens"],
        }
        if request["seed"] is not None:
            kwargs["seed"] = request["seed"]
        if extra := self.request_extras(request):
            kwargs["extra_body"] = extra
        async with sem:
            self.stats["requests"] += 1
            # A wall-clock bound: the client's own timeout is per read, which a server
            # dripping one byte at a time never trips.
            resp = await asyncio.wait_for(client.chat.completions.create(**kwargs), timeout)
        self.observe(request, resp)
        choices = getattr(resp, "choices", None)
        if not isinstance(choices, list) or not choices:
            raise _Malformed("response has no choices")
        message = getattr(choices[0], "message", None)
        text = getattr(message, "content", None)
        if not isinstance(text, str) or not text.strip():
            raise _Malformed("response has empty content")
        text = self.scrub(text)
        if not text.strip():
            raise _Malformed("response has empty content")
        return text, usage_counts(getattr(resp, "usage", None))

    def request_extras(self, request: dict[str, Any]) -> dict[str, Any]:
        """Fields a server of this back-end takes beyond OpenAI's (none here; the local
        model's native engine names a slot), sent in the body; not part of the request's
        cache key."""
        return {}

    def observe(self, request: dict[str, Any], resp: Any) -> None:
        """Sees every response the server gave (nothing here; the native engine counts
        its slots' prompt reuse and timings)."""

    def _max_tokens(self, task: Task, kind: str) -> int:
        if self.config.max_tokens:
            return self.config.max_tokens
        caps = style_caps(self.config.completion_caps or MAX_TOKENS, self.config.prompt_style)
        return caps.get((task.domain, kind), DEFAULT_MAX_TOKENS)

    async def _complete(
        self,
        messages: list[dict[str, str]],
        agent: int,
        round_: int,
        sample: list[int],
        max_tokens: int,
    ) -> _Completion:
        request = self._request(messages, sample, max_tokens)
        key = request_key(request)
        sent = self._stored_prompt(messages)
        if self.cache is not None:
            hit = self.cache.get(key)
            if hit is not None and isinstance(hit.get("text"), str) and hit["text"].strip():
                return self._from_cache(hit, key, sent, agent, round_)
        t0 = time.monotonic()
        deadline = t0 + self.config.deadline_s
        error: str | None = None
        earlier: list[str] = []  # each distinct reason once: the last alone may hide the cause
        attempt = 0
        for attempt in range(self.config.max_attempts):
            retry_after: float | None = None
            if error is not None and error not in earlier:
                earlier.append(error)
            left = deadline - time.monotonic()
            if left <= 0:
                error = f"{error}; the call's {self.config.deadline_s:g} s deadline passed"
                attempt -= 1  # this attempt was never made
                break
            down = self.endpoint_down()
            if down is not None:
                error = down  # retrying a server that is gone only wastes the back-off
                break
            held = await self._reserve(request, deadline)
            if isinstance(held, str):
                return self._refused(held, key, sent, agent, round_, attempt, t0)
            left = deadline - time.monotonic()  # waiting for room under the cap took some
            if left <= 0:
                if held is not None:
                    self.spend.settle(held, None, billed=False)  # type: ignore[union-attr]
                error = f"{error}; the call's {self.config.deadline_s:g} s deadline passed"
                attempt -= 1
                break
            billed, usage = True, None  # no usage known: the worst case stays spent
            try:
                timeout = self.config.timeout_s + 1.0
                text, usage = await self._once(request, min(timeout, left))
            except openai.APIStatusError as e:
                billed = False  # an error status: the server generated nothing
                error = f"HTTP {e.status_code}: {type(e).__name__}"
                if e.status_code not in RETRY_STATUS:
                    break
                retry_after = _retry_after(e)
            except TimeoutError:
                error = f"TimeoutError: no whole answer within {min(timeout, left):.3g} s"
            except openai.APIConnectionError as e:
                # APITimeoutError is an APIConnectionError; the cause says what broke.
                cause = f" ({e.__cause__})" if e.__cause__ is not None else ""
                error = f"{type(e).__name__}: {e}{cause}"
            except (openai.APIResponseValidationError, _Malformed, ValueError) as e:
                error = f"malformed response: {type(e).__name__}: {e}"
            except RecursionError:  # JSON nested deeper than the parser's stack
                error = "malformed response: JSON nested too deeply"
            else:
                return self._fresh(text, usage, request, key, sent, agent, round_, attempt, t0)
            finally:
                if held is not None:
                    self.spend.settle(held, usage, billed)  # type: ignore[union-attr]
            if attempt + 1 < self.config.max_attempts:
                self.stats["retries"] += 1
                delay = min(
                    self._backoff(attempt, retry_after), max(deadline - time.monotonic(), 0)
                )
                log.warning(
                    "LLM call failed (attempt %d/%d, retrying in %.2fs): %s",
                    attempt + 1,
                    self.config.max_attempts,
                    delay,
                    self.scrub(error),
                )
                await asyncio.sleep(delay)
        self.stats["failed_calls"] += 1
        before = [e for e in earlier if not (error or "").startswith(e)]
        history = f"; earlier: {' | '.join(before)}" if before else ""
        error = self.scrub(f"{error} (after {attempt + 1} attempt(s)){history}")[:2000]
        log.warning("LLM call failed for good: %s", error)
        call = LLMCall(
            agent=agent,
            round=round_,
            prompt_hash=key,
            prompt_tokens=0,
            completion_tokens=0,
            usage_reported=False,
            latency_s=time.monotonic() - t0,
            retries=attempt,
            error=error,
            prompt=sent,
        )
        return _Completion(text="", call=call)

    async def _reserve(self, request: dict[str, Any], deadline: float) -> Reservation | str | None:
        """Hold the request's worst case on the spend cap (None: no cap); the refusal's
        sentence when it could pass the cap — then this back-end stops the run. While other
        requests are in flight it waits for them to settle first (until ``deadline``)."""
        if self.spend is None:
            return None
        prompt, bound = self.spend.prompt_bound(request["messages"])
        worst = request["max_tokens"] + prompt
        while True:
            wait = time.monotonic() < deadline
            held = await asyncio.to_thread(self.spend.reserve, worst, bound, wait)
            if held is not None:
                break
            await asyncio.sleep(SPEND_POLL_S)
        if isinstance(held, str):
            self._budget_stop = self._budget_stop or held
        return held

    def _refused(
        self,
        why: str,
        key: str,
        sent: list[dict[str, str]],
        agent: int,
        round_: int,
        attempt: int,
        t0: float,
    ) -> _Completion:
        """A call the spend cap refused: never sent, and not the model's failure — the
        team's env stops the run after the round (:meth:`budget_stop`), logging none of it."""
        call = LLMCall(
            agent=agent, round=round_, prompt_hash=key, prompt_tokens=0, completion_tokens=0,
            usage_reported=False, latency_s=time.monotonic() - t0, retries=attempt,
            error=f"stopped at budget: {why}", prompt=sent,
        )  # fmt: skip
        return _Completion(text="", call=call)

    def _stored_prompt(self, messages: list[dict[str, str]]) -> list[dict[str, str]]:
        """``messages`` as records keep them: the same, unless a secret must be masked."""
        masked = [{**m, "content": scrub(m["content"], self._secrets)} for m in messages]
        return messages if masked == messages else masked

    def _fresh(
        self,
        text: str,
        usage: tuple[int, int] | None,
        request: dict[str, Any],
        key: str,
        sent: list[dict[str, str]],
        agent: int,
        round_: int,
        attempt: int,
        t0: float,
    ) -> _Completion:
        reported = usage is not None
        pt, ct = usage or (0, 0)
        if self.cache is not None:
            usage_d = {"prompt_tokens": pt, "completion_tokens": ct} if reported else None
            self.cache.put(key, {"request": request, "text": text, "usage": usage_d})
        call = LLMCall(
            agent=agent,
            round=round_,
            prompt_hash=key,
            prompt_tokens=pt,
            completion_tokens=ct,
            usage_reported=reported,
            latency_s=time.monotonic() - t0,
            retries=attempt,
            prompt=sent,
        )
        return _Completion(text=text, call=call)

    def _from_cache(
        self, hit: dict[str, Any], key: str, sent: list[dict[str, str]], agent: int, round_: int
    ) -> _Completion:
        # The entry is a file anyone could have edited: its usage is checked like a reply's.
        usage = usage_counts(hit.get("usage"))
        reported = usage is not None
        pt, ct = usage or (0, 0)
        self.stats["cache_hits"] += 1
        self.stats["cached_prompt_tokens"] += pt
        self.stats["cached_completion_tokens"] += ct
        counts = self.config.cache_counts_tokens
        call = LLMCall(
            agent=agent,
            round=round_,
            prompt_hash=key,
            prompt_tokens=pt if counts else 0,
            completion_tokens=ct if counts else 0,
            usage_reported=reported,
            cache_hit=True,
            prompt=sent,
        )
        return _Completion(text=hit["text"], call=call)

    # -- the Backend protocol -----------------------------------------------------------

    def _writing(self) -> tuple[int, str, int | None, str]:
        """How an agent's requests are written: the cut of earlier replies, the layout, the
        conversation budget and the style (:func:`core.backends.prompts.agent_messages`)."""
        c = self.config
        return c.peer_chars, c.prompt_layout, c.conversation_tokens, c.prompt_style

    async def agent_turn(self, turn: AgentTurn) -> TurnResult:
        sample = [turn.episode_seed, turn.agent]
        first = await self._complete(
            prompts.agent_messages(turn, *self._writing()),
            turn.agent,
            turn.round,
            sample,
            self._max_tokens(turn.task, "agent"),
        )
        if first.call.error is not None:
            return _failed(first)
        answer, confidence = prompts.parse_reply(turn.task, first.text)
        if Action(turn.action) is not Action.EXECUTE_VERIFY:
            return TurnResult(first.text, answer, confidence, first.call)
        return await self._verify(turn, first, answer, confidence, sample)

    async def _verify(
        self,
        turn: AgentTurn,
        first: _Completion,
        answer: str | None,
        confidence: float,
        sample: list[int],
    ) -> TurnResult:
        """execute_verify: run the code on the examples the agent may know (code), or
        re-derive (maths, MCQ). Never the hidden tests: scoring alone reads them."""
        task = turn.task
        if task.domain == "code" and task.meta.get("entry_point"):
            return await self._verify_code(turn, first, answer, confidence, sample)
        messages = prompts.rederive_messages(turn, first.text, answer, *self._writing())
        return await self._revise(turn, first, first.call, messages, answer, confidence, sample)

    async def _verify_code(
        self,
        turn: AgentTurn,
        first: _Completion,
        answer: str | None,
        confidence: float,
        sample: list[int],
    ) -> TurnResult:
        """The code's check (docs/openai.md, What verification sees): the docstring's
        examples, plus the agent's own test cases when the recipe says ``examples+written``
        (one more call writes them). All pass: the answer stands, its confidence raised to
        at least :func:`examples_confidence` of how many ran. One fails, or the code does
        not load: the report goes back for a revision. Nothing to run: the answer stands
        unverified, its confidence unchanged."""
        task, call = turn.task, first.call
        written: list[tuple[str, str]] = []
        if self.config.verify_tests == "examples+written":
            tests = await self._complete(
                prompts.write_tests_messages(turn, first.text, *self._writing()),
                turn.agent,
                turn.round,
                sample,
                self._max_tokens(task, "check"),
            )
            call = _merge(call, tests.call)
            if tests.call.error is None:
                written = written_examples(tests.text, task.meta["entry_point"])
        check = await self._run_examples(task, answer, written)
        if check.verdict == "error" or (check.verdict == "report" and check.checked == 0):
            # Nothing was checked (no example to run, or the task's own code does not run).
            return TurnResult(first.text, answer, confidence, call, verified=False)
        if check.verdict == "report" and check.failed == 0:
            floor = examples_confidence(check.checked)
            return TurnResult(first.text, answer, max(confidence, floor), call, verified=True)
        messages = prompts.code_feedback_messages(turn, first.text, check.detail, *self._writing())
        return await self._revise(turn, first, call, messages, answer, confidence, sample)

    async def _revise(
        self,
        turn: AgentTurn,
        first: _Completion,
        call: LLMCall,
        messages: list[dict[str, str]],
        answer: str | None,
        confidence: float,
        sample: list[int],
    ) -> TurnResult:
        """The check's follow-up call (``call``: the turn's calls so far)."""
        second = await self._complete(
            messages, turn.agent, turn.round, sample, self._max_tokens(turn.task, "check")
        )
        call = _merge(call, second.call)
        if second.call.error is not None:
            # The check itself failed: keep the unverified first answer; the turn stands.
            return TurnResult(first.text, answer, confidence, call, verified=False)
        answer2, confidence2 = prompts.parse_reply(turn.task, second.text)
        return TurnResult(second.text, answer2 or answer, confidence2, call, verified=True)

    async def _run_examples(
        self, task: Task, code: str | None, written: list[tuple[str, str]]
    ) -> CheckResult:
        """The agent's code on the docstring's examples and ``written``, in the sandbox,
        through the same checker process as scoring (:mod:`core.tasks.code_checker`)."""
        if not code:
            return CheckResult("fail", "No code block was found in your reply.")
        cfg = SandboxConfig(timeout_s=self.config.sandbox_timeout_s, backend=self.sandbox)
        self._bind_loop()
        assert self._sandbox_sem is not None
        async with self._sandbox_sem:
            return await asyncio.to_thread(run_examples_check, task, code, written, cfg)

    async def decide(self, turn: DecisionTurn) -> TurnResult:
        finals = prompts.readable_finals(turn.finals)
        if not finals:
            call = LLMCall(
                DECISION_AGENT,
                turn.n_rounds,
                "",
                0,
                0,
                usage_reported=False,
                error="no live agent produced an answer",
            )
            return TurnResult("", None, 0.0, call, failed=True)
        view = DecisionTurn(turn.task, finals, turn.episode_seed, turn.n_rounds)
        done = await self._complete(
            prompts.decision_messages(view, self.config.peer_chars, self.config.prompt_style),
            DECISION_AGENT,
            turn.n_rounds,
            [turn.episode_seed, DECISION_AGENT],
            self._max_tokens(turn.task, "decision"),
        )
        if done.call.error is not None:
            return _failed(done)
        answer, confidence = prompts.parse_reply(turn.task, done.text)
        return TurnResult(done.text, answer, confidence, done.call)

    async def aclose(self) -> None:
        if self._client is not None:
            try:
                await self._client.close()
            except RuntimeError:
                pass  # its event loop is already closed; nothing left to release
            self._client = None


def _failed(c: _Completion) -> TurnResult:
    return TurnResult(text="", answer=None, confidence=0.0, call=c.call, failed=True)


def _merge(a: LLMCall, b: LLMCall) -> LLMCall:
    """Two calls of one turn as one record: tokens, latency and retries add up."""
    return LLMCall(
        agent=a.agent,
        round=a.round,
        prompt_hash=hashlib.sha256((a.prompt_hash + b.prompt_hash).encode()).hexdigest(),
        prompt_tokens=a.prompt_tokens + b.prompt_tokens,
        completion_tokens=a.completion_tokens + b.completion_tokens,
        usage_reported=a.usage_reported and b.usage_reported,
        latency_s=a.latency_s + b.latency_s,
        retries=a.retries + b.retries,
        cache_hit=a.cache_hit and b.cache_hit,
        # A failed check call does not fail the turn (the first answer stands), and
        # ``error`` means "failed for good" to the runtime, so it stays unset here.
        error=None,
        # The second request begins with the whole first one.
        prompt=b.prompt,
    )


def _retry_after(e: openai.APIStatusError) -> float | None:
    headers = getattr(getattr(e, "response", None), "headers", None) or {}
    value = headers.get("retry-after-ms")
    try:
        if value is not None:
            seconds = float(value) / 1000.0
        else:
            value = headers.get("retry-after")
            seconds = float(value) if value is not None else math.nan
    except ValueError:
        return None
    # "nan" parses as a float, and sleeping NaN seconds is undefined; "inf" is capped later.
    return None if math.isnan(seconds) else seconds
