"""Errors a user can cause. The CLI turns them into one sentence and exit code 2."""


class UserError(Exception):
    """A mistake in the user's input (flag, file, database): one clear sentence, exit 2."""


class StoreBusy(RuntimeError):
    """The database stayed locked by another process for longer than the allowed wait."""


class DiskFull(UserError):
    """A write failed because the disk (or the user's quota) is full: the run stops cleanly,
    what it stored stays consistent, and it can be resumed once there is room."""


class EndpointGone(UserError):
    """The server a run's calls go to is gone for good mid-run (the local model server's
    process exited): the run stops cleanly after the round, what it stored stays
    consistent (the batch in flight is not logged), and it can be resumed."""


class BudgetReached(EndpointGone):
    """The run's spend cap refused a call (:mod:`core.backends.spend`): no request leaves
    past the budget, and the run stops as when its server is gone — cleanly after the
    round, the batch in flight not logged, resumable."""
