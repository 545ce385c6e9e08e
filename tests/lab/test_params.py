"""Query parameters are parsed strictly: a value or a reason, never a silent clamp."""

import re

import pytest

from lab import params
from tests.lab.conftest import ROOT


@pytest.mark.parametrize(
    ("parse", "raw", "reason"),
    [
        (params.whole(1, 3), "0", "outside 1–3"),
        (params.whole(1, 3), "99", "outside 1–3"),
        (params.whole(1, 3), "2.5", "not a whole number"),
        (params.whole(1, 3), "", "empty"),
        (params.whole(0, 2**62), "9" * 400, "longer than"),
        (params.number(0.0, 0.99), "nan", "not a finite number"),
        (params.number(0.0, 0.99), "inf", "not a finite number"),
        (params.number(0.0, 0.99), "1e400", "not a finite number"),
        (params.number(0.0, 0.99), "-0.5", "outside 0–0.99"),
        (params.number(0.0, 0.99), "abc", "not a number"),
        (
            params.one_of(["qmix", "full"], "policy"),
            "ring",
            "is not a policy (one of qmix, full)",
        ),
        # The sentence reads right whatever the page names the choice (issue 36: "not a
        # status of a run here here", "not a agent of this team", "one of none").
        (
            params.one_of([], "policy of this run"),
            "x",
            "is not a policy of this run (there is none)",
        ),
        (params.one_of([str(i) for i in range(20)], "run"), "x", "names no run in this database"),
        (
            params.some_of(range(4), "agent of this team"),
            "1,7",
            "names '7', not an agent of this team",
        ),
        (params.flag, "maybe", "not true or false"),
    ],
)
def test_a_bad_value_gives_its_reason(parse, raw, reason):
    with pytest.raises(params.BadParam, match=re.escape(reason)):
        parse(raw)


def test_a_reason_says_its_place_once():
    # Pages name the choice with its place ("status of a run here"): the sentence must not
    # add another "here" (issue 36 found "not a status of a run here here").
    with pytest.raises(params.BadParam) as caught:
        params.some_of(["running"], "status of a run here")("x")
    assert str(caught.value) == "names 'x', not a status of a run here"


def test_good_values_parse():
    assert params.whole(1, 3)(" 2 ") == 2
    assert params.number(0.0, 0.99)("0.8") == 0.8
    assert params.one_of({"free": True, "qmix": False})("free") is True
    assert params.some_of(range(4))("2,0,2") == [2, 0]
    assert params.flag("FALSE") is False
    assert params.text("NaN") == "NaN"  # a search for "NaN" is a search


def test_every_page_lists_its_parameters():
    pages = {p.stem for p in (ROOT / "views").glob("*.py") if p.name != "__init__.py"}
    assert set(params.PAGE_PARAMS) == pages
    assert params.shown("a`b " * 30).count("`") == 0 and len(params.shown("x" * 99)) == 40
