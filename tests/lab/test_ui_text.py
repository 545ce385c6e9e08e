"""What a model wrote is shown as written: :func:`lab.ui.markdown_literal` against a real
CommonMark renderer (markdown-it-py; Streamlit's own renderer runs in the browser, and
tests/lab/test_browser.py checks a real model's replies there)."""

from __future__ import annotations

import html
import re
import textwrap

import pytest
from markdown_it import MarkdownIt

from lab.ui import markdown_literal

WRITTEN = [
    "#### 22",
    "# The answer is 96",
    "**bold** and _italic_ and `code` and ~~gone~~",
    "1. first\n2. second\n- a bullet\n+ another",
    "[a link](http://example.com) and ![img](x.png) and <http://example.com>",
    "<script>alert(1)</script> <b>bold</b>",
    "It costs $5 and $6, so $11.",
    "a | table | row\n---|---|---",
    "> quoted\n    indented code\n```\nfenced\n```",
    "line one\nline two\n\nafter a blank line",
    "The answer to this problem is: 7.\n\nThis round you read",
    "    def f():\n        return 1",
    "&amp; &lt;b&gt; &#42; & alone",
    "back\\slash \\* and 3 * 4 * 5 = 60",
    ":red[coloured] and :smile: and a = b == c",
    "",
]


def _rendered_text(markdown: str) -> str:
    """The visible text of ``markdown`` rendered as CommonMark (HTML tags stripped, entities
    decoded, line breaks as newlines, no-break spaces as spaces)."""
    out = MarkdownIt("commonmark").render(markdown)
    out = re.sub(r"<br\s*/?>\n?", "\n", out)
    out = re.sub(r"</p>\s*<p>", "\n\n", out)
    return html.unescape(re.sub(r"<[^>]+>", "", out)).strip("\n").replace("\u00a0", " ")


@pytest.mark.parametrize("text", WRITTEN)
def test_a_models_text_renders_as_written(text):
    assert _rendered_text(markdown_literal(text)) == text


@pytest.mark.parametrize("text", WRITTEN)
def test_streamlits_dedent_leaves_it_as_it_is(text):
    """``st.markdown`` dedents its text (whitespace-only lines emptied): nothing to change
    here, so what a page holds is exactly :func:`markdown_literal`'s output."""
    literal = markdown_literal(text)
    assert textwrap.dedent(literal) == literal


def test_the_markup_it_would_have_become_is_gone():
    rendered = MarkdownIt("commonmark").render(markdown_literal("#### 22\n**x** [l](u) <b>"))
    assert "<h4>" not in rendered and "<strong>" not in rendered and "<a " not in rendered
    assert "<b>" not in rendered
