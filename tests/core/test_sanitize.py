"""Token counts, text and secrets as the sanitiser lets them into records and files."""

from __future__ import annotations

import base64
from types import SimpleNamespace

import pytest

from core.sanitize import (
    MAX_CALL_TOKENS,
    MAX_TEXT_CHARS,
    clean_text,
    clean_tree,
    mask_message,
    scrub,
    token_count,
    url_secrets,
    usage_counts,
)


@pytest.mark.parametrize(
    ("value", "count"),
    [
        (0, 0),
        (12, 12),
        (12.0, 12),
        (MAX_CALL_TOKENS, MAX_CALL_TOKENS),
        (MAX_CALL_TOKENS + 1, None),
        (-1, None),
        (1e30, None),
        (10**30, None),
        (float("nan"), None),
        (float("inf"), None),
        (2.5, None),
        ("12", None),
        (True, None),
        (None, None),
        ([3], None),
    ],
)
def test_token_count_accepts_only_whole_numbers_in_range(value, count):
    assert token_count(value) == count


def test_usage_counts_needs_both_counts_valid():
    assert usage_counts({"prompt_tokens": 3, "completion_tokens": 4}) == (3, 4)
    assert usage_counts(SimpleNamespace(prompt_tokens=3, completion_tokens=4.0)) == (3, 4)
    assert usage_counts({"prompt_tokens": 3}) is None
    assert usage_counts({"prompt_tokens": 3, "completion_tokens": -4}) is None
    assert usage_counts(SimpleNamespace(prompt_tokens="many", completion_tokens=1)) is None
    assert usage_counts(None) is None and usage_counts("garbage") is None


def test_clean_text_makes_any_string_storable():
    text = clean_text("a\ud800b\udfffc\x00d")
    assert text == "a\ufffdb\ufffdcd"
    text.encode("utf-8")
    assert clean_text("😀 ok") == "😀 ok"  # a real astral character is kept
    assert len(clean_text("x" * (MAX_TEXT_CHARS + 5))) == MAX_TEXT_CHARS
    assert len(clean_text("x" * (MAX_TEXT_CHARS + 5), limit=None)) == MAX_TEXT_CHARS + 5


def test_scrub_masks_secrets_and_url_credentials():
    key = "sk-live-0123456789"
    text = f"Bearer {key}; see https://bob:pa55word@example.com/x and ftp://TOKEN@h"
    assert scrub(text, [key]) == "Bearer ***; see https://***@example.com/x and ftp://***@h"
    assert scrub("ab is fine", ["ab"]) == "ab is fine"  # too short to be a secret
    assert scrub("mail me: a@b.org", []) == "mail me: a@b.org"  # not a URL


def test_url_secrets_cover_every_spelling_a_server_might_echo():
    secrets = url_secrets("http://alice:p%40ss-1234@127.0.0.1:8000/v1")
    basic = base64.b64encode(b"alice:p@ss-1234").decode()
    assert {"p@ss-1234", "p%40ss-1234", "alice:p@ss-1234", basic} <= set(secrets)
    assert "alice" not in secrets  # next to a password, the user name is not secret
    assert url_secrets("https://TOKEN-abcdef@host/v1") == ["TOKEN-abcdef"]
    assert url_secrets("http://127.0.0.1:8000/v1") == [] and url_secrets(None) == []


def test_clean_tree_cleans_every_string_keys_too():
    tree = {"t\ud800": ["key sk-abcdef", {"n": 3, "s": "x\x00"}], "u": None}
    assert clean_tree(tree, ["sk-abcdef"]) == {
        "t\ufffd": ["key ***", {"n": 3, "s": "x"}],
        "u": None,
    }


KEY = "sk-proj-Zq8vR2mXk7LwT4nYb9HcJ3pE"
"""A realistic key: random letters and digits after a prefix."""


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


ENCODED_ECHOES = {
    "plain": lambda k: f"key {k}.",
    "base64": lambda k: f"b64: {_b64(k.encode())}",
    "base64 inside a longer blob, each alignment": lambda k: " ".join(
        _b64(b"x" * pad + f"token={k};".encode()) for pad in range(3)
    ),
    "base64 url-safe, unpadded": lambda k: (
        base64.urlsafe_b64encode(b"\xfb" + k.encode()).decode().rstrip("=")
    ),
    "Basic auth form": lambda k: "Authorization: Basic " + _b64(f"user:{k}".encode()),
    "url-encoded, every byte": lambda k: "".join(f"%{b:02X}" for b in k.encode()),
    "url-encoded, lower case, some bytes": lambda k: "".join(
        f"%{ord(c):02x}" if i % 3 == 0 else c for i, c in enumerate(k)
    ),
    "hex": lambda k: f"0x{k.encode().hex()}",
    "reversed": lambda k: k[::-1],
    "reversed in pieces": lambda k: " | ".join(_pieces(k[::-1], 11)),
    "in pieces, out of order": lambda k: "\n".join(reversed(_pieces(k, 11))),
    "each piece reversed": lambda k: "-".join(p[::-1] for p in _pieces(k, 11)),
    "spelled out": lambda k: " ".join(k),
    "spelled out backwards": lambda k: ", ".join(k[::-1]),
}


@pytest.mark.parametrize("name", list(ENCODED_ECHOES))
def test_scrub_masks_the_key_re_encoded(name):
    """docs/openai.md lists these forms as caught."""
    echo = ENCODED_ECHOES[name](KEY)
    masked = scrub(f"The header said {echo} -- done.", [KEY])
    assert "***" in masked and masked.endswith(" -- done.")
    assert not _recoverable(masked, KEY), masked


def _recoverable(text: str, key: str) -> bool:
    """Whether ``key``, or a run of 10 of its characters, can be read back from ``text`` by
    the decodings the scrubber claims to undo."""
    from urllib.parse import unquote

    decoded = [text, unquote(text), text[::-1], "".join(text.split())]
    decoded.append("".join(c for c in text if c.isalnum() or c == "-"))
    decoded.append(decoded[-1][::-1])
    for word in text.replace("0x", " ").split():
        for blob in (word, word + "=", word + "=="):
            for decode in (base64.b64decode, base64.urlsafe_b64decode, bytes.fromhex):
                try:
                    decoded.append(decode(blob).decode("latin-1"))
                except ValueError:
                    pass
    windows = {key[i : i + 10] for i in range(len(key) - 9)}
    windows |= {w[::-1] for w in windows}
    return any(w in d for d in decoded for w in windows)


def test_scrub_leaves_ordinary_text_alone():
    text = "The answer is 42.\n```python\ndef f(a, b):\n    return a @ b\n```\nbase64: aGVsbG8="
    assert scrub(text, [KEY]) == text


def test_mask_message_hides_credentials_of_a_malformed_url():
    for url in (
        "http://alice:hunter2-PASS@127.0.0.1:port/v1",
        "http://alice:hunter2-PASS@[::1/v1",
        "http//alice:hunter2-PASS@127.0.0.1/v1",
        "alice:hunter2-PASS@127.0.0.1:8000",
        "http://alice:hunter2@PASS@127.0.0.1/v1",
    ):
        message = mask_message(f"--base-url must be an http:// address, not {url!r}.")
        assert "hunter2" not in message and "PASS" not in message, message
        assert "***@" in message
