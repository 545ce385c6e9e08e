"""Experiments on the agent team: the one place that turns options into objects and runs.

* the team options (:class:`~core.team.options.TeamOptions`, one object; re-exported here
  for the lab's pages, which import ``core.experiment`` and not the team);
* :mod:`core.experiment.train` — logged training runs (and ``--resume``), plus training on
  any protocol environment;
* :mod:`core.experiment.evaluate` — held-out evaluation, comparison and robustness runs;
* :mod:`core.experiment.sweep` — the token/accuracy sweep's driver on Ray (not imported
  here: it imports Ray), with :mod:`~core.experiment.sweep_plan` (its plan, stored results
  and rows), :mod:`~core.experiment.sweep_trials` (its Ray tasks) and
  :mod:`~core.experiment.sweep_resume` (what a resumed sweep finds stored).

The CLI, the lab's worker and the benchmarks all go through here, so a run made anywhere
is built and logged the same way; every episode is played by :func:`core.qmix.runner.rollout`.
"""

from core.experiment.evaluate import (
    compare_team,
    evaluate_team,
    learned_policy,
    log_run,
    resolve_policy,
    robustness_team,
    run_policy,
)
from core.experiment.train import TrainOutcome, save_training_checkpoint, train_team
from core.team.options import TeamOptions, options_from_dict

__all__ = [
    "TeamOptions",
    "TrainOutcome",
    "compare_team",
    "evaluate_team",
    "learned_policy",
    "log_run",
    "options_from_dict",
    "resolve_policy",
    "robustness_team",
    "run_policy",
    "save_training_checkpoint",
    "train_team",
]
