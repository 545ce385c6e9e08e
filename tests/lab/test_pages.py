"""Every page under streamlit.testing.v1.AppTest on a real seeded DuckDB store."""

from __future__ import annotations

import base64
import io
import json
import sys
import time
import zipfile
from pathlib import Path
from urllib.parse import parse_qsl

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from core.store.queries import count_episodes, list_runs, load_episode
from core.store.synthetic import synthetic_episode
from core.store.writer import RunLogger
from lab import asked, data
from lab.jobs import JobManager, workdir
from lab.palette import policy_color
from tests.lab.conftest import ROOT, seed_store

APP = str(ROOT / "app.py")


def _open(page: str | None, **query: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    for name, value in query.items():
        at.query_params[name] = value
    if page:
        at.switch_page(page)
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def _keys(at: AppTest, kind: str) -> set[str]:
    return {w.key for w in getattr(at, kind)}


def _chart(at: AppTest, key: str) -> dict:
    """The Plotly figure a chart element sends to the browser (its JSON spec)."""
    for el in at.get("plotly_chart"):
        if el.key == key:
            return json.loads(el.proto.spec)
    raise KeyError(key)


def _table(at: AppTest, *columns: str) -> pd.DataFrame:
    """The first table on the page with these columns (AppTest keeps no dataframe keys)."""
    for frame in at.dataframe:
        if set(columns) <= set(frame.value.columns):
            return frame.value
    raise KeyError(columns)


def _values(v) -> list:
    """A Plotly array from a figure's JSON: a list, or a typed array (``bdata``, base64)."""
    if isinstance(v, dict) and "bdata" in v:
        return np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v["dtype"])).tolist()
    return list(v)


def _edges(spec: dict, trace: int) -> list[tuple[int, int]]:
    seen = []
    for c in spec["data"][trace].get("customdata") or []:
        if c is not None and (c[0], c[1]) not in seen:
            seen.append((c[0], c[1]))
    return seen


def test_home(lab_env):
    at = _open(None)
    assert at.title[0].value == "Agent Q-Mix Lab"
    assert [m.value for m in at.metric][:2] == ["5", "60"]
    policies = at.dataframe[0].value["policy"].tolist()
    assert data.TRAINING_LABEL in policies and "env" not in policies
    # The label fits every method's training (AgentPrune samples graphs: it has no ε).
    assert "ε" not in data.TRAINING_LABEL and "exploring" in data.TRAINING_LABEL


def test_replay_one_control_moves_every_panel_together(lab_env):
    db, ids = lab_env
    at = _open("views/replay.py", run=ids["train"])
    assert {"replay_run", "replay_episode", "replay_policy", "replay_correct"} <= _keys(
        at, "selectbox"
    )
    assert {"replay_play", "replay_prev", "replay_next"} <= _keys(at, "button")
    # Where the answers came from and where generated code ran (the sim runs none).
    assert any(c.value.startswith("back-end sim · model ") for c in at.caption)
    assert any(c.value.endswith("· no generated code ran") for c in at.caption)
    index = at.selectbox(key="replay_episode").value
    record = load_episode(db, ids["train"], index).record
    for r, rnd in enumerate(record.rounds):
        if r:
            at.slider(key="replay_round").set_value(r + 1).run()  # rounds count from 1
        assert not at.exception
        assert at.slider(key="replay_round").value == r + 1
        assert any(f"Round {r + 1} of 3" in m.value for m in at.markdown)
        graph = _chart(at, "replay_graph")
        # The graph has no Play button, slider or frames of its own: it shows round r only.
        assert "frames" not in graph and not graph["layout"].get("updatemenus")
        assert not graph["layout"].get("sliders") and graph["layout"]["meta"]["round"] == r
        assert _edges(graph, 0) == [tuple(e) for e in rnd.edges]
        q = _chart(at, "replay_q")
        steps = sorted(rnd.steps, key=lambda s: s.agent)
        assert [_values(bar["y"]) for bar in q["data"][:6]] == [
            [s.q_values[a] for s in steps] for a in range(6)
        ]
        table = _table(at, "agent", "how", "read from")
        assert table["action"].tolist()[: len(steps)] == [
            ["solo_process", "broadcast_all", "selective_query", "aggregate_refine",
             "execute_verify", "debate_check"][s.action]
            for s in steps
        ]  # fmt: skip
        tokens = _chart(at, "replay_tokens")
        agent0 = tokens["data"][0]
        assert [o == 1.0 for o in _values(agent0["marker"]["opacity"])] == [
            k == r for k in range(len(record.rounds))
        ]
        # The token chart adds up to the header's total (the decision agent included).
        bars = [t for t in tokens["data"] if t["type"] == "bar"]
        assert sum(sum(_values(t["y"])) for t in bars) == record.tokens
        assert any(f"**{record.tokens:,} tokens**" in c.value for c in at.caption)
        assert at.query_params["round"] in ([str(r + 1)], str(r + 1))
        # What each agent was asked: a society has no real prompt, so it is rebuilt.
        # (These synthetic episodes give every step a call, the decision agent none.)
        assert sum(e.label == "What it was asked" for e in at.expander) == len(record.roles)
        no_call = [c for c in at.caption if "decision agent made no call" in c.value]
        assert len(no_call) == (r == len(record.rounds) - 1)
        assert any(c.value.startswith("Problem:\n" + record.question) for c in at.code)
        assert any(c.value.startswith(asked.REBUILT) for c in at.caption)
        assert any(c.value.startswith("call: ") for c in at.caption)
    # The last round's table lists the decision agent, as the header counts its tokens.
    assert _table(at, "agent", "how", "read from")["agent"].tolist()[-1] == "D decision"
    # No step past the last round (or before the first) is offered.
    assert at.button(key="replay_next").disabled and not at.button(key="replay_prev").disabled
    at.button(key="replay_prev").click().run()
    assert at.slider(key="replay_round").value == 2
    assert not at.button(key="replay_next").disabled
    # Play's help states the pause the timer really waits, after a round is drawn (it
    # promised one round a second while they came every 1.5-1.9 s).
    assert "after this one is drawn" in at.button(key="replay_play").help
    assert any("Round 2 of 3" in m.value for m in at.markdown)


