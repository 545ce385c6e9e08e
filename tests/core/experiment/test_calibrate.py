"""``agentqmix calibrate``: fitted on some tasks' episodes, checked on the others', and the
fitted society used by train/eval (``--society``).

The real-model test reads a recorded llama.cpp run (SmolLM2-135M, see
``tests/core/backends/data/record_smollm.py``); the split test builds a store whose fit
tasks and check tasks were played by two different societies, so that a check computed on
fitted episodes, or a fit that saw the check episodes, cannot pass. Commands run in this
process (:func:`run_json`, the code the console script runs): a subprocess per command paid
~3 CPU-seconds of imports.
"""

from __future__ import annotations

import copy
import gzip
import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from core.backends.society import SimBackend, get_preset, load_society
from core.cli import main
from core.experiment.calibrate import (
    by_name,
    is_check_task,
    kendall_tau,
    load_runs,
    ranking_agreement,
    replay,
    reread,
    task_key,
)
from core.experiment.evaluate import log_run
from core.team.env import TeamEnv
from core.team.options import TeamOptions
from core.team.topologies import FIXED_TOPOLOGIES, make_policy
from tests.core.test_cli_team import query, run_json

RECORDED = Path(__file__).parents[1] / "backends" / "data" / "smollm_real.duckdb.gz"
FRACTION = 0.3


