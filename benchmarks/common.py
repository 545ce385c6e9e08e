"""What every benchmark module does at the end: print its result as JSON."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from core.errors import UserError


def run_main(result: dict[str, Any], as_json: bool = True, line: str | None = None) -> None:
    """Print ``result`` as one JSON object (or ``line`` when given and JSON was not asked for)."""
    if line is not None and not as_json:
        sys.stdout.write(line + "\n")
        return
    sys.stdout.write(json.dumps(result, indent=2, default=str) + "\n")


@contextmanager
def user_errors() -> Iterator[None]:
    """A user's mistake (a bad ``--device``, a missing folder) ends in one sentence on stderr
    and exit code 2, as in the CLI; a bug still raises."""
    try:
        yield
    except UserError as exc:
        sys.stderr.write(f"error: {exc}\n")
        raise SystemExit(2) from None