def test_a_link_opens_that_episode_at_that_round(lab_env):
    db, ids = lab_env
    at = _open("views/replay.py", run=ids["chain"], episode="7", round="3")
    assert at.selectbox(key="replay_run").value == ids["chain"]
    assert at.selectbox(key="replay_episode").value == 7
    assert at.slider(key="replay_round").value == 3
    assert any("Round 3 of 3" in m.value for m in at.markdown)
    record = load_episode(db, ids["chain"], 7).record
    assert _edges(_chart(at, "replay_graph"), 0) == [tuple(e) for e in record.rounds[2].edges]
    # "Compare with another run" opens this episode as side A of the side-by-side view.
    (compare,) = [el.proto for el in at.get("page_link") if el.proto.label.startswith("Compare")]
    assert compare.page == "sidebyside" and dict(parse_qsl(compare.query_string)) == {
        "a": ids["chain"], "pa": "chain", "task": record.task_id, "ea": "7",
    } | ({"healthy": "false"} if record.failures else {})  # fmt: skip
    # A bad link is named, not a crash.
    at = _open("views/replay.py", run="no-such-run", episode="3")
    assert any("does not exist" in w.value for w in at.warning)


def test_switching_run_resets_filters_and_offers_only_its_policies(lab_env):
    _, ids = lab_env
    at = _open("views/replay.py", run=ids["full"])
    assert at.selectbox(key="replay_policy").options == ["any", "full"]
    at.selectbox(key="replay_correct").set_value(False).run()
    assert all(" · wrong · " in o for o in at.selectbox(key="replay_episode").options)
    at.text_input(key="replay_search").input("TASK-").run()  # case-insensitive
    assert at.selectbox(key="replay_episode").options
    at.selectbox(key="replay_run").set_value(ids["train"]).run()
    assert not at.exception
    assert at.selectbox(key="replay_correct").value is None
    assert at.text_input(key="replay_search").value == ""
    assert at.selectbox(key="replay_policy").options == ["any", data.TRAINING_LABEL]
    assert len(at.selectbox(key="replay_episode").options) == 12