@pytest.fixture(scope="module")
def real_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("real") / "real.duckdb"
    with gzip.open(RECORDED) as src, open(db, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return db


def run_ids(db: Path) -> list[str]:
    rows = query(db, "SELECT id FROM runs WHERE kind = 'eval' ORDER BY id")
    return [r["id"] for r in rows]


def test_calibrate_on_a_recorded_real_run(real_db: Path, tmp_path: Path) -> None:
    out = tmp_path / "society.json"
    runs = run_ids(real_db)
    args = [a for r in runs for a in ("--run", r)]
    report = run_json(
        "calibrate", *args, "--out", str(out), "--db", str(real_db), "--draws", "5", "--json"
    )
    society = load_society(out)  # a valid society file
    assert society.model == "sim/calibrated-SmolLM2-135M-Instruct.Q4_1"  # named after the model
    # SmolLM2-135M under a 48-token cap mostly never reaches an answer line: the fitted
    # society says so (the presets never do), and it stays a probability with an interval.
    fitted = {p["name"]: p for p in report["fit"]["params"]}
    assert fitted["unreadable.math"]["value"] > 0.3
    assert society.unreadable["math"] == pytest.approx(fitted["unreadable.math"]["value"])
    assert society.unreadable["code"] == 0.0 and "unreadable.code" in report["fit"]["stock"]
    # Completion tokens are the model's, not the preset's 880 (the recording capped them at 48).
    assert society.completion_tokens["math"] < 100
    # The check: held-out episodes only, every fixed topology of the runs, and every action.
    split = report["split"]
    episodes = query(real_db, "SELECT benchmark, task_id, policy FROM episodes")
    check = [e for e in episodes if is_check_task(f"{e['benchmark']}/{e['task_id']}", FRACTION)]
    assert split["check_episodes"] == len(check) > 0
    assert (
        split["fit_episodes"] == report["fit"]["counts"]["episodes"] == len(episodes) - len(check)
    )
    groups = {r["group"]: r for r in report["check"]["by_topology"]}
    assert groups["all episodes"]["n"] == len(check)
    assert {e["policy"] for e in check} <= set(groups)
    for row in report["check"]["by_topology"] + report["check"]["by_action"]:
        for key in ("real_acc", "sim_acc", "err_acc", "real_tok", "sim_tok", "err_tok"):
            mean, lo, hi = row[key]
            assert lo <= mean <= hi
    # Calibration is closer to the real model's tokens than the stock preset on held-out tasks.
    everything = groups["all episodes"]
    assert abs(everything["err_tok"][0]) < abs(everything["stock_err_tok"][0])
    # Ranking agreement of the fixed topologies held out, fitted and base, each with its
    # interval; rewards per policy on the real run's own reward scale.
    ranking = report["check"]["ranking"]
    assert set(ranking["topologies"]) == {e["policy"] for e in check} & set(FIXED_TOPOLOGIES)
    for which in ("fitted", "base"):
        r = ranking[which]
        assert -1.0 <= r["lo"] <= r["tau"] <= r["hi"] <= 1.0
        assert r["policies"] == len(ranking["topologies"])
    real_rewards = {
        e["policy"]: e
        for e in query(real_db, "SELECT policy, avg(reward) AS r FROM episodes GROUP BY policy")
    }
    assert everything["real_rew"][0] <= 0.0 < everything["stock_err_rew"][0]  # no answer right
    assert real_rewards  # the recorded run holds rewards
    # It is logged, and the lab reads it from there.
    logged = query(real_db, f"SELECT kind, config FROM runs WHERE id = '{report['run_id']}'")
    assert logged[0]["kind"] == "calibrate"
    assert json.loads(logged[0]["config"])["calibration"]["split"] == split


def _episodes(society, policy: str, indices: range, seed: int):
    env = TeamEnv(TeamOptions(benchmark="math", seed=seed), "eval", backend=SimBackend(society))
    try:
        return env.run(make_policy(policy), indices, width=32)
    finally:
        env.close()


def test_fit_never_sees_the_check_episodes(tmp_path: Path) -> None:
    """Fit tasks played by society A, check tasks by society B (B never reads an answer):
    the fit must look like A, and the check must find B's episodes, not A's."""
    db = tmp_path / "split.duckdb"
    a = get_preset("flash-lite")
    b = replace(a, unreadable={d: 1.0 for d in a.unreadable}, decision_unreadable=1.0)
    opts = as_real(seed=5)
    for k, policy in enumerate(("star", "debate")):
        records_a = _episodes(a, policy, range(60), 5 + k)
        records_b = _episodes(b, policy, range(60), 5 + k)
        mixed = [
            rb if is_check_task(task_key(ra), FRACTION) else ra
            for ra, rb in zip(records_a, records_b, strict=True)
        ]
        log_run(str(db), "eval", opts, policy, 5 + k, mixed)
    out = tmp_path / "s.json"
    args = [x for r in run_ids(db) for x in ("--run", r)]
    report = run_json(
        "calibrate", *args, "--out", str(out), "--db", str(db), "--draws", "4", "--json"
    )
    fitted = {p["name"]: p["value"] for p in report["fit"]["params"]}
    assert fitted["unreadable.math"] < 0.05  # society A's episodes only
    everything = {r["group"]: r for r in report["check"]["by_topology"]}["all episodes"]
    assert everything["real_acc"][0] == 0.0  # B never answers: the check read B's episodes
    assert everything["sim_acc"][0] > 0.5  # and the fit (A) predicts answers: a large error
    assert everything["err_acc"][1] > 0.4


def test_train_and_eval_on_a_fitted_society(tmp_path: Path) -> None:
    society = tmp_path / "s.json"
    stock = get_preset("flash-lite")
    doc = {
        "format": "agentqmix-society",
        "version": 1,
        "society": {
            "name": "mute",
            "model": "sim/mute",
            "unreadable": {"math": 1.0, "code": 1.0, "mcq": 1.0},
            "token_budget": 3000,
        },
    }
    society.write_text(json.dumps(doc))
    db, ckpt = tmp_path / "t.duckdb", tmp_path / "m.pt"
    out = run_json(
        "train", "--benchmark", "math", "--society", str(society), "--episodes", "16",
        "--n-envs", "8", "--hidden", "16", "--eval-episodes", "4", "--out", str(ckpt),
        "--db", str(db), "--json",
    )  # fmt: skip
    assert out["held_out"]["accuracy"] == 0.0  # every reply unreadable: no team answer
    ev = run_json(
        "eval", "--benchmark", "math", "--policy", "star", "--society", str(society),
        "--episodes", "4", "--db", str(db), "--json",
    )  # fmt: skip
    assert ev["accuracy"] == 0.0
    runs = query(db, "SELECT model, config FROM runs ORDER BY started_at")
    assert {r["model"] for r in runs} == {"mute"}
    assert json.loads(runs[0]["config"])["team"]["society"] == str(society)
    stock_eval = run_json(
        "eval", "--benchmark", "math", "--policy", "star", "--episodes", "4", "--no-log", "--json"
    )
    assert stock_eval["accuracy"] > 0.5  # the stock society stays the default
    assert stock.unreadable["math"] == 0.0


def as_real(seed: int = 0) -> TeamOptions:
    """Options that log simulated episodes as a real model's run (calibrate refuses a run
    of the synthetic society): the split tests need episodes whose truth they know."""
    return TeamOptions(benchmark="math", seed=seed, backend="openai", model="sim-as-real")


def one_error(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """Run ``agentqmix ARGS`` in process (the same main() as the console script): exit code 2
    and one line on stderr."""
    code = main(list(args))
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    return lines[0]


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (None, "does not exist"),
        ("[1, 2]", "not a society file"),
        (
            '{"format": "agentqmix-society", "version": 1, "society": {"reconsider": 2}}',
            "reconsider",
        ),
    ],
)
def test_a_bad_society_file_is_one_sentence_exit_2(tmp_path: Path, capsys, content, says) -> None:
    path = tmp_path / "bad.json"
    if content is not None:
        path.write_text(content)
    db = str(tmp_path / "x.duckdb")
    for command in (
        ["train", "--out", str(tmp_path / "m.pt")],
        ["eval", "--policy", "star"],
        ["compare"],
    ):
        assert says in one_error(
            capsys, *command, "--benchmark", "math", "--society", str(path), "--db", db
        )
    assert not (tmp_path / "m.pt").exists()


