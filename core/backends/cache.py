"""A content-addressed, on-disk cache of chat-completion responses.

The key is the SHA-256 of the canonical JSON of the request (base URL, model,
messages, sampling parameters, seed and sample identity; never the API key). Each
entry is one JSON file, ``<dir>/<key[:2]>/<key>.json``, written to a temporary file
in the same directory and renamed into place, so an interrupted run (Ctrl-C, a
crash) leaves either the whole entry or none. A file that does not parse is a miss.

Every string of an entry is cleaned and scrubbed (:mod:`core.sanitize`) both
when it is written and when it is read: no lone surrogate, NUL or secret (the ``secrets``
the cache was given, any URL's ``user:password@``) is written, and an entry written by
an older version cannot bring one back.

Default directory: ``$AGENTQMIX_CACHE`` if set, else ``~/.cache/agentqmix/responses``.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from core.paths import replace_file
from core.sanitize import clean_tree


def default_cache_dir() -> Path:
    """``$AGENTQMIX_CACHE``, else ``~/.cache/agentqmix/responses``."""
    env = os.environ.get("AGENTQMIX_CACHE")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "agentqmix" / "responses"


def canonical_json(obj: Any) -> str:
    """One spelling per value: sorted keys, no whitespace, UTF-8 kept."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def request_key(request: dict[str, Any]) -> str:
    """SHA-256 hex digest of the canonical JSON of ``request``."""
    return hashlib.sha256(canonical_json(request).encode("utf-8")).hexdigest()


def public_url(url: str | None) -> str | None:
    """``url`` without any ``user:password@`` part, so credentials never reach a key or file."""
    if not url:
        return url
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path.rstrip("/"), parts.query, ""))


class ResponseCache:
    """Maps a request key to the stored response (a JSON object)."""

    def __init__(
        self, directory: str | os.PathLike[str] | None = None, secrets: Iterable[str] = ()
    ) -> None:
        self.directory = Path(directory) if directory is not None else default_cache_dir()
        self._secrets = tuple(secrets)

    def path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored entry, or ``None`` when absent or unreadable."""
        if not self.path(key).is_file():  # a pipe there would block the read for ever
            return None
        try:
            with open(self.path(key), encoding="utf-8") as f:
                entry = json.load(f)
        except (OSError, ValueError, RecursionError):
            return None
        return clean_tree(entry, self._secrets) if isinstance(entry, dict) else None

    def put(self, key: str, entry: dict[str, Any]) -> None:
        """Store ``entry`` atomically (temporary file + rename in the same directory)."""
        entry = clean_tree(entry, self._secrets)
        target = self.path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        # Not *.json: a temporary left by a kill between mkstemp and the try is never read.
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".part", dir=target.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(canonical_json(entry))
                f.flush()
                os.fsync(f.fileno())
            # Never over a pipe or a device someone put where the entry goes (core.paths).
            replace_file(tmp, target, "--cache-dir")
        except BaseException:
            # Includes KeyboardInterrupt: never leave a half-written file behind.
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise

    def __len__(self) -> int:
        if not self.directory.exists():
            return 0
        return sum(1 for _ in self.directory.glob("*/*.json"))
