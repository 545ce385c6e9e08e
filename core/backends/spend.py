"""The hard spend cap of a run on a real back-end: no request leaves once it could pass it.

A :class:`SpendMeter` is a small JSON file (its caps and what was spent) that every
process of one run shares: the command that starts the run, and any child or Ray worker
that plays episodes for it (they find it through :data:`SPEND_ENV`). Before each request,
the back-end *reserves* the request's worst case — its ``max_tokens`` plus its prompt's
tokens (:meth:`SpendMeter.prompt_bound`) — and one call; a request whose reservation would
pass a cap is never sent. After the answer it *settles*: the reservation is replaced by
the usage the server reported (no usage reported: the worst case stays spent; an HTTP
error status: nothing was generated, no tokens). So what the server bills never passes
the cap, whatever the concurrency: every read-modify-write of the file holds an exclusive
``flock`` (threads and processes alike, since each takes its own open file description).

The prompt's tokens are not known before the server counts them. The first requests are
bounded by one token per UTF-8 byte plus the chat template's tokens (a byte-level
tokenizer — GPT, Llama, Qwen, SmolLM2 — never spends more); once the server has counted
some prompts, by the largest ratio of its count to that bound seen so far, plus a
:data:`PROMPT_MARGIN` (the same tokenizer counts the same kind of text). A request that
does not fit while others are in flight waits for them to settle (their worst cases are
usually far above their bills) and is refused only when it still does not fit.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

SPEND_ENV = "AGENTQMIX_SPEND"
"""Names the spend file of the run this process plays for (set by :func:`spending`)."""
MESSAGE_OVERHEAD_TOKENS = 8
"""Tokens a chat template adds around one message (role markers, separators): ChatML
spends 4-5; the margin covers templates that spend more."""
REQUEST_OVERHEAD_TOKENS = 16
"""Tokens a chat template adds to a request (the assistant's opening, a BOS)."""
PROMPT_MARGIN = 1.25
"""The learned prompt bound's margin over the largest ratio (server count / byte bound)
seen so far."""


def worst_case_prompt_tokens(messages: list[dict[str, str]]) -> int:
    """An upper bound of the prompt tokens a server counts for ``messages``: a byte-level
    tokenizer (GPT, Llama, Qwen, SmolLM2) never spends more than one token per UTF-8 byte,
    plus the chat template's own tokens."""
    body = sum(len(str(m.get("content", "")).encode("utf-8")) for m in messages)
    return body + MESSAGE_OVERHEAD_TOKENS * len(messages) + REQUEST_OVERHEAD_TOKENS


@dataclass
class Spend:
    """The state of a spend file."""

    tokens_cap: int | None
    """Prompt + completion tokens the run may be billed (None = no cap)."""
    calls_cap: int | None
    """Requests the run may send (None = no cap)."""
    tokens: int = 0
    """Tokens spent: settled usage, plus the worst case of requests in flight."""
    calls: int = 0
    """Requests sent (retries included), plus those in flight."""
    in_flight: int = 0
    """Reservations not settled yet."""
    prompt_ratio: float | None = None
    """The largest (server's prompt count / :func:`worst_case_prompt_tokens`) seen; None
    until a prompt was counted."""
    episode: tuple[float, float] | None = None
    """What one episode is expected to cost, (tokens, calls): a probe's measure, until
    the run's own episodes tell (None = not known)."""
    refused: int = 0
    """Requests the cap refused (never sent)."""
    refusal: str | None = None
    """The first refusal, as a sentence."""


@dataclass(frozen=True)
class Reservation:
    """What one request holds until it settles."""

    tokens: int
    """The worst case held: completion cap + prompt bound."""
    prompt_bound: int
    """:func:`worst_case_prompt_tokens` of the prompt (to learn the ratio from its count)."""


class SpendMeter:
    """A run's spend against its caps, in the file ``path`` (see the module docstring)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()

    @classmethod
    def create(
        cls,
        tokens: int | None,
        calls: int | None,
        spent: tuple[int, int] = (0, 0),
        path: str | Path | None = None,
    ) -> SpendMeter:
        """A new spend file for caps ``tokens`` and ``calls``, ``spent`` = (tokens, calls)
        already spent (a resumed run); ``path`` None = a temporary file (removed by
        :meth:`remove`)."""
        if path is None:
            fd, name = tempfile.mkstemp(prefix="agentqmix-spend-", suffix=".json")
            os.close(fd)
            path = name
        meter = cls(path)
        meter._write(Spend(tokens, calls, *spent))
        return meter

    # -- the file ------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[Spend]:
        """The spend state, held exclusively; written back when the block ends."""
        with self._lock, open(str(self.path) + ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                spend = self.read()
                yield spend
                self._write(spend)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def read(self) -> Spend:
        state = json.loads(self.path.read_text())
        if state.get("episode") is not None:
            state["episode"] = tuple(state["episode"])
        return Spend(**state)

    def _write(self, spend: Spend) -> None:
        part = self.path.with_name(self.path.name + ".part")
        part.write_text(json.dumps(asdict(spend)))
        os.replace(part, self.path)

    def remove(self) -> None:
        for p in (self.path, Path(str(self.path) + ".lock")):
            p.unlink(missing_ok=True)

    # -- reserve and settle -------------------------------------------------------------

    def prompt_bound(self, messages: list[dict[str, str]]) -> tuple[int, int]:
        """(estimate, byte bound) of the prompt tokens of ``messages``: the byte bound until
        the server has counted a prompt, then the learned ratio of it (module docstring)."""
        bound = worst_case_prompt_tokens(messages)
        ratio = self.read().prompt_ratio
        if ratio is None:
            return bound, bound
        return min(bound, math.ceil(bound * min(1.0, ratio * PROMPT_MARGIN))), bound

    def reserve(self, tokens: int, prompt_bound: int, wait: bool) -> Reservation | str | None:
        """Hold ``tokens`` and one call for a request about to be sent. When that could pass
        a cap: None if ``wait`` and other reservations are in flight (try again once they
        settle), else the sentence saying so — the refusal stands for the rest of the run."""
        with self._locked() as s:
            why = _refusal(s, tokens)
            if why is None:
                s.tokens += tokens
                s.calls += 1
                s.in_flight += 1
                return Reservation(tokens, prompt_bound)
            if wait and s.in_flight > 0 and s.refusal is None:
                return None
            s.refused += 1
            s.refusal = s.refusal or why
            return s.refusal

    def settle(self, held: Reservation, usage: tuple[int, int] | None, billed: bool) -> None:
        """Replace ``held`` by what the request cost: ``usage`` (prompt, completion) as the
        server reported it; ``billed`` False = an HTTP error status (nothing generated, no
        tokens). No usage on a billed request: the worst case stays spent. The call stays
        counted: it was sent."""
        with self._locked() as s:
            s.in_flight -= 1
            if not billed:
                s.tokens -= held.tokens
            elif usage is not None:
                s.tokens += sum(usage) - held.tokens
                ratio = usage[0] / max(held.prompt_bound, 1)
                s.prompt_ratio = max(ratio, s.prompt_ratio or 0.0)

    def expect(self, tokens: float, calls: float) -> None:
        """Record what one episode is expected to cost (a probe's measure)."""
        with self._locked() as s:
            s.episode = (tokens, calls)

    def stopped(self) -> str | None:
        """Why the run must stop (a request was refused), or None."""
        return self.read().refusal

    def attach_env(self) -> dict[str, str]:
        """The environment a child process (a Ray task) needs to spend against this meter."""
        return {SPEND_ENV: str(self.path)}


def _refusal(s: Spend, tokens: int) -> str | None:
    if s.refusal is not None:
        return s.refusal  # once refused, the run stops: nothing more is sent
    if s.calls_cap is not None and s.calls + 1 > s.calls_cap:
        return f"the call budget was reached: {s.calls:,} of {s.calls_cap:,} calls spent"
    if s.tokens_cap is not None and s.tokens + tokens > s.tokens_cap:
        return (
            f"the token budget was reached: {s.tokens:,} of {s.tokens_cap:,} tokens spent, "
            f"and the next call could cost up to {tokens:,}"
        )
    return None


def attached() -> SpendMeter | None:
    """The meter :data:`SPEND_ENV` names (the run this process plays for), or None."""
    path = os.environ.get(SPEND_ENV)
    return SpendMeter(path) if path else None


def spend_env() -> dict[str, str]:
    """The environment that attaches a child (a Ray task) to this process's spend cap."""
    meter = attached()
    return meter.attach_env() if meter is not None else {}


def budget_stop() -> str | None:
    """Why the run this process plays for must stop at its budget, or None."""
    meter = attached()
    return meter.stopped() if meter is not None else None


@contextlib.contextmanager
def spending(meter: SpendMeter | None) -> Iterator[SpendMeter | None]:
    """Within the block, every real back-end this process (or a child it starts) builds
    spends against ``meter`` (None: no cap; an outer meter is set aside)."""
    before = os.environ.get(SPEND_ENV)
    if meter is None:
        os.environ.pop(SPEND_ENV, None)
    else:
        os.environ[SPEND_ENV] = str(meter.path)
    try:
        yield meter
    finally:
        if before is None:
            os.environ.pop(SPEND_ENV, None)
        else:
            os.environ[SPEND_ENV] = before


def summary(meter: SpendMeter) -> dict[str, Any]:
    """What a run reports of its spend: the file's state as a dict."""
    return asdict(meter.read())
