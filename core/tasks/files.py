"""Reading task files from the user's disk: one place that turns a bad file into one sentence."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from core.errors import UserError


def read_jsonl(path: Path) -> list[tuple[int, dict]]:
    """``(line number, record)`` for every non-blank line of a JSONL(.gz) file."""
    if not path.is_file():
        raise UserError(f"Task file {path} does not exist.")
    opener = gzip.open if path.suffix == ".gz" else open
    rows: list[tuple[int, dict]] = []
    try:
        with opener(path, "rt", encoding="utf-8") as fh:
            for number, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as err:
                    raise UserError(
                        f"{path}, line {number} is not valid JSON ({err.msg})."
                    ) from err
                if not isinstance(row, dict):
                    raise UserError(f"{path}, line {number} is not a JSON object.")
                rows.append((number, row))
    except (UnicodeDecodeError, gzip.BadGzipFile, EOFError) as err:
        raise UserError(f"{path} is not a UTF-8 JSONL file ({err}).") from err
    if not rows:
        raise UserError(f"Task file {path} is empty.")
    return rows