def test_episodes_are_searchable_and_sortable(lab_env):
    db, ids = lab_env
    at = _open("views/replay.py", run=ids["qmix"])
    episodes = data.episodes.__wrapped__(db, data.Listing(ids["qmix"]), limit=50)
    task = episodes.iloc[5]["task_id"]
    at.text_input(key="replay_search").input(task).run()
    options = at.selectbox(key="replay_episode").options
    assert options and all(f" · {task} · " in o for o in options)
    at.text_input(key="replay_search").input("").run()
    at.selectbox(key="replay_order").set_value("tokens, most first").run()
    shown = [int(o.split(" · ")[0][1:]) for o in at.selectbox(key="replay_episode").options]
    by_tokens = episodes.sort_values(["tokens", "episode"], ascending=[False, True])
    assert shown == by_tokens["episode"].tolist()
    assert at.query_params["sort"] in ("tokens, most first", ["tokens, most first"])


def test_a_wrong_answer_shows_no_up_arrow(lab_env):
    db, ids = lab_env
    wrong = data.episodes.__wrapped__(db, data.Listing(ids["qmix"], correct=False), limit=1).iloc[0]
    at = _open("views/replay.py", run=ids["qmix"], episode=str(int(wrong["episode"])))
    answer = next(m for m in at.metric if m.label == "Team answer")
    assert not answer.proto.delta  # no delta, so no arrow
    assert any(":red-badge[" in m.value and "wrong" in m.value for m in at.markdown)


def test_train_page_watches_overlays_and_shows_the_configuration(lab_env):
    _, ids = lab_env
    at = _open("views/train.py")
    assert {"train_agents", "train_rounds", "train_episodes", "train_seed"} <= _keys(
        at, "number_input"
    )
    assert {"train_token_weight", "train_fail_prob", "train_smoothing"} <= _keys(at, "slider")
    assert at.multiselect(key="train_watch_runs").value == [ids["train"]]
    status = _table(at, "status", "episodes", "mean_reward")
    assert status["status"].tolist() == ["finished"] and status["episodes"].tolist() == [12]
    loss = _chart(at, "train_curve_loss")
    smooth = _values([t for t in loss["data"] if "smoothed" in t["name"]][0]["y"])
    assert smooth[0] == pytest.approx(1.0)  # debiased EMA starts at the first value
    assert smooth[-1] > 1 / 12  # and lags behind the falling raw loss
    assert at.json, "each watched run shows its full configuration"
    # Its header states no count the live table above could contradict (it said
    # "running · 0 episodes" beside the table's 160).
    assert [e.label for e in at.expander] == [f"{ids['train']} · configuration"]


def test_train_curves_colour_each_run_by_what_it_learns(own_db):
    # A learned-topology method's training run, as core/experiment/methods.py logs it.
    config = {
        "team": {"token_weight": 0.3},
        "method": {"name": "agentdropout", "config": {"edge_dropout": 0.2, "lr": 0.1}},
    }
    with RunLogger(own_db, "train", config, policy="agentdropout", benchmark="mixed") as log:
        log.log_episodes(synthetic_episode(7000 + k, policy="env") for k in range(4))
        log.log_metrics([{"step": k, "episode": k, "loss": 1.0} for k in range(4)])
        method_run = log.run_id
    qmix_run = list_runs(own_db, kind="train").query("policy == 'qmix'")["id"].iloc[0]
    at = _open("views/train.py", runs=f"{method_run},{qmix_run}")
    status = _table(at, "learns", "status").set_index("id")
    assert status.loc[method_run, "learns"] == "agentdropout w=0.3 edge_dropout=0.2"
    colors = {t["name"]: t["line"]["color"] for t in _chart(at, "train_curve_reward")["data"]}
    mine = f"{data.short_run(method_run)} · agentdropout w=0.3 edge_dropout=0.2"
    assert colors[f"{mine} · raw"] == policy_color("agentdropout")
    assert colors[f"{data.short_run(qmix_run)} · qmix · raw"] == policy_color("qmix")
    # Alone, the method's run has no ε or Q_tot: the page says why, not two empty axes.
    at = _open("views/train.py", runs=method_run)
    said = [i.value for i in at.info if i.value.startswith("No ")]
    assert len(said) == 2 and all("agentdropout learn without it" in v for v in said), said


def test_a_job_started_elsewhere_can_be_stopped_here(own_db):
    # Another lab server (its own JobManager over the same registry) started this job.
    other = JobManager(workdir(own_db) / "jobs")
    job = other.start(
        "train from another session", [sys.executable, "-c", "import time; time.sleep(120)"],
        kind="train",
    )  # fmt: skip
    try:
        at = _open("views/train.py")
        stop = at.button(key=f"train_stop_{job.id}")
        assert not stop.disabled
        stop.click().run()
        assert not at.exception
        job.wait(30)
        assert job.status == "stopped"
    finally:
        job.stop(grace_s=1)


