"""The checker's wire carries data, never behaviour, and never more than its bounds."""

from __future__ import annotations

import math
import os
import struct
import time

import pytest

from core.tasks.wire import MAX_DEPTH, MAX_MESSAGE, WireError, decode, encode, recv, send

VALUES = [
    None,
    True,
    0,
    -(10**40),
    1.5,
    float("inf"),
    float("-inf"),
    "text ✓",
    b"\x00\xff",
    1 + 2j,
    [1, [2, (3, 4)]],
    (),
    {"a": [1, 2], (1, 2): {3}, 4: frozenset({5})},
    set(),
]


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_plain_values_cross_exactly(value):
    r, w = os.pipe()
    try:
        send(w, {"value": encode(value)})
        got = decode(recv(r, time.monotonic() + 1)["value"])
    finally:
        os.close(r)
        os.close(w)
    assert got == value and type(got) is type(value)


def test_nan_crosses_as_nan():
    assert math.isnan(decode(encode(float("nan"))))


class Liar(int):
    def __eq__(self, other):
        return True

    __hash__ = int.__hash__


@pytest.mark.parametrize(
    "value",
    [Liar(1), object(), [1, Liar(2)], {"k": object()}, type, print],
    ids=["int subclass", "object", "list holding a subclass", "dict holding an object", "type",
         "builtin"],
)  # fmt: skip
def test_anything_but_plain_data_is_refused(value):
    with pytest.raises(TypeError):
        encode(value)


def test_depth_is_bounded_both_ways():
    deep = True
    for _ in range(MAX_DEPTH + 1):
        deep = [deep]
    with pytest.raises(ValueError):
        encode(deep)
    tree = True
    for _ in range(MAX_DEPTH + 1):
        tree = [tree]
    with pytest.raises(ValueError):
        decode(tree)


@pytest.mark.parametrize(
    "tree",
    [
        {"$f": "1e999"},
        {"$x": []},
        {"$t": 3},
        {"$c": ["a", "b"]},
        {"$d": [[1]]},
        {"$d": [[[1], 2]]},  # an unhashable key
        {"$s": [[1]]},
        {"$b": 5},
        {"a": 1, "b": 2},
        float("nan"),
    ],
    ids=repr,
)
def test_trees_encode_cannot_make_are_refused(tree):
    with pytest.raises(ValueError):
        decode(tree)


def test_recv_refuses_oversized_garbled_and_late_messages():
    r, w = os.pipe()
    try:
        os.write(w, struct.pack(">I", MAX_MESSAGE + 1))
        with pytest.raises(WireError, match="over the limit"):
            recv(r, time.monotonic() + 1)
        os.write(w, struct.pack(">I", 3) + b"\xff\xfe[")
        with pytest.raises(WireError, match="not a message"):
            recv(r, time.monotonic() + 1)
        os.write(w, struct.pack(">I", 2) + b"[]")
        with pytest.raises(WireError, match="not an object"):
            recv(r, time.monotonic() + 1)
        os.write(w, struct.pack(">I", 10) + b"{")  # the rest never comes
        with pytest.raises(WireError, match="in time"):
            recv(r, time.monotonic() + 0.2)
    finally:
        os.close(r)
        os.close(w)
    r, w = os.pipe()
    os.close(w)
    with pytest.raises(WireError, match="closed"):
        recv(r, time.monotonic() + 1)
    os.close(r)
    sink = os.open(os.devnull, os.O_WRONLY)
    try:
        with pytest.raises(ValueError, match="over the limit"):
            send(sink, {"v": "x" * MAX_MESSAGE})
    finally:
        os.close(sink)
