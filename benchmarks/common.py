"""What every benchmark module shares: its argument parser and printing its result as JSON.

A mistake on a benchmark's command line ends like one of ``agentqmix``'s: one sentence on
stderr and exit code 2 (:class:`Parser`, :func:`user_errors`); sizes and durations are
bounded (:func:`int_in`, :func:`float_in`) so a typo cannot ask for hours or terabytes.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

from core.errors import StoreBusy, UserError


def run_main(result: dict[str, Any], as_json: bool = True, line: str | None = None) -> None:
    """Print ``result`` as one JSON object (or ``line`` when given and JSON was not asked for)."""
    if line is not None and not as_json:
        sys.stdout.write(line + "\n")
        return
    sys.stdout.write(json.dumps(result, indent=2, default=str) + "\n")


class Parser(argparse.ArgumentParser):
    """``argparse`` whose errors are one line, ``error: ...``, and exit code 2; a flag is
    spelt out, as ``agentqmix``'s are (``--episode 3`` is an unknown flag, not ``--episodes``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, allow_abbrev=False, **kwargs)

    def error(self, message: str) -> NoReturn:
        fail(message)


def fail(message: str) -> NoReturn:
    """End the benchmark for a user mistake: one line on stderr, exit code 2."""
    line = " ".join(part.strip() for part in message.splitlines() if part.strip())
    sys.stderr.write(f"error: {line}{'' if line.endswith('.') else '.'}\n")
    sys.exit(2)


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn :class:`UserError` (a bad file, flag or database) into :func:`fail`."""
    try:
        yield
    except (UserError, StoreBusy) as exc:
        fail(str(exc))


def int_in(lo: int, hi: int) -> Callable[[str], int]:
    """An argparse ``type``: an integer in ``lo..hi``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"{value} is not between {lo} and {hi}")
        return value

    return parse


def float_in(lo: float, hi: float) -> Callable[[str], float]:
    """An argparse ``type``: a finite number in ``[lo, hi]`` (``inf`` and ``nan`` are refused)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not (math.isfinite(value) and lo <= value <= hi):
            raise argparse.ArgumentTypeError(f"{text} is not a finite number in [{lo}, {hi}]")
        return value

    return parse
