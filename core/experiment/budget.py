"""Every command on a real back-end, within a budget: the one seam they all go through.

:func:`real_run` wraps a command's work (train, fine-tune, eval, compare, robustness,
sweep, and any later study on the same machinery):

1. a paid endpoint (``--backend openai`` off this machine) without a budget is refused,
   one sentence, nothing sent (:func:`core.experiment.finetune.needs_budget`);
2. with a budget, a hard spend cap (:class:`core.backends.spend.SpendMeter`) is attached:
   every request of the run, in this process or in a child it starts, reserves its worst
   case first and is never sent when that could pass the cap — the run then stops after
   the round (:class:`core.errors.BudgetReached`), logging none of the batch in flight;
3. the estimate is printed before the work starts: with a budget, measured on one probe
   episode (calls, tokens, wall time); without one, by arithmetic (at most so many calls
   and completion tokens), so that a run without a budget sends no call more than its own;
4. the :class:`~core.experiment.finetune.BudgetMeter` it yields sizes training batches
   by the probe's cost per episode until the run's own mean is known.

So a run spends at most its budget, as the server counts it (and at most one episode
more than its logged episodes show: the probe and the batch a refused call stopped).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from core.backends.registry import check_settings
from core.backends.spend import SpendMeter, attached, spending
from core.errors import BudgetReached, UserError
from core.experiment.finetune import (
    Budget,
    BudgetMeter,
    Estimate,
    arithmetic_estimate,
    episode_spend,
    needs_budget,
    probe,
)
from core.records import EpisodeRecord
from core.team.options import TeamOptions

PAID_WITHOUT_BUDGET = (
    "--backend openai off this machine may bill: give --budget-tokens N and/or "
    "--budget-calls N (a local --base-url such as http://127.0.0.1:8000/v1 needs none)."
)


def check_budget(opts: TeamOptions, budget: Budget, ray_address: str | None = None) -> None:
    """Refuse a paid endpoint without a budget, a budget below 1, and a budget on a Ray
    cluster (``ray_address``: its spend file lives on this machine) — one sentence each."""
    budget.validate()
    if needs_budget(opts) and not budget.given:
        raise UserError(PAID_WITHOUT_BUDGET)
    if ray_address is not None and budget.given and opts.backend != "sim":
        raise UserError(
            "a budget holds on this machine's Ray only (its spend file is local); leave out "
            "--ray-address, or the budget."
        )


@contextlib.contextmanager
def real_run(
    opts: TeamOptions,
    budget: Budget,
    episodes: int,
    say: Callable[[str], None],
    spent: tuple[int, int] = (0, 0),
    split: str = "train",
    policy: Any = None,
    probed: str | None = None,
    ray_address: str | None = None,
    in_flight: int | None = None,
) -> Iterator[BudgetMeter | None]:
    """The budget of a run of ``episodes`` episodes on ``opts``'s back-end (module
    docstring); ``spent`` = (tokens, calls) a resumed run spent before; ``say`` prints the
    estimate; ``policy`` (described by ``probed``) plays the probe episode on ``split``
    (None: the most talkative fixed topology). Yields the meter (None on the simulator
    without a budget). ``ray_address``: a sweep on a Ray cluster, which a budget cannot
    follow (its spend file lives on this machine). ``in_flight``: episodes the run plays at
    once (a training recipe's ``n_envs``; None: as ``--concurrency`` allows), which the
    estimate's wall time divides by."""
    check_budget(opts, budget, ray_address)
    if opts.backend == "sim":
        yield BudgetMeter(budget, *spent) if budget.given else None
        return
    # The checks the run makes first, made before the estimate: a mistake is one sentence.
    opts.validate()
    opts.code_sandbox()
    check_settings(opts)
    if not budget.given:
        # Nothing to size: an estimate by arithmetic, and not one call more than the run's.
        say(arithmetic_estimate(opts, episodes))
        with spending(None):
            yield None
        return
    cap = SpendMeter.create(budget.tokens, budget.calls, spent=spent)
    try:
        with spending(cap):
            _check_room(cap, budget)
            estimate = _probe(opts, episodes, split, policy, probed, in_flight)
            say(estimate.describe(budget))
            cap.expect(*estimate.prior())
            meter = BudgetMeter(budget, *spent, spend=cap, prior=estimate.prior())
            try:
                yield meter
            finally:
                meter.freeze()
    finally:
        cap.remove()


def episodes_that_fit(n: int, played: Sequence[EpisodeRecord]) -> int:
    """How many of the next ``n`` episodes fit what is left under the spend cap of the run
    this process plays for, at the mean cost of ``played`` (the run's episodes so far),
    else at the probe's (1 while neither is known); ``n`` without a cap. Raises
    :class:`~core.errors.BudgetReached` when not one fits: an evaluation then stops after
    its last whole batch instead of paying for a batch it cannot finish."""
    cap = attached()
    if cap is None:
        return n
    s = cap.read()
    if played:
        spent = [episode_spend(r) for r in played]
        per: tuple[float, float] | None = (
            sum(t for t, _ in spent) / len(spent),
            sum(c for _, c in spent) / len(spent),
        )
    else:
        per = s.episode
    if per is None:
        return min(n, 1)
    fit = n
    for name, limit, used, cost in (
        ("token", s.tokens_cap, s.tokens, per[0]), ("call", s.calls_cap, s.calls, per[1]),
    ):  # fmt: skip
        if limit is None or cost <= 0:
            continue
        fit = min(fit, int(max(limit - used, 0) // cost))
        if fit == 0:
            raise BudgetReached(
                f"stopped at budget: the {name} budget was reached: {used:,} of {limit:,} "
                f"{name}s spent, and an episode costs ~{cost:,.0f}"
            )
    return fit


def sweep_episodes(sweep: Any, train_episodes: int) -> int:
    """Episodes a sweep (:class:`core.experiment.sweep.SweepConfig`) plays: every trial's
    training and held-out episodes, and every fixed topology's held-out ones."""
    trials, fixed = sweep.counts()
    return trials * (train_episodes + sweep.eval_episodes) + fixed * sweep.eval_episodes


def probe_policy(opts: TeamOptions, init: Path | None) -> tuple[Any, str | None]:
    """What plays a fine-tune's probe episode: ``init``'s policy, greedy (None, None: the
    default, or the simulator, which needs no probe)."""
    if init is None or opts.backend == "sim":
        return None, None
    from core.experiment.evaluate import learned_policy

    return learned_policy(init, opts, "cpu"), f"the --init policy ({init.name}), greedy"


def _probe(
    opts: TeamOptions,
    episodes: int,
    split: str,
    policy: Any,
    probed: str | None,
    in_flight: int | None,
) -> Estimate:
    described = {"probed": probed} if probed else {}
    try:
        return probe(opts, episodes, split, policy, in_flight=in_flight, **described)
    except BudgetReached as err:
        raise BudgetReached(
            f"{err}, during the probe episode that estimates the run (nothing was logged): "
            "the budget does not cover one episode of this team; give a larger one."
        ) from err


def _check_room(cap: SpendMeter, budget: Budget) -> None:
    """A resumed run whose budget is already spent: one sentence, nothing sent."""
    s = cap.read()
    for name, limit, used in (("token", budget.tokens, s.tokens), ("call", budget.calls, s.calls)):
        if limit is not None and used >= limit:
            raise UserError(
                f"the run already spent {used:,} {name}s of its {limit:,}-{name} budget; "
                f"give a larger --budget-{name}s to go on."
            )
