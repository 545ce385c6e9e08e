"""Compare draws a sweep's learned trials against its fixed topologies (AppTest, real store)."""

from __future__ import annotations

import json
import os
import time

import pytest

from core.store.engine import sweep_status_dir
from core.store.queries import list_sweeps, sweep_points
from core.store.synthetic import synthetic_episode
from core.store.writer import RunLogger
from lab.palette import policy_color
from tests.lab.test_pages import _chart, _open, _table

SWEEP = "sweep-20260101-120000-beef"


KNOB = {"prune_ratio": 0.3}
"""The knob the sweep below swept AgentPrune at."""

POINTS = [(0.1, 0, "qmix"), (0.1, 1, "qmix"), (1.0, 0, "qmix"), (0.1, 0, "agentprune"),
          (1.0, 0, "gptswarm"), (None, None, "full"), (None, None, "single")]  # fmt: skip
"""(token weight, seed, policy) of each point: Agent Q-Mix at two token weights and two
seeds, AgentPrune (knob swept) and GPTSwarm at one, two fixed topologies."""


def _log_sweep(
    db, sweep_id: str = SWEEP, rules: tuple[str | None, ...] = (None,), points=POINTS
) -> dict[tuple, str]:
    """Sweep-shaped runs as core/experiment/sweep.py logs them: per trial a train run and an
    eval run with config["sweep"] = {id, token_weight, seed, method, knob} (a trial's eval
    run describes its policy in config["policies"]); per fixed topology an eval run with
    token_weight and seed null; under each decision rule of ``rules``, named in
    config["sweep"] and config["team"] (None: a sweep stored before the rule existed)."""
    ids = {}
    for r, rule in enumerate(rules):
        named = {} if rule is None else {"pass_through": rule}
        for p, (w, seed, policy) in enumerate(points):
            knob = KNOB if policy == "agentprune" else {}
            key = {"id": sweep_id, "token_weight": w, "seed": seed, "method": policy,
                   "knob": knob, **named}  # fmt: skip
            tag = {"sweep": key, "team": named}
            if w is not None:
                with RunLogger(db, "train", tag, policy=policy, benchmark="mixed") as log:
                    log.log_episode(synthetic_episode(9000 + p, policy="env"))
                info = {"family": "learned", "method": policy, "token_weight": w, "knob": knob}
                tag = {**tag, "policies": {policy: info}}
            with RunLogger(db, "eval", tag, policy=policy, benchmark="mixed", seed=0) as log:
                play = (synthetic_episode(1000 * r + 100 * p + k, policy=policy) for k in range(6))
                log.log_episodes(play)
                ids[(w, seed, policy, *([rule] if rule else []))] = log.run_id
    return ids


@pytest.fixture
def sweep_db(own_db):
    return own_db, _log_sweep(own_db)


def test_sweep_queries_read_what_the_sweep_stores(sweep_db):
    db, ids = sweep_db
    sweeps = list_sweeps(db)
    assert sweeps["sweep_id"].tolist() == [SWEEP]
    row = sweeps.iloc[0]
    assert (row["trials"], row["fixed"]) == (5, 2)
    assert list(row["token_weights"]) == [0.1, 1.0] and list(row["seeds"]) == [0, 1]
    pts = sweep_points(db, SWEEP)
    assert set(pts["run_id"]) == set(ids.values())  # eval runs only, never the train runs
    assert (pts["episodes"] == 6).all()
    fixed = pts[pts["token_weight"].isna()]
    assert sorted(fixed["policy"]) == ["full", "single"] and fixed["seed"].isna().all()


def test_compare_draws_the_sweep_front_against_the_fixed_topologies(sweep_db):
    db, ids = sweep_db
    at = _open("views/compare.py")
    assert at.selectbox(key="compare_sweep").value == SWEEP
    assert at.query_params["sweep"] in (SWEEP, [SWEEP])
    spec = _chart(at, "compare_sweep_chart")
    names = [t["name"] for t in spec["data"]]
    assert names == ["qmix · token weight 0.1", "qmix · token weight 1",
                     "gptswarm · token weight 1", "agentprune prune_ratio=0.3 · token weight 0.1",
                     "full", "single", "front"]  # fmt: skip
    traces = dict(zip(names, spec["data"], strict=True))
    assert sorted(traces["qmix · token weight 0.1"]["hovertext"]) == [
        "w=0.1 · seed 0", "w=0.1 · seed 1"
    ]  # fmt: skip
    assert "error_y" in spec["data"][0] and "error_x" in traces["full"]
    # Each learned method in its own colour: no method's points in qmix's.
    colors = {n: t["marker"]["color"] for n, t in traces.items() if t["mode"] == "markers"}
    qmix = {c for n, c in colors.items() if n.startswith("qmix")}
    assert traces["gptswarm · token weight 1"]["marker"]["color"] == policy_color("gptswarm")
    prune = traces["agentprune prune_ratio=0.3 · token weight 0.1"]
    assert prune["marker"]["color"] == policy_color("agentprune")
    assert not qmix & {c for n, c in colors.items() if not n.startswith("qmix")}
    # Its hover names the family, the token weight it was trained at and its knob.
    assert [c[3] for c in prune["customdata"]] == [
        "agentprune (learned) · trained at token weight 0.1 · prune_ratio=0.3"
    ]
    assert "customdata[3]" in prune["hovertemplate"]
    labels = {"w=0.1 · seed 0", "w=0.1 · seed 1", "w=1 · seed 0", "full", "single",
              "agentprune prune_ratio=0.3 · w=0.1 · seed 0", "gptswarm · w=1 · seed 0"}  # fmt: skip
    front = {a["text"] for a in spec["layout"]["annotations"]}
    assert front and front <= labels
    table = _table(at, "label", "on_front")
    assert set(table["label"]) == labels
    assert table.set_index("label").loc["gptswarm · w=1 · seed 0", "method"] == "gptswarm"
    assert (table["episodes"] == 6).all()


