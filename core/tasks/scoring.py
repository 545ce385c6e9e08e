"""The one scoring entry point: is ``answer`` right for ``task``? (docs/team.md, Scoring)

Every back-end's answers are scored here, through the task's checker
(:func:`core.tasks.checkers.check`; code is judged by :mod:`core.tasks.code_checker`),
with one bounded cache shared by the whole process: a team reads and re-states the same
answers many times, and running the same program through the sandbox again would only
cost time.

``run_code=False`` is for back-ends whose code answers are labels, not programs (the
synthetic society answers a code task with its canonical solution or a distractor
label): only the exact ground truth is right there.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from core.tasks.base import Task
from core.tasks.checkers import check

CACHE_SIZE = 8192
"""Scores remembered, least recently used first out."""

_cache: OrderedDict[tuple[str, str, str, str, bool], float] = OrderedDict()
_lock = threading.Lock()


def scoring_blocks(task: Task, run_code: bool = True) -> bool:
    """True when scoring ``task`` runs a program (slow, blocking): call it off the event loop."""
    return run_code and task.domain == "code"


def score(task: Task, answer: str | None, run_code: bool = True, sandbox: str = "auto") -> float:
    """1.0 when ``answer`` solves ``task``, else 0.0 (partial credit allowed); code runs in
    ``sandbox`` (:class:`core.sandbox.SandboxConfig` ``backend``)."""
    if not answer:
        return 0.0
    if answer == task.answer:
        return 1.0
    if task.domain == "code" and not run_code:
        return 0.0
    key = (task.benchmark, task.task_id, task.answer, answer, run_code)
    with _lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    value = float(check(task, answer, sandbox))
    with _lock:
        _cache[key] = value
        while len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)
    return value
