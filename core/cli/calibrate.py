"""``agentqmix calibrate``: fit the synthetic society to real runs and print the check."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from core.backends.society import PRESETS
from core.cli.app import app
from core.cli.flags import Db, Json, NoLog
from core.cli.output import console, emit_json


@app.command()
def calibrate(
    run: Annotated[
        list[str], typer.Option(help="RUN_ID of a real run to fit on (repeat for several).")
    ],
    out: Annotated[Path, typer.Option(help="Where to write the fitted society (JSON).")],
    check_fraction: Annotated[
        float, typer.Option(help="Share of the tasks held out to check the fit (by task hash).")
    ] = 0.3,
    draws: Annotated[
        int, typer.Option(help="Simulated replays of each held-out real episode.")
    ] = 20,
    base: Annotated[
        str, typer.Option(help=f"Preset the fit shrinks toward: {', '.join(PRESETS)}.")
    ] = "flash-lite",
    prior_scale: Annotated[
        float, typer.Option(help="Widen (>1) or narrow (<1) the priors around --base.")
    ] = 1.0,
    name: Annotated[
        str | None, typer.Option(help="Name of the fitted society (default calibrated-MODEL).")
    ] = None,
    seed: Annotated[int, typer.Option(min=0, max=2**63 - 1, help="Seeds replays, bootstrap.")] = 0,
    reread: Annotated[
        bool,
        typer.Option(
            "--reread",
            help="Read the stored maths and multiple-choice replies again with "
            "today's answer reader before fitting (a store recorded with an older reader).",
        ),
    ] = False,
    db: Db = None,
    no_log: NoLog = False,
    as_json: Json = False,
) -> None:
    """Fit the synthetic society to real runs; check it on tasks the fit never saw."""
    from core.experiment.calibrate import CalibrateOptions
    from core.experiment.calibrate import calibrate as run_calibration

    options = CalibrateOptions(
        runs=tuple(run), out=out, check_fraction=check_fraction, draws=draws, base=base,
        prior_scale=prior_scale, seed=seed, name=name, reread=reread,
    )  # fmt: skip
    with console.status("calibrating") as status:
        result = run_calibration(
            options, db=db, log=not no_log, progress=lambda m: status.update(m)
        )
    if as_json:
        emit_json({"out": str(out), "run_id": result.run_id, **result.report()})
        return
    _print_calibration(result)


def _ci(t: Any, fmt: str) -> str:
    return f"{t[0]:{fmt}} ({t[1]:{fmt}}, {t[2]:{fmt}})"


def _print_calibration(result: Any) -> None:
    from rich.markup import escape
    from rich.table import Table

    out = Console(width=None if sys.stdout.isatty() else 200)
    fit, split = result.fit, result.split
    table = Table(title=f"fitted parameters of {fit.config.name} (base {result.extra['base']})")
    for col in ("parameter", "stock", "fitted (95% interval)", "n"):
        table.add_column(col, justify="left" if col == "parameter" else "right")
    for p in fit.params:
        table.add_row(p.name, f"{p.stock:.4g}", f"{p.value:.4g} ({p.lo:.4g}, {p.hi:.4g})", str(p.n))
    out.print(table)
    out.print("[bold]kept at the base preset's value:[/bold]")
    for what, why in fit.stock.items():
        out.print(escape(f"  {what}: {why}"), highlight=False, soft_wrap=True)
    out.print(
        f"[bold]simulated vs real[/bold]: fitted on {split['fit_episodes']} episodes of "
        f"{split['fit_tasks']} tasks; checked on {split['check_episodes']} episodes of "
        f"{split['check_tasks']} other tasks (split by task hash, {split['check_fraction']:.0%} "
        f"held out), each replayed {split['draws']}x in the fitted society. (lo, hi) = 95% "
        "bootstrap interval over tasks; err = simulated - real; base err = the base preset's.",
        highlight=False,
        soft_wrap=True,
    )
    for title, rows in (
        ("per policy", result.by_topology),
        ("per action (calls)", result.by_action),
    ):
        t = Table(title=f"held-out check, {title}")
        for col in (
            "group", "n", "real acc", "sim acc", "err acc", "base err",
            "real tokens", "sim tokens", "err tokens", "base err",
            "real reward", "sim reward", "err reward",
        ):  # fmt: skip
            t.add_column(col, justify="left" if col == "group" else "right")
        for r in rows:
            t.add_row(
                r["group"], str(r["n"]), _ci(r["real_acc"], ".2f"), _ci(r["sim_acc"], ".2f"),
                _ci(r["err_acc"], "+.2f"), f"{r['stock_err_acc'][0]:+.2f}",
                _ci(r["real_tok"], ".0f"), _ci(r["sim_tok"], ".0f"),
                _ci(r["err_tok"], "+.0f"), f"{r['stock_err_tok'][0]:+.0f}",
                *(
                    (_ci(r["real_rew"], ".3f"), _ci(r["sim_rew"], ".3f"), _ci(r["err_rew"], "+.3f"))
                    if "real_rew" in r else ("", "", "")
                ),
            )  # fmt: skip
        out.print(t)
    _print_ranking(out, result.ranking)
    console.print(
        f"wrote {result.out}" + (f"; logged as run {result.run_id}" if result.run_id else ""),
        soft_wrap=True,
    )


def _print_ranking(out: Console, ranking: dict[str, Any]) -> None:
    """Kendall τ between the simulated and the real ranking of the fixed topologies."""
    names = ", ".join(ranking["topologies"])
    for which in ("fitted", "base"):
        r = ranking[which]
        text = "n/a (fewer than two fixed topologies held out)" if r is None else (
            f"{r['tau']:+.2f} (95% interval {r['lo']:+.2f}, {r['hi']:+.2f})"
        )  # fmt: skip
        out.print(
            f"ranking of the fixed topologies by reward ({names}), {which} society vs real: "
            f"Kendall tau {text}",
            highlight=False, soft_wrap=True,
        )  # fmt: skip
