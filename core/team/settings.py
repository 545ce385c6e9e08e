"""The team's settings, each declared once: its flag, its range or choices and its one rule.

:class:`core.team.options.TeamOptions` (the CLI's flags and every run's ``config["team"]``),
:class:`core.team.runtime.RuntimeConfig` (how an episode is rewarded), the lab's job specs
(``lab.jobs.TeamSpec``) and the Train page's controls all check a value with :func:`check`
(numbers, :data:`SETTINGS`) or :func:`check_choice` (names, :data:`CHOICES`) and take a
control's range from here, so a value is accepted or refused by the same rule, with the
same sentence (a :class:`~core.errors.UserError`), wherever it comes from. Defaults are the
fields' own (``TeamOptions``); this module holds what a default cannot say.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from core.errors import UserError


@dataclass(frozen=True)
class Setting:
    """One numeric setting: ``low``/``high`` inclusive unless marked open."""

    flag: str
    """The command-line flag that sets it (the name every error uses)."""
    low: float
    """Smallest value accepted (excluded when ``low_open``)."""
    high: float
    """Largest value accepted (excluded when ``high_open``; ``inf``: no finite bound)."""
    integer: bool = False
    """Whole numbers only."""
    low_open: bool = False
    high_open: bool = False
    unit: str = ""
    """What the number counts, for the sentence (``seconds``, ``roles``)."""

    def accepts(self, value: float) -> bool:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        if self.integer and not float(value).is_integer():
            return False
        if not math.isfinite(value):
            return False
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return above and below

    def describe(self) -> str:
        """The range in words: ``a whole number between 1 and 64``, ``a number in [0, 1)``."""
        unit = f" of {self.unit}" if self.unit else ""
        if self.integer:
            return f"a whole number{unit} between {self.low:g} and {self.high:g}"
        if math.isinf(self.high):
            sign = ">" if self.low_open else ">="
            return f"a finite number{unit} {sign} {self.low:g}"
        left = "(" if self.low_open else "["
        right = ")" if self.high_open else "]"
        return f"a number{unit} in {left}{self.low:g}, {self.high:g}{right}"


MAX_ROUNDS = 64
"""More rounds than anyone studies; a guard against a typo such as ``--rounds 100000``."""
MAX_AGENTS = 64
MAX_WEIGHT = 1e6
"""Largest reward weight accepted (the penalty is at most a few units per episode; a
weight of 1e308 times a token penalty would overflow the reward to inf)."""

SETTINGS: dict[str, Setting] = {
    "rounds": Setting("--rounds", 1, MAX_ROUNDS, integer=True),
    "agents": Setting("--agents", 1, MAX_AGENTS, integer=True, unit="roles"),
    "token_weight": Setting("--token-weight", 0, MAX_WEIGHT),
    "accuracy_weight": Setting("--accuracy-weight", 0, MAX_WEIGHT),
    "token_budget": Setting("--token-budget", 0, math.inf, low_open=True),
    "fail_prob": Setting("--fail-prob", 0, 1, high_open=True),
    "concurrency": Setting("--concurrency", 1, 4096, integer=True),
    "max_tokens": Setting("--max-tokens", 1, 1_000_000, integer=True),
    "max_attempts": Setting("--max-attempts", 1, 100, integer=True),
    "timeout_s": Setting("--timeout", 0, 3600, low_open=True, unit="seconds"),
    "deadline_s": Setting("--deadline", 0, 86400, low_open=True, unit="seconds"),
}
"""Every numeric team setting, by its :class:`TeamOptions` field name (``agents`` is the
number of roles)."""


TOKEN_PENALTIES = ("capped", "linear")
IDLE_RULES = ("keep", "call")
"""What an idle agent does (docs/team.md, "Idle agents"): ``keep`` its answer without a call,
or be ``call``-ed to re-solve alone (the behaviour before the rule existed)."""
PASS_THROUGH_RULES = ("off", "unanimous")
"""When the decision agent returns the team's answer without a call (docs/team.md, "Consensus
pass-through"): ``off`` — only when one final answer exists (the paper); ``unanimous`` — also
when every final answer it would read agrees."""
CHOICES: dict[str, tuple[str, tuple[str, ...]]] = {
    "token_penalty": ("--token-penalty", TOKEN_PENALTIES),
    "idle": ("--idle", IDLE_RULES),
    "pass_through": ("--pass-through", PASS_THROUGH_RULES),
}
"""Every team setting that is one of a few names: its flag and its choices."""


def check_choice(name: str, value: str) -> None:
    """Raise :class:`UserError` (one sentence naming the flag) unless ``value`` is one of
    setting ``name``'s choices."""
    flag, choices = CHOICES[name]
    if value not in choices:
        raise UserError(f"{flag} must be one of {', '.join(choices)}, not {value!r}.")


def check(name: str, value: float | None) -> None:
    """Raise :class:`UserError` (one sentence naming the flag) unless ``value`` is in the
    range of setting ``name``; ``None`` (the setting's "not given") always passes."""
    if value is None:
        return
    setting = SETTINGS[name]
    if not setting.accepts(value):
        raise UserError(f"{setting.flag} must be {setting.describe()}, not {value}.")