def test_compare_keeps_runs_apart_leaves_training_out_and_opens_a_points_episodes(lab_env):
    _, ids = lab_env
    at = _open("views/compare.py")
    assert {"compare_benchmark", "compare_policy", "compare_run_a", "compare_run_b",
            "compare_point"} <= _keys(at, "selectbox")  # fmt: skip
    table = _table(at, "label", "accuracy_ci")
    assert not any(data.TRAINING_LABEL in label for label in table["label"])
    assert {"episodes", "accuracy_ci", "reward_ci"} <= set(table.columns)
    pareto = _chart(at, "compare_pareto")
    assert all("error_y" in t for t in pareto["data"] if t["mode"] == "markers+text")
    # The two runs side by side follow the same toggles: no training run by default.
    offered = at.selectbox(key="compare_run_a").options
    assert not any(ids["train"] in o for o in offered) and len(offered) == 4
    assert ids["train"] not in (at.selectbox(key="compare_run_a").value,
                                at.selectbox(key="compare_run_b").value)  # fmt: skip
    at.toggle(key="compare_training").set_value(True).run()
    table = _table(at, "label", "accuracy_ci")
    assert any(data.TRAINING_LABEL in label for label in table["label"])
    assert any(ids["train"] in o for o in at.selectbox(key="compare_run_a").options)
    # A point (here from the URL, as a click puts it there) lists its episodes with links.
    at = _open("views/compare.py", point=f"{ids['chain']}:chain", healthy="false")
    episodes = _table(at, "replay", "task_id")
    assert len(episodes) == 12
    assert episodes["replay"].iloc[3] == f"/replay?run={ids['chain']}&episode=3"


def test_compare_colours_learned_methods_by_method_and_says_what_each_point_is(own_db):
    # A compare run as `agentqmix compare --checkpoint ...` logs one: two G-Designer
    # checkpoints (labels that say what differs), AgentPrune and a fixed topology, each
    # described in config["policies"].
    gd = [f"gdesigner w=0.1 sparsity_weight=0.01 #{k}" for k in (1, 2)]
    policies = {
        gd[0]: {"family": "learned", "method": "gdesigner", "token_weight": 0.1,
                "knob": {"sparsity_weight": 0.01}},
        gd[1]: {"family": "learned", "method": "gdesigner", "token_weight": 0.1,
                "knob": {"sparsity_weight": 0.01}},
        "agentprune": {"family": "learned", "method": "agentprune", "token_weight": 0.3,
                       "knob": {"prune_ratio": 0.5}},
        "star": {"family": "fixed", "method": "star", "token_weight": None, "knob": {}},
    }  # fmt: skip
    with RunLogger(own_db, "compare", {"policies": policies}, policy="compare",
                   benchmark="mixed") as log:  # fmt: skip
        for p, name in enumerate(policies):
            log.log_episodes(synthetic_episode(5000 + 10 * p + k, policy=name) for k in range(4))
        run = log.run_id
    at = _open("views/compare.py")
    traces = {t["name"]: t for t in _chart(at, "compare_pareto")["data"]}
    assert [traces[n]["marker"]["color"] for n in gd] == [policy_color("gdesigner")] * 2
    assert traces[gd[0]]["marker"]["symbol"] != traces[gd[1]]["marker"]["symbol"]
    prune = traces["agentprune"]
    assert prune["marker"]["color"] == policy_color("agentprune") != policy_color("qmix")
    assert [c[:2] for c in prune["customdata"]] == [[run, "agentprune"]]
    assert prune["customdata"][0][3] == (
        "agentprune (learned) · trained at token weight 0.3 · prune_ratio=0.5"
    )
    assert traces["star"]["customdata"][0][3] == "star (fixed topology)"
    # The seeded store's runs stored no description: named by their policy, as before.
    assert traces["qmix"]["marker"]["color"] == policy_color("qmix")
    assert traces["qmix"]["customdata"][0][3] == "qmix (learned)"
    table = _table(at, "label", "family", "trained_at").set_index("label")
    row = table.loc[f"agentprune · {data.short_run(run)}"]
    assert (row["family"], row["method"], row["trained_at"], row["knob_text"]) == (
        "learned", "agentprune", 0.3, "prune_ratio=0.5"
    )  # fmt: skip
    assert table.loc[f"star · {data.short_run(run)}", "family"] == "fixed"


