"""The ``agentqmix`` typer app and its entry point: every user mistake ends in one sentence on
stderr and exit code 2 (see :func:`main`)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import typer

from core.cli.output import console
from core.errors import StoreBusy, UserError
from core.paths import check_no_empty_path

app = typer.Typer(
    name="agentqmix",
    help="Agent Q-Mix Lab: learn how a team of LLM agents should talk (QMIX over communication actions).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def main(argv: list[str] | None = None) -> int:
    """Entry point: user errors become one line on stderr and exit code 2.

    Click's own errors (a bad flag or value) are shown the same way, without its usage
    block; :class:`UserError` covers what only the command can tell (a missing file, a
    corrupt checkpoint).
    """
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        _check_utf8(args)
        check_no_empty_path(args)
        result = app(args=args, standalone_mode=False)
        return_code = result if isinstance(result, int) else 0
    except (UserError, StoreBusy) as exc:
        return_code = _error(str(exc), args)
    except typer.TyperException as exc:  # click's usage errors (typer vendors click)
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        # An empty message: the help text was already printed (no command given).
        return_code = _error(f"{message.rstrip('.')}. See --help.", args) if message.strip() else 2
    except typer.Abort:
        console.print("Aborted!")
        return_code = 1
    except SystemExit as exc:
        return_code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    if argv is None:
        sys.exit(return_code)
    return return_code


def _error(message: str, args: Sequence[str] = ()) -> int:
    """Print ``error: message`` as one line (never as rich markup) and return exit code 2.

    Credentials are masked (:func:`core.sanitize.mask_message`): those of any URL in the
    message, parsed or not, the secrets of the environment (``OPENAI_API_KEY``...) and
    those of every URL among the command's arguments."""
    from rich.markup import escape

    from core.sanitize import mask_message, secrets_in_environment, url_secrets

    urls = [part for arg in args for part in (arg, arg.partition("=")[2])]
    secrets = secrets_in_environment() + [s for url in urls for s in url_secrets(url)]
    message = mask_message(message, secrets)
    line = " ".join(part.strip() for part in message.splitlines() if part.strip())
    console.print(f"[red]error:[/red] {escape(line)}", highlight=False, soft_wrap=True)
    return 2


def _check_utf8(args: list[str]) -> None:
    # Python decodes argv bytes that are not UTF-8 as lone surrogates; they would only
    # fail later, deep in DuckDB or a JSON encoder.
    for position, arg in enumerate(args, start=1):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            raise UserError(f"argument {position} is not valid UTF-8 text.") from None
