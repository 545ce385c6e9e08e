"""The wire between the HumanEval checker and the candidate's process (docs/openai.md, Sandbox).

Self-contained on purpose (standard library only, no project imports): its source text is
sent into both processes, which may not be able to read the project's files.

* **Data only.** :func:`encode` turns plain values into JSON-able trees; :func:`decode`
  rebuilds them as exact built-in types (``int``, ``float`` incl. ``inf``/``nan``, ``str``,
  ``bool``, ``None``, ``list``, ``tuple``, ``dict``, ``set``, ``frozenset``, ``bytes``,
  ``complex``). Anything else is refused, so a candidate cannot hand the checker an object
  whose ``__eq__`` or ``__bool__`` it wrote: what crosses is data, never behaviour. Nothing
  is ever unpickled.
* **Bounded.** A message is at most :data:`MAX_MESSAGE` bytes and :data:`MAX_DEPTH` levels
  deep; reading one waits at most until a deadline.
* **Framing.** A 4-byte big-endian length, then that many bytes of UTF-8 JSON.
"""

from __future__ import annotations

import base64
import json
import math
import os
import select
import struct
import time

MAX_MESSAGE = 8 << 20
"""Largest message, bytes."""
MAX_DEPTH = 100
"""Deepest nesting of containers in a value."""
_TAGS = ("$t", "$d", "$s", "$fs", "$f", "$b", "$c")


class WireError(Exception):
    """The other side sent something that is not a message, nothing in time, or closed."""


def encode(value, depth=0):
    """``value`` as a JSON-able tree; ``TypeError`` when it is not plain data."""
    kind = type(value)
    if value is None or kind is bool or kind is str or kind is int:
        return value
    if kind is float:
        return value if math.isfinite(value) else {"$f": repr(value)}
    if depth >= MAX_DEPTH:
        raise ValueError("the value is nested too deeply")
    if kind is list:
        return [encode(v, depth + 1) for v in value]
    if kind is tuple:
        return {"$t": [encode(v, depth + 1) for v in value]}
    if kind is dict:
        return {"$d": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}
    if kind is set or kind is frozenset:
        tag = "$s" if kind is set else "$fs"
        return {tag: [encode(v, depth + 1) for v in value]}
    if kind is bytes:
        return {"$b": base64.b64encode(value).decode("ascii")}
    if kind is complex:
        return {"$c": [encode(value.real), encode(value.imag)]}
    raise TypeError(f"a {kind.__name__} is not plain data")


def decode(tree, depth=0):
    """The value a tree from :func:`encode` stands for, as exact built-in types;
    ``ValueError`` for anything :func:`encode` cannot have made."""
    kind = type(tree)
    if tree is None or kind is bool or kind is str or kind is int:
        return tree
    if kind is float:
        if not math.isfinite(tree):
            raise ValueError("a non-finite float outside its tag")
        return tree
    if depth >= MAX_DEPTH:
        raise ValueError("the value is nested too deeply")
    if kind is list:
        return [decode(v, depth + 1) for v in tree]
    if kind is not dict or len(tree) != 1:
        raise ValueError("not an encoded value")
    ((tag, body),) = tree.items()
    if tag == "$f":
        if body not in ("inf", "-inf", "nan"):
            raise ValueError(f"not a non-finite float: {body!r}")
        return float(body)
    if tag == "$b":
        if type(body) is not str:
            raise ValueError("bytes must be base64 text")
        return base64.b64decode(body.encode("ascii"), validate=True)
    if type(body) is not list:
        raise ValueError(f"tag {tag!r} needs a list")
    if tag == "$t":
        return tuple(decode(v, depth + 1) for v in body)
    try:
        return _container(tag, body, depth)
    except TypeError as e:  # an unhashable key or member
        raise ValueError(str(e)) from None


def _container(tag, body, depth):
    if tag == "$s":
        return {decode(v, depth + 1) for v in body}
    if tag == "$fs":
        return frozenset(decode(v, depth + 1) for v in body)
    if tag == "$c":
        if len(body) != 2:
            raise ValueError("a complex needs two parts")
        parts = [decode(v, depth + 1) for v in body]
        if any(type(p) is not float for p in parts):
            raise ValueError("a complex needs two floats")
        return complex(parts[0], parts[1])
    if tag == "$d":
        out = {}
        for pair in body:
            if type(pair) is not list or len(pair) != 2:
                raise ValueError("a dict entry needs a key and a value")
            out[decode(pair[0], depth + 1)] = decode(pair[1], depth + 1)
        return out
    raise ValueError(f"unknown tag {tag!r}")


def send(fd, message):
    """Write one message (a JSON-able dict) to ``fd``, all of it."""
    data = json.dumps(message, allow_nan=False, separators=(",", ":")).encode("utf-8")
    if len(data) > MAX_MESSAGE:
        raise ValueError(f"a message of {len(data)} bytes is over the limit")
    view = memoryview(struct.pack(">I", len(data)) + data)
    while view:
        view = view[os.write(fd, view) :]


def _read_exactly(fd, n, deadline):
    chunks, got = [], 0
    while got < n:
        wait = None if deadline is None else deadline - time.monotonic()
        if wait is not None and wait <= 0:
            raise WireError("no answer in time")
        ready, _, _ = select.select([fd], [], [], wait)
        if not ready:
            raise WireError("no answer in time")
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            raise WireError("the other side closed the connection")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def recv(fd, deadline=None):
    """Read one message from ``fd`` before ``deadline`` (a ``time.monotonic()`` value, or
    ``None`` = wait as long as it takes); ``WireError`` when there is none."""
    (size,) = struct.unpack(">I", _read_exactly(fd, 4, deadline))
    if size > MAX_MESSAGE:
        raise WireError(f"a message of {size} bytes is over the limit")
    try:
        message = json.loads(_read_exactly(fd, size, deadline).decode("utf-8"))
    except (ValueError, RecursionError) as e:
        raise WireError(f"not a message: {type(e).__name__}") from None
    if type(message) is not dict:
        raise WireError("not a message: not an object")
    return message
