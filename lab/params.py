"""Query parameters, read strictly: the text a link brings becomes a value or a reason.

A page keeps its view in its URL (:class:`lab.ui.UrlState`); anyone can edit a link, so
every parameter is parsed by one of these functions, which return the value or raise
:class:`BadParam` with a reason short enough to finish the sentence "The link's
``round=99`` ...". The page then shows its default and says why. Nothing is clamped or
dropped in silence. Plain functions (no Streamlit), tested directly.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

MAX_CHARS = 300
"""A longer value is refused before it is parsed (no parameter of the lab needs more)."""

Parse = Callable[[str], Any]

PAGE_PARAMS: dict[str, tuple[str, ...]] = {
    "home": (),
    "replay": ("run", "benchmark", "policy", "result", "failures", "q", "sort", "page",
               "episode", "round"),
    "train": ("runs", "smoothing"),
    "failure_lab": ("run", "episode", "policy", "agents", "mode", "from", "fork", "rbench",
                    "rrun"),
    "compare": ("benchmark", "healthy", "training", "point", "policy", "a", "b", "sweep"),
    "diff": ("a", "pa", "b", "pb", "healthy", "regressed"),
    "sidebyside": ("a", "pa", "b", "pb", "healthy", "show", "task", "ea", "eb", "round"),
    "ctde": ("state", "mixer"),
    "methods": ("contest", "protocol", "by", "metric", "all", "seed", "tasks"),
    "runs": ("kind", "status", "run"),
}  # fmt: skip
"""Every page's query parameters (its address is ``/<page>``; the home page's is ``/``):
what its links may carry. Any other parameter in a link is named as unknown."""


class BadParam(ValueError):
    """A parameter's text that is not a valid value here; the message is the reason."""


def _checked(raw: str) -> str:
    if len(raw) > MAX_CHARS:
        raise BadParam(f"is longer than {MAX_CHARS} characters")
    if not raw.strip():
        raise BadParam("is empty")
    return raw.strip()


def whole(lo: int, hi: int) -> Parse:
    """A whole number in ``lo..hi``."""

    def parse(raw: str) -> int:
        text = _checked(raw)
        try:
            value = int(text)
        except ValueError:
            raise BadParam("is not a whole number") from None
        if not lo <= value <= hi:
            raise BadParam(f"is outside {lo}–{hi}")
        return value

    return parse


def number(lo: float, hi: float) -> Parse:
    """A finite number in ``[lo, hi]`` (``nan`` and ``inf`` are refused)."""

    def parse(raw: str) -> float:
        text = _checked(raw)
        try:
            value = float(text)
        except ValueError:
            raise BadParam("is not a number") from None
        if not math.isfinite(value):
            raise BadParam("is not a finite number")
        if not lo <= value <= hi:
            raise BadParam(f"is outside {lo:g}–{hi:g}")
        return value

    return parse


def one_of(options: Sequence[Any] | Mapping[str, Any], what: str = "value") -> Parse:
    """One of ``options``: a sequence (the link names a value by its text) or a mapping from
    the link's text to the value. The reason names the choices when there are few."""
    table = dict(options) if isinstance(options, Mapping) else {str(o): o for o in options}

    def parse(raw: str) -> Any:
        text = _checked(raw)
        if text in table:
            return table[text]
        if not table:
            raise BadParam(f"is not {_a(what)} (there is none)")
        if len(table) <= 8:
            raise BadParam(f"is not {_a(what)} (one of {', '.join(table)})")
        raise BadParam(f"names no {what} in this database")

    return parse


def some_of(options: Sequence[Any], what: str = "value") -> Parse:
    """A comma-separated list of ``options`` (their text), in the link's order, no repeats;
    one unknown item refuses the whole list (a link means exactly what it says)."""
    table = {str(o): o for o in options}

    def parse(raw: str) -> list[Any]:
        items = [t.strip() for t in _checked(raw).split(",")]
        unknown = [t for t in items if t not in table]
        if unknown:
            shown = ", ".join(repr(t) for t in unknown[:3])
            raise BadParam(f"names {shown}, not {_a(what)}")
        return list(dict.fromkeys(table[t] for t in items))

    return parse


def _a(what: str) -> str:
    """``what`` with its indefinite article: ``a policy``, ``an agent of this team``."""
    return ("an " if what[:1].lower() in "aeiou" else "a ") + what


FLAGS = {"true": True, "false": False, "1": True, "0": False, "yes": True, "no": False}


def flag(raw: str) -> bool:
    """``true``/``false`` (also ``1``/``0``, ``yes``/``no``)."""
    text = _checked(raw).lower()
    if text not in FLAGS:
        raise BadParam("is not true or false")
    return FLAGS[text]


def text(raw: str) -> str:
    """Free text (a search): any value up to :data:`MAX_CHARS`."""
    if len(raw) > MAX_CHARS:
        raise BadParam(f"is longer than {MAX_CHARS} characters")
    return raw


def shown(raw: str, limit: int = 40) -> str:
    """The raw value as a message quotes it: short, on one line."""
    one_line = " ".join(raw.split()).replace("`", "'")
    return one_line if len(one_line) <= limit else one_line[: limit - 1] + "…"
