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
  put the key into a stored reply. A secret of at least ``ENCODED_MIN_CHARS`` characters
  is also masked re-encoded: base64 (standard or URL-safe, padded or not, at any byte
  offset inside a longer blob), percent-encoding (any mix of encoded and plain bytes),
  hex, reversed, spelled out with separators between its characters, and any run of
  ``PIECE_CHARS`` of its characters, forwards or backwards (so a key cut into pieces,
  reversed or not, in any order). docs/openai.md lists what is not caught.
* **Messages** (:func:`mask_message`): what the CLI prints as an error also loses the
  ``user:password@`` of a URL too malformed to parse.
"""

from __future__ import annotations

import base64
import math
import os
import re
from collections.abc import Iterable
from functools import lru_cache
from typing import Any
from urllib.parse import unquote, unquote_to_bytes, urlsplit

MASK = "***"
MAX_TEXT_CHARS = 200_000
"""Longest reply text kept (characters); a 1,024-token reply is about 4,000."""
MAX_CALL_TOKENS = 10_000_000
"""Largest token count one call may report; above it the usage is not believed."""
MIN_SECRET_CHARS = 4
"""Shorter "secrets" are not masked: replacing every "ab" in a text would garble it."""

ENCODED_MIN_CHARS = 8
"""Secrets at least this long are also masked re-encoded (base64, percent, hex, reversed)."""
PIECE_CHARS = 10
"""Any run of this many characters of a secret (forwards or backwards) is masked."""

_SURROGATE = re.compile("[\ud800-\udfff]")
# Up to the last "@" before the path: a password may itself hold an "@".
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*:/+)[^\s/?#'\"<>]*@")
# A user:password@ with no scheme or a broken one ("http//u:p@h"), for messages only: in a
# model's reply it could be code ("d[1:2]@m").
_BARE_USERINFO = re.compile(r"(?<![\w.%+\-])[^\s/?#'\"<>@:]+:[^\s/?#'\"<>]*@")
_PERCENT_RUN = re.compile(r"(?:%[0-9A-Fa-f]{2}|[A-Za-z0-9._~\-])*%[0-9A-Fa-f]{2}[A-Za-z0-9._~%\-]*")
_SEPARATORS = r"[\s,;:|/'\"`+._\-]{0,3}"


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


_SECRET_ENV = re.compile(r"(API_KEY|SECRET|TOKEN|PASSWORD)$", re.IGNORECASE)


def secrets_in_environment() -> list[str]:
    """Values of environment variables named like secrets (``OPENAI_API_KEY``, ``*_TOKEN``,
    ``*_PASSWORD``...), at least 8 characters long, and the credentials of
    ``$OPENAI_BASE_URL``."""
    found = [v for k, v in os.environ.items() if _SECRET_ENV.search(k) and v and len(v) >= 8]
    return found + url_secrets(os.environ.get("OPENAI_BASE_URL"))


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with each secret (also re-encoded, see the module docstring) and every
    URL's ``user:password@`` replaced by ``***``."""
    kept = tuple(sorted({s for s in secrets if s and len(s) >= MIN_SECRET_CHARS}, key=len)[::-1])
    for secret in kept:
        text = text.replace(secret, MASK)
    encoded = tuple(s for s in kept if len(s) >= ENCODED_MIN_CHARS)
    if encoded:
        text = _scrub_encoded(text, encoded)
    return _URL_USERINFO.sub(rf"\1{MASK}@", text)


def mask_message(text: str, secrets: Iterable[str] = ()) -> str:
    """A message fit to print: :func:`scrub`, and any ``user:password@`` masked even where
    the URL around it does not parse."""
    return _BARE_USERINFO.sub(f"{MASK}@", scrub(text, secrets))


def _scrub_encoded(text: str, secrets: tuple[str, ...]) -> str:
    # Percent-encoding: decode each run that holds an escape; mask the run if it hides one.
    def percent(match: re.Match[str]) -> str:
        decoded = unquote_to_bytes(match.group(0)).decode("latin-1")
        return MASK if _holds(decoded, secrets) else match.group(0)

    text = _PERCENT_RUN.sub(percent, text)
    for form in _fixed_forms(secrets):
        text = text.replace(form, MASK)
    return _pieces(secrets).sub(MASK, text)


def _holds(decoded: str, secrets: tuple[str, ...]) -> bool:
    return any(s in decoded or s[::-1] in decoded for s in secrets) or bool(
        _pieces(secrets).search(decoded)
    )


@lru_cache(maxsize=32)
def _fixed_forms(secrets: tuple[str, ...]) -> tuple[str, ...]:
    """The re-encodings of each secret that are plain substrings, longest first: hex, and
    the base64 of the secret at each of the three byte offsets a longer blob can put it
    at, without the edge characters its neighbours change."""
    forms: set[str] = set()
    for secret in secrets:
        raw = secret.encode()
        forms |= {raw.hex(), raw.hex().upper()}
        for offset in range(3):
            blob = base64.b64encode(b"\0" * offset + raw + b"\0\0").decode()
            head = -(-offset * 4 // 3)  # characters touched by the bytes before
            tail = -(-(offset + len(raw)) * 4 // 3) - 1 if (offset + len(raw)) % 3 else None
            core = blob[head : (offset + len(raw)) * 4 // 3 if tail is None else tail]
            forms |= {core, core.replace("+", "-").replace("/", "_")}
    return tuple(sorted((f for f in forms if len(f) >= ENCODED_MIN_CHARS), key=len)[::-1])


@lru_cache(maxsize=32)
def _pieces(secrets: tuple[str, ...]) -> re.Pattern[str]:
    """Each secret spelled out (forwards or backwards, up to three separator characters
    between its characters), then any run of ``PIECE_CHARS`` of its characters."""
    spelled, runs = [], set()
    for secret in secrets:
        for text in (secret, secret[::-1]):
            spelled.append(_SEPARATORS.join(re.escape(c) for c in text))
            runs |= {text[i : i + PIECE_CHARS] for i in range(len(text) - PIECE_CHARS + 1)}
    alternatives = spelled + [re.escape(r) for r in sorted(runs, key=len, reverse=True)]
    return re.compile("|".join(alternatives))


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