def test_calibrate_mistakes_are_one_sentence(tmp_path: Path, capsys) -> None:
    db = str(tmp_path / "x.duckdb")
    records = _episodes(get_preset("flash-lite"), "star", range(2), 0)
    run = log_run(db, "eval", as_real(), "star", 0, records)
    out = str(tmp_path / "s.json")
    assert "no run 'nope'" in one_error(
        capsys, "calibrate", "--run", "nope", "--out", out, "--db", db
    )
    for fraction, says in (("1.5", "--check-fraction"), ("0.01", "too few")):
        args = ("calibrate", "--run", run, "--check-fraction", fraction, "--out", out, "--db", db)
        assert says in one_error(capsys, *args)
    says = one_error(capsys, "calibrate", "--run", run, "--out", str(tmp_path), "--db", db)
    assert "not a regular file" in says


def test_calibrate_refuses_runs_with_no_real_calls(tmp_path: Path, capsys) -> None:
    # A simulated eval (or training run) made no real calls, and a run whose every call
    # failed got no reply: a society "calibrated" on either describes no model.
    db = str(tmp_path / "x.duckdb")
    out = tmp_path / "s.json"
    records = _episodes(get_preset("flash-lite"), "star", range(4), 0)
    simulated = log_run(db, "eval", TeamOptions(benchmark="math"), "star", 0, records)
    failed = [replace(r, calls=[replace(c, error="HTTP 401") for c in r.calls]) for r in records]
    all_failed = log_run(db, "eval", as_real(), "star", 0, failed)
    for run, says in ((simulated, "made no real calls"), (all_failed, "every call of run")):
        args = ("calibrate", "--run", run, "--out", str(out), "--db", db)
        assert says in one_error(capsys, *args)
    assert not out.exists()


def test_kendall_tau_matches_an_independent_computation() -> None:
    import numpy as np
    from scipy.stats import kendalltau

    rng = np.random.default_rng(3)
    for _ in range(20):
        x = rng.integers(0, 4, 6).astype(float)  # ties on purpose: tau-b
        y = x + rng.integers(-2, 3, 6)
        expected = kendalltau(x, y).statistic
        got = kendall_tau(x, y)
        assert got == pytest.approx(expected) or (np.isnan(got) and np.isnan(expected))


def test_ranking_agreement_intervals_follow_the_evidence() -> None:
    """Real and simulated rankings that agree on every task: tau 1 and a narrow interval;
    a simulator that reverses them: -1; one that agrees on half the tasks and reverses on
    the other half: an interval that spans 0."""
    import numpy as np

    rng = np.random.default_rng(0)
    real = np.tile(np.array([[0.1], [0.2], [0.3], [0.4]]), (1, 10))  # (P=4, E=10)
    tasks = np.arange(10)
    same = ranking_agreement(real, real * 2, tasks, 500, rng)
    assert same["tau"] == same["lo"] == same["hi"] == 1.0
    assert ranking_agreement(real, -real, tasks, 500, rng)["tau"] == -1.0
    mixed = real.copy()
    mixed[:, :5] *= -1.0  # the simulator reverses the order on tasks 0-4
    mixed[:, 5:] *= 1.01  # and keeps it, by a hair more, on tasks 5-9: overall tau 1
    noisy = ranking_agreement(real, mixed, tasks, 500, rng)
    assert noisy["lo"] < 0.0 < noisy["hi"]
    # Policies played on different tasks (nan where not): ranked on the tasks drawn.
    sparse = real.copy()
    sparse[0, 5:] = np.nan
    r = ranking_agreement(sparse, sparse, tasks, 200, rng)
    assert r["tau"] == 1.0 and r["policies"] == 4


def test_stochastic_policies_are_replayed_by_their_logged_actions(real_db: Path) -> None:
    """``random`` draws on the episode seed: replayed by name it would take other actions
    than the real episode; by its logged actions it takes the same ones."""
    assert by_name("star") and not by_name("random") and not by_name("qmix")
    runs = load_runs(str(real_db), run_ids(real_db))
    run, record = next((r, e) for r in runs for e in r.records if e.policy == "random")
    sims = replay(run, [record], get_preset("flash-lite"), 3, 0)[0]

    def actions(rec) -> list[list[int]]:
        return [[s.action for s in sorted(r.steps, key=lambda s: s.agent)] for r in rec.rounds]

    assert len(sims) == 3
    assert all(actions(s) == actions(record) for s in sims)


def test_reread_reads_stored_replies_with_todays_reader(real_db: Path) -> None:
    """The recorded store's answers came from an older reader: re-reading changes some of
    them, each to what today's reader says of the stored text, and rescoring follows."""
    from core.tasks.base import task_of
    from core.tasks.checkers import read_answer

    runs = load_runs(str(real_db), run_ids(real_db))
    changed = 0
    for run in runs:
        runtime = run.opts.runtime_config()
        for old in run.records:
            before = copy.deepcopy(old)
            new, n = reread(old, runtime)
            assert old == before  # the stored record is not changed in place
            changed += n
            task = task_of(old)
            for rnd in new.rounds:
                for step in rnd.steps:
                    if step.text and step.fault is None:
                        assert step.answer == read_answer(task, step.text)
            assert new.reward == pytest.approx(
                new.score - runtime.token_weight * min(new.tokens / runtime.token_budget, 1.0)
            )
    assert changed > 0
