"""What every benchmark module does at the end: print its result as JSON."""

from __future__ import annotations

import json
import sys
from typing import Any


def run_main(result: dict[str, Any], as_json: bool = True, line: str | None = None) -> None:
    """Print ``result`` as one JSON object (or ``line`` when given and JSON was not asked for)."""
    if line is not None and not as_json:
        sys.stdout.write(line + "\n")
        return
    sys.stdout.write(json.dumps(result, indent=2, default=str) + "\n")
