"""What every command prints with: the stderr console, ``--json``'s one object, the
progress bar and the table."""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

console = Console(stderr=True)


def emit_json(obj: Any) -> None:
    """The one JSON object a ``--json`` command prints on stdout."""
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")


class ProgressBar:
    """A rich progress bar fed by the training loop's progress callback."""

    def __init__(self, total: int, label: str = "training", meter: Any = None):
        self.bar = Progress(
            TextColumn(f"[bold]{label}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
            console=console,
        )
        self.task = self.bar.add_task(label, total=total, info="")
        self.meter = meter
        """A :class:`~core.experiment.finetune.BudgetMeter`: the bar shows what was spent."""

    def __enter__(self) -> ProgressBar:
        self.bar.__enter__()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if exc_type is not None:
            # The error is the one line the user should see; not a half-drawn bar before it.
            self.bar.live.transient = True
        self.bar.__exit__(exc_type, *exc)

    def __call__(self, done: int, total: int, summary: dict[str, float]) -> None:
        info = f"return {summary['return_ma']:+.3f}"
        if "epsilon" in summary:
            info += f"  ε {summary['epsilon']:.2f}"
        if self.meter is not None:
            info += f"  {self.meter.describe()}"
        self.bar.update(self.task, completed=done, info=info)


def print_table(rows: list[dict[str, Any]], columns: list[str], title: str) -> None:
    from rich.table import Table

    table = Table(title=title)
    for c in columns:
        table.add_column(c, justify="left" if c in ("policy", "method", "mode") else "right")
    for row in rows:
        table.add_row(
            *(f"{row[c]:.3f}" if isinstance(row[c], float) else str(row[c]) for c in columns)
        )
    Console().print(table)


def exit_if_no_call_answered(rows: list[dict[str, Any]]) -> None:
    """Exit 1 with one sentence when every call of the run failed (after its figures were
    printed and logged: nothing is lost, but the run must not look like a success)."""
    import typer

    from core.experiment.evaluate import no_call_answered

    if (sentence := no_call_answered(rows)) is not None:
        console.print(f"[red]error:[/red] {sentence}", soft_wrap=True, highlight=False)
        raise typer.Exit(1)