def test_ctde_labels_sliders_names_the_crashed_agent_and_shows_non_monotonic_failure(lab_env):
    at = _open("views/ctde.py")
    sliders = [s for s in at.slider if s.key.startswith("ctde_q_")]
    assert len(sliders) == 18
    assert sliders[1].label == "agent 0 · broadcast_all"
    assert at.success, "greedy choices should reach the joint argmax"
    at.slider(key=next(s.key for s in at.slider if s.key.endswith("_0_0"))).set_value(3.0).run()
    assert at.success and not at.exception
    at.selectbox(key="ctde_state").set_value("multiple choice, one agent crashed").run()
    assert any("Agent 2 has crashed" in w.value for w in at.warning)
    crashed = [s for s in at.slider if s.key.startswith("ctde_q_multiple") and "_2_" in s.key]
    assert [s.disabled for s in crashed] == [False] + [True] * 5
    at.toggle(key="ctde_free").set_value(True).run()
    assert any("miss the joint argmax" in e.value for e in at.error)
    assert at.query_params["mixer"] in ("free", ["free"])
    # The known limit, linked as a teaching example: the climbing game's payoffs.
    tables = [d.value for d in at.dataframe if list(d.value.columns) == ["a0", "a1", "a2"]]
    assert [t.values.tolist() for t in tables] == [[[11, -30, 0], [-30, 7, 6], [0, 0, 5]]]
    assert any("climbing_game" in m.value for m in at.markdown)


def test_failure_lab_renders_and_restores_from_its_url(lab_env):
    _, ids = lab_env
    at = _open("views/failure_lab.py")
    assert {"fail_run", "fail_episode", "fail_policy", "fail_mode"} <= _keys(at, "selectbox")
    assert at.multiselect(key="fail_agents").value == [1]
    assert at.button(key="fail_run_now")
    at = _open(
        "views/failure_lab.py", run=ids["full"], episode="4", policy="fixed · ring",
        agents="0,2", mode="byzantine", **{"from": "1"},
    )  # fmt: skip
    assert at.selectbox(key="fail_run").value == ids["full"]
    assert at.selectbox(key="fail_episode").value == 4
    assert at.selectbox(key="fail_policy").value == "fixed · ring"
    assert at.multiselect(key="fail_agents").value == [0, 2]
    assert at.selectbox(key="fail_mode").value == "byzantine"
    assert at.number_input(key="fail_from_round").value == 1


@pytest.mark.parametrize("broken", ["empty", "not_a_db"])
def test_friendly_messages_for_a_bad_database(tmp_path, monkeypatch, broken):
    db = tmp_path / "x.duckdb"
    if broken == "not_a_db":
        db.write_text("this is not a database")
    monkeypatch.setenv("AGENTQMIX_DB", str(db))
    monkeypatch.setenv("AGENTQMIX_LAB_DEMO", "0")
    for page in ("views/replay.py", "views/compare.py", "views/runs.py", "views/failure_lab.py"):
        at = _open(page)
        if broken == "empty":
            assert any("empty" in i.value for i in at.info)
        else:
            assert any("not a DuckDB database" in e.value for e in at.error)


def _episode_counts(db: Path) -> dict[str, int]:
    runs = list_runs(db)
    return dict(zip(runs["id"], runs["episodes"], strict=True))


def test_deleting_one_run_never_removes_another(own_db, seeded_db):
    ids = seeded_db[1]
    before = _episode_counts(own_db)
    at = _open("views/runs.py")
    at.selectbox(key="runs_pick").set_value(ids["chain"]).run()
    delete = at.button(key="runs_delete")
    assert delete.disabled, "nothing typed: nothing to delete"
    # The empty box does not look filled in (its placeholder was the run id itself).
    assert at.text_input(key=f"runs_confirm_{ids['chain']}").placeholder != ids["chain"]
    at.text_input(key=f"runs_confirm_{ids['chain']}").input(ids["full"]).run()
    assert at.button(key="runs_delete").disabled, "the id of another run does not confirm"
    at.text_input(key=f"runs_confirm_{ids['chain']}").input(ids["chain"]).run()
    at.button(key="runs_delete").click().run()
    assert not at.exception
    after = _episode_counts(own_db)
    assert after == {k: v for k, v in before.items() if k != ids["chain"]}
    # The deleted run is gone from the picker, and no confirmation is left over.
    assert ids["chain"] not in at.selectbox(key="runs_pick").options
    current = at.selectbox(key="runs_pick").value
    assert at.text_input(key=f"runs_confirm_{current}").value == ""
    # A second click needs a fresh confirmation, for the run now shown.
    assert at.button(key="runs_delete").disabled
    assert _episode_counts(own_db) == after


