"""*Evaluate on held-out tasks* (Train page) and training episodes on Compare, under
AppTest on a real DuckDB store: a checkpoint trained by the real ``train`` entry point,
evaluated by the page's background job (the real CLI in a child process), its point on
Compare."""

from __future__ import annotations

import shutil
import sys

from streamlit.testing.v1 import AppTest

from core.cli import main
from core.store.queries import get_run, list_runs
from core.store.synthetic import synthetic_episode
from core.store.writer import RunLogger
from core.team.topologies import FIXED_TOPOLOGIES
from lab import data, heldout
from lab.palette import policy_color
from tests.lab.test_pages import _chart, _open

TEAM = ["--benchmark", "mixed", "--agents", "solver,coder"]


def _errors(at: AppTest) -> list[str]:
    return [e.value for e in at.error]


def _fill(at: AppTest, episodes: int, seed: int) -> AppTest:
    at.number_input(key="train_eval_episodes").set_value(episodes)
    at.number_input(key="train_eval_seed").set_value(seed)
    at.button(key="FormSubmitter:train_eval_form-Evaluate on held-out tasks").click().run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def test_a_finished_run_is_evaluated_from_the_train_page_and_its_point_is_on_compare(
    own_db, tmp_path
):
    db = str(own_db)
    ckpt = tmp_path / "tiny.pt"
    assert main(["train", *TEAM, "--episodes", "4", "--hidden", "16", "--n-envs", "4",
                 "--eval-episodes", "0", "--seed", "3", "--out", str(ckpt), "--db", db]) == 0  # fmt: skip
    trained = list_runs(db, kind="train", status="finished").iloc[0]["id"]
    # Every fixed topology but star already played this team's first 4 episodes of stream
    # 1000: the page plays only star beside the checkpoint.
    others = ",".join(t for t in FIXED_TOPOLOGIES if t != "star")
    assert main(["compare", *TEAM, "--episodes", "4", "--seed", "1000", "--topologies", others,
                 "--db", db, "--json"]) == 0  # fmt: skip
    jobs = data.jobs(db)  # the page's own manager: it holds the child and its exit code

    at = _open("views/train.py", runs=trained)
    assert at.number_input(key="train_eval_seed").value == 1000
    # Bad input is one sentence and starts nothing (the training seed: lab.heldout.problem,
    # the same path).
    assert _errors(_fill(at, 0, 1000)) == [
        "Episodes must be at least 1 (got 0): nothing was started."
    ]
    info = get_run(db, trained)
    assert "trained on" in heldout.problem(info, heldout.HeldOut(4, info.seed))
    assert not jobs.jobs("eval")

    _fill(at, 4, 1000)
    (job,) = jobs.jobs("eval")
    assert "--topologies" in job.argv and job.argv[job.argv.index("--topologies") + 1] == "star"
    assert job.wait(120) == 0, job.log_tail()
    # Cancel (from any session): a stand-in child that would run a minute.
    busy = jobs.start("evaluate elsewhere", [sys.executable, "-c", "import time; time.sleep(60)"],
                      kind="eval")  # fmt: skip
    data.clear()
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    (run,) = [
        r for r in list_runs(db, kind="compare")["id"] if get_run(db, r).config.get("source_run")
    ]
    assert get_run(db, run).config["source_run"] == trained
    assert any("8 of 8 episodes" in p.proto.text for p in at.get("progress"))
    assert any(run in link.proto.label for link in at.get("page_link"))
    assert [
        c for c in at.caption if c.value.startswith(f"Evaluations of {trained}") and run in c.value
    ]
    # A checkpoint file gone: one sentence, no form (shown at the click's rerun).
    moved = shutil.move(ckpt, tmp_path / "away.pt")
    at.button(key=f"train_eval_cancel_{busy.id}").click().run()
    assert not at.exception and busy.status == "stopped"
    assert any("stopped" in p.proto.text for p in at.get("progress"))
    assert [i.value for i in at.info if "is gone" in i.value]
    assert "train_eval_episodes" not in {w.key for w in at.number_input}
    shutil.move(moved, ckpt)

    # Compare shows the new point (n = 4) at once, and star beside it.
    compare = _open("views/compare.py")
    points = {tuple(c[:3]) for t in _chart(compare, "compare_pareto")["data"]
              for c in t.get("customdata") or []}  # fmt: skip
    assert {(run, "qmix", 4), (run, "star", 4)} <= points


def test_a_run_with_no_checkpoint_says_so(lab_env):
    _, ids = lab_env
    at = _open("views/train.py")
    assert f"{ids['train']} saved no checkpoint, so there is no policy to evaluate." in [
        i.value for i in at.info
    ]


def test_training_episodes_on_compare_are_hollow_named_and_off_the_front(own_db, seeded_db):
    """With "Include training" on, a training run's episodes are drawn as what they are
    (hollow, in its method's colour, ``qmix training (exploring)``, a hover saying how it
    explored) and never join the front (without it they are not drawn: test_pages.py)."""
    ids = seeded_db[1]
    config = {"team": {"token_weight": 0.3}, "method": {"name": "agentprune", "config": {}}}
    with RunLogger(own_db, "train", config, policy="agentprune", benchmark="mixed") as log:
        log.log_episodes(synthetic_episode(7000 + k, policy="env") for k in range(3))
        prune_run = log.run_id
    at = _open("views/compare.py", training="true")
    traces = {t["name"]: t for t in _chart(at, "compare_pareto")["data"]}
    train = traces[f"qmix {data.TRAINING_LABEL}"]
    assert train["marker"]["symbol"] == "circle-open"
    assert [c[0] for c in train["customdata"]] == [ids["train"]]
    assert "ε-greedy" in train["customdata"][0][3]
    assert "not a held-out result" in train["customdata"][0][3]
    prune = traces[f"agentprune {data.TRAINING_LABEL}"]
    assert prune["marker"]["color"] == policy_color("agentprune")
    assert [c[0] for c in prune["customdata"]] == [prune_run]
    assert "sampled" in prune["customdata"][0][3] and "ε" not in prune["customdata"][0][3]
    assert not [c for c in at.caption if "Pareto front" in c.value and "training" in c.value]
    # The front is drawn through the policies only, even where a training point would
    # dominate: put one at no tokens and full accuracy.
    from lab.figures import fronts, pareto_figure

    agg = data.aggregate.__wrapped__(str(own_db), ("run_id", "policy", "backend", "model"),
                                     include_training=True)  # fmt: skip
    agg.loc[agg["training"], ["mean_tokens", "accuracy"]] = [1.0, 1.0]
    assert not any(front["training"].any() for front in fronts(agg).values())
    line = next(t for t in pareto_figure(agg).data if t.name == "Pareto front")
    assert 1.0 not in list(line.x)
