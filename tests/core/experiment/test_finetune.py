"""``train --init CKPT --budget-tokens/--budget-calls``: a simulator-trained policy continued,
stopped cleanly at its budget, resumable; a paid endpoint refuses to start without one.

The live test runs ``--backend local`` on the session's llama.cpp server (SmolLM2-135M,
``tests/local_model.py``). Every command runs in this process (:func:`run_json`, the code
the console script runs): what is tested is the budget, not the process, and a subprocess
paid ~3 CPU-seconds of imports per command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.cli import main
from core.experiment.finetune import is_local_url
from core.store.queries import get_run, run_spend
from tests.core.test_cli_team import count, run_json, run_main

TEAM = ["--benchmark", "math", "--agents", "solver", "--rounds", "1"]
"""One agent, one round: one call per episode (the decision agent passes a lone answer on)."""


@pytest.fixture(scope="module")
def sim_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ft") / "sim.pt"
    args = ["--episodes", "16", "--n-envs", "8", "--hidden", "16", "--eval-episodes", "0"]
    run_json("train", *TEAM, *args, "--out", str(path), "--no-log", "--json")
    return path


def test_sim_finetune_stops_at_its_budget_and_resumes(sim_checkpoint: Path, tmp_path: Path) -> None:
    db, out = tmp_path / "f.duckdb", tmp_path / "ft.pt"
    first = run_json(
        "train", *TEAM, "--init", str(sim_checkpoint), "--episodes", "400", "--n-envs", "4",
        "--budget-tokens", "20000", "--out", str(out), "--db", str(db), "--json",
    )  # fmt: skip
    run = first["run_id"]
    assert "token budget" in first["stopped"] and first["episodes"] < 400
    assert first["held_out"] == {}  # a budgeted run spends nothing past its budget
    info = get_run(str(db), run)
    assert info.status == "interrupted" and "token budget" in info.message
    assert out.is_file() and info.checkpoint_episode == first["episodes"] - 1
    tokens, _ = run_spend(str(db), run)
    assert tokens == first["spent"]["tokens"] >= 20000 - 4 * 3000
    # Resume with a larger budget: it continues the same run after its last episode.
    again = run_json(
        "train", "--resume", run, "--budget-tokens", "40000", "--db", str(db), "--json"
    )
    assert again["run_id"] == run and again["episodes"] > first["episodes"]
    assert again["spent"]["tokens"] == run_spend(str(db), run)[0]
    n = count(db, f"SELECT count(*) FROM episodes WHERE run_id = '{run}'")
    assert n == count(db, f"SELECT count(DISTINCT episode) FROM episodes WHERE run_id = '{run}'")
    assert (
        n
        == again["episodes"]
        == count(db, f"SELECT max(episode) + 1 FROM episodes WHERE run_id = '{run}'")
    )


@pytest.mark.parametrize("base", ["https://api.openai.com/v1", "http://10.0.0.7:8000/v1", None])
def test_a_paid_endpoint_refuses_to_start_without_a_budget(
    base, sim_checkpoint: Path, tmp_path: Path, capsys, monkeypatch
) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")  # without a key, None is refused earlier
    args = ["train", *TEAM, "--backend", "openai", "--model", "gpt-4o-mini"]
    args += ["--base-url", base] if base else []
    out = tmp_path / "x.pt"
    code = main(
        [
            *args,
            "--init",
            str(sim_checkpoint),
            "--out",
            str(out),
            "--db",
            str(tmp_path / "x.duckdb"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "may bill" in err and "--budget-tokens" in err
    assert not out.exists()


def test_local_addresses() -> None:
    assert is_local_url("http://127.0.0.1:8080/v1") and is_local_url("http://localhost/v1")
    assert is_local_url("http://[::1]:9000/v1")
    assert not is_local_url("http://127.0.0.1.example.com/v1")
    assert not is_local_url("https://api.openai.com/v1") and not is_local_url(None)


def test_real_finetune_stops_at_its_budget_and_a_repeat_is_free(
    sim_checkpoint: Path, tmp_path: Path, local_env: dict[str, str], monkeypatch
) -> None:
    for name, value in {**local_env, "AGENTQMIX_CACHE": str(tmp_path / "cache")}.items():
        monkeypatch.setenv(name, value)
    real = ["--backend", "local"]
    common = [
        *TEAM,
        *real,
        "--init",
        str(sim_checkpoint),
        "--n-envs",
        "1",
        "--concurrency",
        "1",
    ]
    budget = ["--budget-calls", "6", "--budget-tokens", "1000000"]
    db = tmp_path / "real.duckdb"
    code, printed, said = run_main(
        "train", *common, "--episodes", "40", *budget, "--out", str(tmp_path / "a.pt"),
        "--db", str(db), "--json",
    )  # fmt: skip
    assert code == 0, said[-2000:]
    first = json.loads(printed)
    assert "estimate for 40 episodes" in said  # printed before it starts
    assert "call budget" in first["stopped"] and first["spent"]["calls"] == 6
    run = first["run_id"]
    logged_tokens, logged_calls = run_spend(str(db), run)
    # What was spent: the estimate's timed calls plus the logged episodes' calls.
    assert 0 < logged_calls <= first["spent"]["calls"] <= logged_calls + 3
    assert logged_tokens > 0 and first["spent"]["tokens"] >= logged_tokens
    assert (
        count(db, f"SELECT count(*) FROM llm_calls WHERE run_id = '{run}' AND NOT usage_reported")
        == 0
    )
    assert (tmp_path / "a.pt").is_file() and get_run(str(db), run).status == "interrupted"
    # The same run again (same seed, same cache): every call comes from the cache.
    played = first["episodes"]
    db2 = tmp_path / "again.duckdb"
    again = run_json(
        "train", *common, "--episodes", str(played), *budget, "--out", str(tmp_path / "b.pt"),
        "--db", str(db2), "--json",
    )  # fmt: skip
    assert again["episodes"] == played and again["stopped"] is None
    assert again["spent"] == {"tokens": 0, "calls": 0}
    assert count(db2, "SELECT count(*) FROM llm_calls WHERE NOT cache_hit") == 0


def test_real_finetune_recipe_updates_from_its_first_episode(
    sim_checkpoint: Path, tmp_path: Path, local_env: dict[str, str], monkeypatch
) -> None:
    """The ``finetune`` recipe (the default of --init on a real back-end): the buffer starts
    with simulated episodes, so two real episodes already make updates that move the
    policy's weights; the simulated episodes are neither logged nor billed."""
    import torch

    from core.qmix.checkpoint import load_checkpoint

    for name, value in {**local_env, "AGENTQMIX_CACHE": str(tmp_path / "cache")}.items():
        monkeypatch.setenv(name, value)
    db, out = tmp_path / "ft.duckdb", tmp_path / "ft.pt"
    done = run_json(
        "train", *TEAM, "--backend", "local", "--init", str(sim_checkpoint), "--episodes", "2",
        "--budget-calls", "20", "--out", str(out), "--db", str(db), "--json",
    )  # fmt: skip
    assert done["episodes"] == 2 and done["stopped"] is None
    assert done["updates"] >= 2  # one an episode at least, from the first one on
    info = get_run(str(db), done["run_id"])
    assert info.config["recipe"] == "finetune" and info.config["train"]["prefill_episodes"] > 0
    assert count(db, f"SELECT count(*) FROM episodes WHERE run_id = '{done['run_id']}'") == 2
    assert done["spent"]["calls"] <= 20 and run_spend(str(db), done["run_id"])[1] <= 2 * 2
    before, after = load_checkpoint(sim_checkpoint, "cpu"), load_checkpoint(out, "cpu")
    moved = [
        not torch.equal(a, b)
        for a, b in zip(
            before.agent.state_dict().values(), after.agent.state_dict().values(), strict=True
        )
    ]
    assert any(moved)
