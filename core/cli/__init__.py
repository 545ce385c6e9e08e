"""``agentqmix``: train, evaluate, compare, benchmark, query and open the lab.

One module per command family registers its commands on :data:`core.cli.app.app`:
:mod:`~core.cli.train`, :mod:`~core.cli.evaluate` (eval, compare, robustness),
:mod:`~core.cli.sweep`, :mod:`~core.cli.calibrate`, :mod:`~core.cli.store` (runs, sql,
export, delete-run, repair), :mod:`~core.cli.lab`, :mod:`~core.cli.bench`; the flags they
share are declared once in :mod:`~core.cli.flags`. Every user mistake ends in one sentence
on stderr and exit code 2 (see :func:`main`).
"""

# isort: off
# Registration order is the order ``agentqmix --help`` lists the commands in.
from core.cli import train, evaluate, sweep, calibrate, study, store, lab, bench  # noqa: F401
from core.cli.app import app, main

# isort: on

__all__ = ["app", "main"]
