"""Page scripts run with Streamlit "magic": a bare string after the module docstring (say, a
docstring under a constant) is drawn on the page. None may have one."""

from __future__ import annotations

import ast

import pytest

from tests.lab.conftest import ROOT

PAGE_FILES = sorted(p for p in (ROOT / "views").glob("*.py") if p.name != "__init__.py") + [
    ROOT / "app.py"
]


@pytest.mark.parametrize("path", PAGE_FILES, ids=lambda p: p.name)
def test_no_bare_strings_after_the_docstring(path):
    body = ast.parse(path.read_text()).body
    bare = [
        node.lineno
        for node in body[1:]
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    ]
    assert not bare, f"{path.name}: bare strings at lines {bare} would be drawn on the page"