def test_a_confirmation_does_not_follow_a_change_of_run(own_db, seeded_db):
    ids = seeded_db[1]
    before = _episode_counts(own_db)
    at = _open("views/runs.py")
    at.selectbox(key="runs_pick").set_value(ids["full"]).run()
    at.text_input(key=f"runs_confirm_{ids['full']}").input(ids["full"]).run()
    assert not at.button(key="runs_delete").disabled
    at.selectbox(key="runs_pick").set_value(ids["single"]).run()
    assert at.text_input(key=f"runs_confirm_{ids['single']}").value == ""
    assert at.button(key="runs_delete").disabled
    # Back to the first run: its confirmation was dropped with the change, not kept.
    at.selectbox(key="runs_pick").set_value(ids["full"]).run()
    assert at.text_input(key=f"runs_confirm_{ids['full']}").value == ""
    assert at.button(key="runs_delete").disabled
    assert _episode_counts(own_db) == before


def test_kind_filter_filters_the_picker(lab_env):
    _, ids = lab_env
    at = _open("views/runs.py")
    at.multiselect(key="runs_kind").set_value(["train"]).run()
    assert at.selectbox(key="runs_pick").options == [
        o for o in at.selectbox(key="runs_pick").options if o.startswith(ids["train"])
    ]
    assert len(at.selectbox(key="runs_pick").options) == 1
    assert len(_table(at, "kind", "status", "backend")) == 1


def test_export_lands_in_the_runs_own_folder_and_offers_a_download(own_db, seeded_db):
    ids = seeded_db[1]
    at = _open("views/runs.py")
    for run in (ids["qmix"], ids["single"]):
        at.selectbox(key="runs_pick").set_value(run).run()
        assert at.get("download_button")[0].proto.label == "Download as Parquet (zip)"
        at.button(key="runs_export").click().run()
        assert not at.exception
        folder = own_db.parent / "exports" / run
        assert pd.read_parquet(folder / "runs.parquet")["id"].tolist() == [run]
        assert set(pd.read_parquet(folder / "episodes.parquet")["run_id"]) == {run}
    # Folders outside the database's folder are refused; nothing is written there.
    at.text_input(key="runs_export_dir").input("../escaped").run()
    at.button(key="runs_export").click().run()
    assert any("must be inside" in e.value for e in at.error)
    assert not (own_db.parent.parent / "escaped").exists()
    # What the download button serves: the run's Parquet files, zipped.
    with zipfile.ZipFile(io.BytesIO(data.export_zip(str(own_db), ids["qmix"]))) as zf:
        names = zf.namelist()
        assert f"{ids['qmix']}/episodes.parquet" in names
        runs_table = pd.read_parquet(io.BytesIO(zf.read(f"{ids['qmix']}/runs.parquet")))
    assert runs_table["id"].tolist() == [ids["qmix"]]


def _wait_for(predicate, timeout: float = 150.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.5)


def test_training_from_the_train_page_logs_episodes(own_db):
    at = _open("views/train.py")
    at.number_input(key="train_episodes").set_value(8)
    at.number_input(key="train_agents").set_value(3)
    next(b for b in at.button if b.label == "Start training").click().run()
    assert not at.exception
    _wait_for(lambda: not list_runs(own_db, kind="train", status="finished").pipe(
        lambda d: d[d["episodes"] == 8]).empty)  # fmt: skip
    at.run()
    assert not at.exception
    runs = list_runs(own_db, kind="train")
    assert runs.iloc[0]["episodes"] == 8
    assert at.multiselect(key="train_watch_runs").value == [runs.iloc[0]["id"]]
    assert Path(runs.iloc[0]["checkpoint"]).exists()


