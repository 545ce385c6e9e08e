"""What a server's reply may carry into our files: checked token counts, clean text, no secrets.

A chat-completions server is outside our control; what it sends is data to check, never
to trust. Three rules, applied where a response becomes records (the OpenAI back-end),
in the response cache, and in the run config the store keeps:

* **Token counts** (:func:`usage_counts`): a ``usage`` counts only if both
  ``prompt_tokens`` and ``completion_tokens`` are whole numbers in
  ``[0, MAX_CALL_TOKENS]``; strings, NaN, infinities, 1e30, negatives or a missing field
  make the whole usage unreported (zero tokens), never a bogus number.
* **Text** (:func:`clean_text`): lone UTF-16 surrogates (which JSON's ``\\ud800``
  escapes can produce, and which no UTF-8 file can hold) become U+FFFD, NUL characters
  are removed, and length is capped at ``MAX_TEXT_CHARS``.
* **Secrets** (:func:`scrub`): every occurrence of a known secret (the API key, a
  password in the base URL, its HTTP Basic form) and the ``user:password@`` part of any
  URL becomes ``***``. A server that echoes the Authorization header therefore cannot
  put the key into a stored reply.
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import unquote, urlsplit

MASK = "***"
MAX_TEXT_CHARS = 200_000
"""Longest reply text kept (characters); a 1,024-token reply is about 4,000."""
MAX_CALL_TOKENS = 10_000_000
"""Largest token count one call may report; above it the usage is not believed."""
MIN_SECRET_CHARS = 4
"""Shorter "secrets" are not masked: replacing every "ab" in a text would garble it."""

_SURROGATE = re.compile("[\ud800-\udfff]")
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^\s/?#@]+@")


def clean_text(text: str, limit: int | None = MAX_TEXT_CHARS) -> str:
    """``text`` that any UTF-8 file, JSON line and database can hold: lone surrogates
    replaced by U+FFFD, NULs removed, at most ``limit`` characters (``None`` = no cap)."""
    text = _SURROGATE.sub("\ufffd", text).replace("\x00", "")
    return text if limit is None else text[:limit]


def token_count(value: Any) -> int | None:
    """``value`` as a token count, or ``None`` unless it is a whole number in
    ``[0, MAX_CALL_TOKENS]`` (an int, or a float such as ``12.0``; never a bool or string)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            return None
        value = int(value)
    if isinstance(value, int) and 0 <= value <= MAX_CALL_TOKENS:
        return value
    return None


def usage_counts(usage: Any) -> tuple[int, int] | None:
    """``(prompt_tokens, completion_tokens)`` of a response's ``usage`` (an SDK object or
    a dict), or ``None`` when it is absent or either count is not a valid token count."""
    if usage is None:
        return None
    if isinstance(usage, dict):
        prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    else:
        prompt = getattr(usage, "prompt_tokens", None)
        completion = getattr(usage, "completion_tokens", None)
    pt, ct = token_count(prompt), token_count(completion)
    return None if pt is None or ct is None else (pt, ct)


def url_secrets(url: str | None) -> list[str]:
    """The secrets a URL's ``user:password@`` part holds, in every spelling a server might
    echo: the password, ``user:password``, and the HTTP Basic (base64) form. A user name
    alone (``https://TOKEN@host``) is a token; next to a password it is not secret."""
    if not url:
        return []
    try:
        parts = urlsplit(url)
        user, password = parts.username, parts.password
    except ValueError:
        return []
    found: list[str] = []
    for raw_user, raw_password in (
        (user, password),
        (unquote(user or ""), unquote(password or "")),
    ):
        if raw_password:
            pair = f"{raw_user or ''}:{raw_password}"
            found += [raw_password, pair, base64.b64encode(pair.encode()).decode()]
        elif raw_user:
            found.append(raw_user)
    return list(dict.fromkeys(found))


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with each secret and every URL's ``user:password@`` replaced by ``***``."""
    for secret in sorted({s for s in secrets if s and len(s) >= MIN_SECRET_CHARS}, key=len)[::-1]:
        text = text.replace(secret, MASK)
    return _URL_USERINFO.sub(rf"\1{MASK}@", text)


def clean_tree(value: Any, secrets: Iterable[str] = ()) -> Any:
    """A copy of a JSON-like ``value`` whose every string (keys too) is cleaned and scrubbed."""
    secrets = tuple(secrets)
    if isinstance(value, str):
        return scrub(clean_text(value), secrets)
    if isinstance(value, dict):
        return {clean_tree(k, secrets): clean_tree(v, secrets) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean_tree(v, secrets) for v in value]
    return value
