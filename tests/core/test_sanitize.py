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
