"""Hard budgets on a real back-end (issue 32): what the server bills never passes the budget.

Every test talks to a real HTTP server on 127.0.0.1 (:mod:`tests.core.backends.fake_openai`)
whose own count of the tokens it billed is the bill. A fine-tune, an eval and a sweep with
a tiny token budget stop within one episode of it; a call whose worst case passes the cap
is never sent; the first batch of a run is sized by the probe, not the recipe's 32.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from core.actions import Action
from core.backends.base import AgentTurn
from core.backends.openai_backend import OpenAIBackend, OpenAIBackendConfig
from core.backends.prompts import agent_messages
from core.backends.spend import SpendMeter, worst_case_prompt_tokens
from core.experiment.finetune import Budget, BudgetMeter
from core.store.queries import get_run
from core.tasks.registry import load_benchmark
from tests.core.backends.fake_openai import FakeOpenAIServer, default_responder
from tests.core.test_cli_team import run_json, run_main

TEAM = ["--benchmark", "math", "--agents", "solver,solver", "--rounds", "1"]
"""Two agents, one round: two calls per episode, plus the decision agent's when they differ."""


@pytest.fixture
def server():
    with FakeOpenAIServer() as srv:
        yield srv


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A cache hit is free: every test pays for its own calls.
    monkeypatch.setenv("AGENTQMIX_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


@pytest.fixture(scope="module")
def sim_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("budget") / "sim.pt"
    args = ["--episodes", "8", "--n-envs", "8", "--hidden", "16", "--eval-episodes", "0"]
    run_json("train", *TEAM, *args, "--out", str(path), "--no-log", "--json")
    return path


def real(srv: FakeOpenAIServer) -> list[str]:
    return ["--backend", "openai", "--model", "fake", "--base-url", srv.url]


def episode_cost(srv: FakeOpenAIServer, tmp_path: Path) -> int:
    """The most one episode of TEAM was billed (a probe's cost, read from the server)."""
    before = srv.billed_tokens
    run_json(
        "eval", *TEAM, *real(srv), "--policy", "full", "--episodes", "1", "--no-log",
        "--json", "--seed", "99",
    )  # fmt: skip
    return srv.billed_tokens - before


# ----------------------------------------------------------------------------- the commands


def test_finetune_stops_within_its_token_budget(
    server: FakeOpenAIServer, sim_checkpoint: Path, tmp_path: Path
) -> None:
    per_episode = episode_cost(server, tmp_path)
    budget = 12 * per_episode
    billed = server.billed_tokens
    db = tmp_path / "f.duckdb"
    # 32 episodes at once: the recipe's first batch alone would pass the budget ~3x.
    code, printed, said = run_main(
        "train", *TEAM, *real(server), "--init", str(sim_checkpoint), "--episodes", "200",
        "--n-envs", "32", "--budget-tokens", str(budget), "--out", str(tmp_path / "ft.pt"),
        "--db", str(db), "--json",
    )  # fmt: skip
    assert code == 0, said[-2000:]
    out = json.loads(printed)
    bill = server.billed_tokens - billed
    assert "estimate for 200 episodes" in said and "probe episode" in said
    assert bill <= budget + per_episode  # the promise; the cap in fact holds exactly
    assert bill <= budget and out["spent"]["tokens"] == bill  # the meter is the server's bill
    assert bill > budget - 3 * per_episode  # it stopped at the budget, not long before
    assert "token budget" in out["stopped"] and 0 < out["episodes"] < 32
    info = get_run(str(db), out["run_id"])
    assert info.status == "interrupted" and info.config["finetune"]["budget"]["tokens"] == budget


def test_the_cap_holds_when_the_estimate_is_wrong(sim_checkpoint: Path, tmp_path: Path) -> None:
    """After the probe (3 calls) and the first batch (4 episodes of 3 calls), the server's
    replies grow ~ten-fold: the second batch, sized by the probe, is too big, the cap
    refuses a call in it, and the fine-tune still ends cleanly within its budget (exit 0,
    the first batch logged and checkpointed, the reason said)."""
    seen = []

    def growing(messages: list) -> str:
        seen.append(1)
        pad = "" if len(seen) <= 3 + 4 * 3 else "so " * 200
        return pad + default_responder(messages)

    with FakeOpenAIServer(responder=growing) as srv:
        budget = 6_000
        code, printed, said = run_main(
            "train", *TEAM, *real(srv), "--init", str(sim_checkpoint), "--episodes", "100",
            "--n-envs", "4", "--budget-tokens", str(budget), "--out", str(tmp_path / "g.pt"),
            "--db", str(tmp_path / "g.duckdb"), "--json",
        )  # fmt: skip
        bill = srv.billed_tokens
    assert code == 0, said[-2000:]
    out = json.loads(printed)
    assert bill <= budget and out["spent"]["tokens"] == bill
    assert out["stopped"].startswith("stopped at budget: the token budget was reached")
    assert out["episodes"] == 4 and (tmp_path / "g.pt").is_file()
    # The wall-time estimate divides by the recipe's 4 episodes at once, not --concurrency 8.
    assert "4 at once" in said


def test_eval_stops_within_its_token_budget(server: FakeOpenAIServer, tmp_path: Path) -> None:
    per_episode = episode_cost(server, tmp_path)
    budget = 6 * per_episode
    billed = server.billed_tokens
    db = tmp_path / "e.duckdb"
    code, _, said = run_main(
        "eval", *TEAM, *real(server), "--policy", "full", "--episodes", "40",
        "--concurrency", "16", "--budget-tokens", str(budget), "--db", str(db),
    )  # fmt: skip
    bill = server.billed_tokens - billed
    assert code == 2 and "stopped at budget" in said and "--resume" in said, said[-2000:]
    assert said.count("error:") == 1
    assert bill <= budget
    assert bill > budget - 3 * per_episode
    run = json.loads(run_main("runs", "--db", str(db), "--json")[1])[0]
    spent, cap = run["budget"].removesuffix(" tokens").replace(",", "").split("/")
    assert int(cap) == budget and 0 < int(spent) <= bill  # its logged episodes' spend


def test_sweep_stops_within_its_token_budget(server: FakeOpenAIServer, tmp_path: Path) -> None:
    per_episode = episode_cost(server, tmp_path)
    budget = 10 * per_episode
    billed = server.billed_tokens
    code, _, said = run_main(
        "sweep", *TEAM, *real(server), "--token-weights", "0.1", "--seeds", "0",
        "--episodes", "40", "--eval-episodes", "4", "--n-envs", "8", "--hidden", "16",
        "--topologies", "single", "--max-parallel", "1", "--budget-tokens", str(budget),
        "--out", str(tmp_path / "out"), "--db", str(tmp_path / "s.duckdb"),
    )  # fmt: skip
    bill = server.billed_tokens - billed
    assert code == 2 and "stopped at budget" in said, said[-3000:]
    assert "estimate for" in said
    assert bill <= budget


def test_a_paid_endpoint_refuses_eval_compare_and_sweep_without_a_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A key is set: without one, the refusal is the missing key's (test_cli_mistakes).
    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-sent")
    paid = ["--backend", "openai", "--model", "gpt-4o-mini"]
    for args in (
        ["eval", *TEAM, *paid, "--policy", "single"],
        ["compare", *TEAM, *paid, "--base-url", "https://api.openai.com/v1"],
        ["robustness", *TEAM, *paid],
        ["sweep", *TEAM, *paid, "--token-weights", "0.1", "--seeds", "0"]
        + ["--out", str(tmp_path / "out")],
    ):
        code, _, said = run_main(*args, "--db", str(tmp_path / "x.duckdb"))
        assert code == 2 and len(said.strip().splitlines()) == 1, said
        assert "may bill" in said and "--budget-tokens" in said
    assert not (tmp_path / "x.duckdb").exists() and not (tmp_path / "out").exists()
    # A sweep's budget is a file on this machine: a Ray cluster's workers could not share it.
    code, _, said = run_main(
        "sweep", *TEAM, *paid, "--token-weights", "0.1", "--seeds", "0", "--budget-tokens",
        "1000", "--ray-address", "10.0.0.9:6379", "--out", str(tmp_path / "out"),
    )  # fmt: skip
    assert code == 2 and "this machine's Ray only" in said and len(said.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------- the cap itself


def turn(agent: int = 0) -> AgentTurn:
    task = load_benchmark("math", 0).get(0)
    return AgentTurn(
        task=task, agent=agent, role="solver", round=0, n_rounds=1,
        action=Action.SOLO_PROCESS, previous=None, episode_seed=agent,
    )  # fmt: skip


def backend(srv: FakeOpenAIServer, meter: SpendMeter, concurrency: int = 8) -> OpenAIBackend:
    config = OpenAIBackendConfig(
        model="fake", base_url=srv.url, use_cache=False, concurrency=concurrency, max_tokens=64
    )
    return OpenAIBackend(config, spend=meter)


def test_a_call_whose_worst_case_passes_the_cap_is_never_sent(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    worst = 64 + worst_case_prompt_tokens(agent_messages(turn()))
    meter = SpendMeter.create(worst - 1, None, path=tmp_path / "spend.json")
    b = backend(server, meter)
    result = asyncio.run(b.agent_turn(turn()))
    assert server.request_count == 0 and server.billed_tokens == 0
    assert result.failed and result.call.error.startswith("stopped at budget")
    assert "token budget was reached" in b.budget_stop()
    assert meter.read().tokens == 0 and meter.read().refused == 1


def test_a_call_that_fits_is_settled_at_the_servers_count(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    worst = 64 + worst_case_prompt_tokens(agent_messages(turn()))
    meter = SpendMeter.create(worst, None, path=tmp_path / "spend.json")
    b = backend(server, meter)
    result = asyncio.run(b.agent_turn(turn()))
    assert not result.failed and server.request_count == 1 and b.budget_stop() is None
    state = meter.read()
    assert state.tokens == server.billed_tokens < worst and state.in_flight == 0
    assert state.prompt_ratio is not None and 0 < state.prompt_ratio <= 1


def test_concurrent_calls_never_pass_the_cap(server: FakeOpenAIServer, tmp_path: Path) -> None:
    """Sixteen calls at once against a cap that fits a few: the first is held at its byte
    bound, the others wait for it to settle (which teaches the meter the server's count),
    a few more fit, the rest are refused; the bill stays under the cap."""
    worst = 64 + worst_case_prompt_tokens(agent_messages(turn()))
    cap = worst + 3 * server_call_cost(server)
    meter = SpendMeter.create(cap, None, path=tmp_path / "spend.json")
    b = backend(server, meter)
    billed = server.billed_tokens

    async def many() -> list:
        return await asyncio.gather(*(b.agent_turn(turn(k)) for k in range(16)))

    results = asyncio.run(many())
    bill = server.billed_tokens - billed
    assert bill <= cap and meter.read().tokens == bill and meter.read().in_flight == 0
    sent = [r for r in results if not r.failed]
    assert 0 < len(sent) < 16 and server.request_count - 1 == len(sent)
    assert b.budget_stop() is not None


def server_call_cost(srv: FakeOpenAIServer) -> int:
    """What one agent call of :func:`turn` is billed (one uncapped call, read from the server)."""
    b = OpenAIBackend(
        OpenAIBackendConfig(model="fake", base_url=srv.url, use_cache=False, max_tokens=64)
    )
    before = srv.billed_tokens
    asyncio.run(b.agent_turn(turn(99)))
    return srv.billed_tokens - before


def test_the_first_batch_is_sized_by_the_probe() -> None:
    """The recipe asks for 32 episodes; a probe says one costs 1,000 tokens; 4,500 are
    left: the first batch holds 4, and once the run's own mean is known it takes over."""
    meter = BudgetMeter(Budget(tokens=5_000), tokens=500, prior=(1_000.0, 5.0))
    assert meter.batch_size(32) == 4
    assert not meter.should_stop()
    without = BudgetMeter(Budget(tokens=5_000), tokens=500)
    assert without.batch_size(32) == 1  # no probe: one episode at a time until the mean is known
    spent = BudgetMeter(Budget(tokens=5_000), tokens=4_600, prior=(1_000.0, 5.0))
    assert spent.batch_size(32) == 0 and "token budget" in spent.reason
    calls = BudgetMeter(Budget(calls=12), calls=2, prior=(1_000.0, 5.0))
    assert calls.batch_size(32) == 2


def test_a_resumed_finetune_learns_from_the_real_episodes_it_paid_for(
    server: FakeOpenAIServer, sim_checkpoint: Path, tmp_path: Path
) -> None:
    """The checkpoint of a fine-tune on a real back-end keeps its replay buffer (64
    simulated episodes, then the real ones); ``--resume`` refills the buffer from it instead
    of starting again from a fresh simulated prefill."""
    import torch

    db, out = tmp_path / "r.duckdb", tmp_path / "r.pt"
    first = run_json(
        "train", *TEAM, *real(server), "--init", str(sim_checkpoint), "--episodes", "40",
        "--budget-calls", "12", "--out", str(out), "--db", str(db), "--json",
    )  # fmt: skip
    assert "call budget" in first["stopped"] and 0 < first["episodes"] < 40

    def buffered() -> torch.Tensor:
        return torch.load(out, weights_only=True)["resume"]["replay"]["reward"]

    kept = buffered()
    assert len(kept) == 64 + first["episodes"]  # the recipe's prefill, then the real ones
    again = run_json(
        "train", "--resume", first["run_id"], "--budget-calls", "30", "--db", str(db), "--json"
    )
    grown = buffered()
    assert again["episodes"] > first["episodes"]
    assert len(grown) == 64 + again["episodes"]  # not a second prefill, none lost
    assert torch.equal(grown[: len(kept)], kept)  # the paid-for episodes, in order
