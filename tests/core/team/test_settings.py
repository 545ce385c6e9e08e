"""One declaration per team setting: the CLI's options, the runtime's config and the lab's
job spec accept and refuse a value by the same rule, with the same sentence."""

from __future__ import annotations

import math

import pytest

from core.errors import UserError
from core.team.options import TeamOptions
from core.team.runtime import RuntimeConfig
from core.team.settings import CHOICES, SETTINGS, check
from lab.jobs import TeamSpec


@pytest.mark.parametrize(
    ("field", "value"),
    [("rounds", 0), ("rounds", 65), ("token_weight", -0.1), ("token_weight", math.inf)],
)
def test_every_home_of_a_setting_refuses_it_with_the_same_sentence(field, value):
    runtime_field = "n_rounds" if field == "rounds" else field
    sentences = []
    for build in (
        lambda: TeamOptions(**{field: value}).validate(),
        lambda: RuntimeConfig(**{runtime_field: value}).validate(),
        lambda: TeamSpec(**{field: value}).validate(),
    ):
        with pytest.raises(UserError) as caught:
            build()
        sentences.append(str(caught.value))
    assert len(set(sentences)) == 1
    assert sentences[0].startswith(SETTINGS[field].flag + " must be ")


def test_the_lab_accepts_every_round_count_the_core_does():
    TeamSpec(rounds=int(SETTINGS["rounds"].high)).validate()  # was capped at 10 by the lab
    with pytest.raises(UserError, match="--agents must be a whole number of roles"):
        TeamSpec(roles=()).validate()


@pytest.mark.parametrize(
    ("name", "good", "bad"),
    [
        ("fail_prob", 0.0, 1.0),
        ("token_budget", 1e-9, 0.0),
        ("timeout_s", 3600, 0),
        ("concurrency", 4096, 2.5),
        ("max_tokens", 1, True),
    ],
)
def test_bounds_open_and_closed(name, good, bad):
    check(name, good)
    check(name, None)  # "not given" passes: the default applies
    with pytest.raises(UserError, match=SETTINGS[name].flag):
        check(name, bad)


@pytest.mark.parametrize("field", ["token_penalty", "idle", "pass_through"])
def test_a_bad_choice_is_refused_with_the_same_sentence_by_options_and_runtime(field):
    sentences = []
    for build in (
        lambda: TeamOptions(**{field: "nope"}).validate(),
        lambda: RuntimeConfig(**{field: "nope"}).validate(),
    ):
        with pytest.raises(UserError) as caught:
            build()
        sentences.append(str(caught.value))
    flag, choices = CHOICES[field]
    assert sentences == [f"{flag} must be one of {', '.join(choices)}, not 'nope'."] * 2
