"""Reading task files from the user's disk: one place that turns a bad file into one sentence."""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path

from core.errors import UserError


def read_jsonl(path: Path) -> list[tuple[int, dict]]:
    """``(line number, record)`` for every non-blank line of a JSONL(.gz) file.

    Every value is text a UTF-8 file can hold: lines nested too deeply for the parser,
    integers too long to convert and ``\\ud800``-style lone surrogates are mistakes in the
    file (named by line), not crashes later on.
    """
    if not path.is_file():
        raise UserError(f"Task file {path} does not exist.")
    opener = gzip.open if path.suffix == ".gz" else open
    rows: list[tuple[int, dict]] = []
    try:
        with opener(path, "rt", encoding="utf-8") as fh:
            for number, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                rows.append((number, _parse(line, path, number)))
    except (UnicodeDecodeError, OSError, EOFError, zlib.error) as err:
        # gzip.BadGzipFile is an OSError; a corrupt deflate stream is a zlib.error.
        raise UserError(f"{path} is not a UTF-8 JSONL file ({err}).") from err
    if not rows:
        raise UserError(f"Task file {path} is empty.")
    return rows


def _parse(line: str, path: Path, number: int) -> dict:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as err:
        raise UserError(f"{path}, line {number} is not valid JSON ({err.msg}).") from err
    except RecursionError as err:
        raise UserError(f"{path}, line {number} is nested too deeply to read.") from err
    except ValueError as err:  # e.g. an integer longer than Python converts (4300 digits)
        reason = str(err).split(":")[0]
        raise UserError(
            f"{path}, line {number} holds a value that cannot be read ({reason})."
        ) from err
    if not isinstance(row, dict):
        raise UserError(f"{path}, line {number} is not a JSON object.")
    if "\\u" in line:  # only an escape can smuggle a lone surrogate past the UTF-8 decoder
        try:
            json.dumps(row, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as err:
            raise UserError(
                f"{path}, line {number} holds a lone surrogate escape (\\ud800-\\udfff), not text."
            ) from err
    return row