def test_a_sweep_of_two_pass_through_rules_draws_a_front_for_each(own_db):
    """``sweep --pass-through off,unanimous``: each rule's trials and fixed topologies are a
    panel of their own, each with its own front; the table names every point's rule."""
    qmix_and_fixed = [p for p in POINTS if p[2] in ("qmix", "full", "single")]
    ids = _log_sweep(own_db, rules=("off", "unanimous"), points=qmix_and_fixed)
    (row,) = (r for _, r in list_sweeps(own_db).iterrows())
    assert list(row["pass_through"]) == ["off", "unanimous"] and row["fixed"] == 4
    pts = sweep_points(own_db, SWEEP)
    assert sorted(pts["pass_through"]) == ["off"] * 5 + ["unanimous"] * 5
    at = _open("views/compare.py")
    assert "pass-through off, unanimous" in at.selectbox(key="compare_sweep").format_func(SWEEP)
    spec = _chart(at, "compare_sweep_chart")
    titles = [a["text"] for a in spec["layout"]["annotations"] if a.get("xref") == "paper"]
    assert len(titles) == 2 and titles[0].endswith("pass-through: off")
    assert titles[1].endswith("pass-through: unanimous")
    # Every trace sits in its rule's panel: the unanimous points only in the second.
    runs: dict[str, set] = {}
    for trace in spec["data"]:
        points = trace.get("customdata") or []  # [run_id, policy, episodes] per point
        runs.setdefault(trace.get("xaxis", "x"), set()).update(c[0] for c in points)
    assert runs == {
        "x": {v for k, v in ids.items() if k[-1] == "off"},
        "x2": {v for k, v in ids.items() if k[-1] == "unanimous"},
    }
    # A front in each panel, its points named there.
    fronts = [a for a in spec["layout"]["annotations"] if a.get("xref") != "paper"]
    assert {a["xref"] for a in fronts} == {"x", "x2"}
    table = _table(at, "label", "pass_through", "on_front")
    assert sorted(table["pass_through"]) == ["off"] * 5 + ["unanimous"] * 5
    for rule in ("off", "unanimous"):
        assert table[(table["pass_through"] == rule) & table["on_front"]].shape[0] >= 1
    # A run picker names the rule of a sweep's run played under the pass-through; it offers
    # the runs drawn above, so the trial's evaluation and not its training run (training
    # episodes are not included by default).
    runs_listed = at.selectbox(key="compare_run_a").options
    assert sum("w=0.1 · seed 0 · pass-through unanimous" in o for o in runs_listed) == 1


def test_a_sweep_link_opens_that_sweep(own_db):
    _log_sweep(own_db)
    other = "sweep-20260202-120000-cafe"
    _log_sweep(own_db, other)
    at = _open("views/compare.py", sweep=SWEEP)
    assert at.selectbox(key="compare_sweep").value == SWEEP
    at = _open("views/compare.py")
    assert at.selectbox(key="compare_sweep").value == other  # the newest by default


def _say(db, sweep_id: str, pid: int, **status) -> None:
    """What core/experiment/sweep.py's driver writes while it runs."""
    folder = sweep_status_dir(db)
    folder.mkdir(exist_ok=True)
    body = {"sweep_id": sweep_id, "benchmark": "mixed", "started_at": time.time(),
            "token_weights": [0.1, 1.0], "seeds": [0, 1], "topologies": ["full", "single"],
            "eval_episodes": 6, "total": 4, "done": 0, "running": 2, "failed": 0,
            "state": "running", "error": "", "pid": pid, "updated_at": time.time(), **status}  # fmt: skip
    (folder / f"{sweep_id}.json").write_text(json.dumps(body))


def test_a_sweep_from_the_command_line_shows_live(own_db):
    # Started, no trial in the store yet: listed first, with how far it is.
    _say(own_db, SWEEP, os.getpid())
    at = _open("views/compare.py")
    assert at.selectbox(key="compare_sweep").value == SWEEP
    bars = [p.proto.text for p in at.get("progress")]
    assert any("Running: 0 of 4 trials done · 2 running" in t for t in bars), bars
    assert any("first trial is still training" in i.value for i in at.info)
    # Trials land (the driver logs them as they finish): the front so far is drawn.
    _log_sweep(own_db)
    _say(own_db, SWEEP, os.getpid(), done=3, running=0, failed=1)
    at = _open("views/compare.py", sweep=SWEEP)
    assert any("3 of 4 trials done · 1 failed" in p.proto.text for p in at.get("progress"))
    assert _chart(at, "compare_sweep_chart")["layout"]["annotations"]
    # A sweep whose process is gone says so instead of "running" forever.
    _say(own_db, "sweep-20260303-000000-dead", 2**22 + 11, started_at=time.time() + 5)
    at = _open("views/compare.py", sweep="sweep-20260303-000000-dead")
    assert any("stopped" in p.proto.text for p in at.get("progress"))