def test_a_learned_topology_method_trains_from_the_train_page(own_db):
    """The Method choice: an AgentPrune run from the page is logged as ``agentprune``, its
    checkpoint is a method's, it offers no resume, and the Failure lab lists it."""
    at = _open("views/train.py")
    assert at.selectbox(key="train_method").options[0] == "Agent Q-Mix"
    at.selectbox(key="train_method").set_value("agentprune")
    at.number_input(key="train_episodes").set_value(8)
    next(b for b in at.button if b.label == "Start training").click().run()
    assert not at.exception
    finished = lambda: list_runs(own_db, kind="train", status="finished").query(  # noqa: E731
        "policy == 'agentprune'"
    )
    _wait_for(lambda: not finished().empty)
    run = finished().iloc[0]
    assert run["episodes"] == 8
    from core.baselines.checkpoint import load_method

    assert load_method(run["checkpoint"]).method.name == "agentprune"
    at.run()
    assert not at.exception
    assert not any(b.key == f"train_resume_{run['id']}" for b in at.button)
    fail = _open("views/failure_lab.py")
    assert any(
        o.startswith("learned · agentprune · ") for o in fail.selectbox(key="fail_policy").options
    )


def test_seed_store_is_what_the_tests_assume(tmp_path):
    ids = seed_store(tmp_path / "s.duckdb", episodes_per_run=2)
    assert set(ids) == {"train", "qmix", "full", "chain", "single"}
    assert count_episodes(tmp_path / "s.duckdb") == 10


@pytest.mark.parametrize("page", ["views/runs.py", "views/replay.py", "views/compare.py"])
def test_a_damaged_store_is_a_message_not_a_traceback(own_db, page):
    """The store's data cut off part-way (its catalogue still opens): every page says the
    file is damaged and how to repair it, and raises nothing."""
    import os

    os.truncate(own_db, int(own_db.stat().st_size * 0.6))
    at = AppTest.from_file(APP, default_timeout=60)
    at.switch_page(page)
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    said = " ".join(e.value for e in at.error)
    assert "damaged" in said and "agentqmix repair" in said, said


def test_the_train_pages_job_list_shows_a_job_started_elsewhere_and_its_end(own_db):
    """The Train page's job list, which polls only while a training job runs (not its pace:
    AppTest runs the page on demand), still shows a job started from another session at the
    page's next run (the sidebar reruns the page when one starts), with its Stop button,
    and the job's end."""
    at = _open("views/train.py")
    assert not [m for m in at.markdown if m.value.startswith("**Training jobs**")]
    job = data.jobs(str(own_db)).start(
        "training elsewhere", [sys.executable, "-c", "import time; time.sleep(60)"], kind="train"
    )
    try:
        at.run()
        assert not at.exception, [e.message for e in at.exception]
        shown = [m.value for m in at.markdown]
        assert any(v.startswith("**Training jobs**") for v in shown)
        assert any(v.startswith("training elsewhere") for v in shown) and "**running**" in shown
        assert at.button(key=f"train_stop_{job.id}").disabled is False
    finally:
        job.stop(grace_s=5)
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    assert "**stopped**" in [m.value for m in at.markdown]
    assert at.button(key=f"train_stop_{job.id}").disabled is True


def test_the_sidebar_polls_fast_only_while_something_is_live(own_db):
    """The sidebar's status reruns every 2 s while a job runs and every 10 s otherwise (an
    idle open tab cost ~0.14 CPU-s a second at 2 s): a job started from another session
    shows in it, and the page switches pace when the job starts and when it ends."""
    from lab import ui

    at = _open("views/runs.py")
    assert at.session_state["_sidebar_live"] is False
    assert not [c for c in at.sidebar.caption if "hourglass" in c.value]
    job = data.jobs(str(own_db)).start(
        "a job from another session", [sys.executable, "-c", "import time; time.sleep(60)"]
    )
    try:
        at.run()  # the flip reruns the page once, now at the live pace
        assert not at.exception, [e.message for e in at.exception]
        assert at.session_state["_sidebar_live"] is True
        shown = [c.value for c in at.sidebar.caption if "hourglass" in c.value]
        assert shown == [":material/hourglass_top: a job from another session"]
    finally:
        job.stop(grace_s=5)
    at.run()
    assert at.session_state["_sidebar_live"] is False
    assert not [c for c in at.sidebar.caption if "hourglass" in c.value]
    assert ui.IDLE_POLL_S > ui.LIVE_POLL_S
