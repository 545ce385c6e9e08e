"""Logging an episode and loading it back gives the same record, live and after ingest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.records import AgentStep, EpisodeRecord, RoundRecord
from core.store import RunLogger, get_run, load_episode, redact_config
from core.store.queries import (
    EpisodeFilter,
    action_distribution,
    aggregate,
    count_episodes,
    episode_curves,
    list_episodes,
    list_runs,
    robustness,
    training_curves,
)
from core.store.spool import spool_dir_for
from core.store.synthetic import synthetic_episode
from core.store.writer import LoggerConfig

NEVER = LoggerConfig(ingest_every_s=1e9)


def _bare_episode() -> EpisodeRecord:
    """Fixed-topology episode: no Q-values, no mixer, no decision agent, no calls."""
    step = AgentStep(agent=0, role="solver", round=0, action=0, answer=None)
    return EpisodeRecord(
        task_id="t",
        benchmark="gsm8k",
        domain="math",
        difficulty=1,
        question="1+1?",
        ground_truth="2",
        roles=["solver"],
        policy="single",
        seed=7,
        rounds=[RoundRecord(round=0, edges=[], dropped_edges=[], layers=[[0]], steps=[step])],
    )


def test_round_trip_from_spool_tail_and_after_ingest(db: Path) -> None:
    records = [synthetic_episode(i, n_agents=3 + i % 3) for i in range(12)] + [_bare_episode()]
    logger = RunLogger(db, "eval", {"n": 1}, policy="qmix", settings=NEVER)
    ids = [logger.log_episode(r) for r in records]
    assert ids == list(range(len(records)))
    # Not ingested yet: readers see the spool tail.
    assert spool_dir_for(db).is_dir()
    for i, rec in enumerate(records):
        loaded = load_episode(db, logger.run_id, i)
        assert loaded is not None and loaded.record == rec
    logger.close()
    assert not any(spool_dir_for(db).glob("*.jsonl"))
    for i, rec in enumerate(records):
        loaded = load_episode(db, logger.run_id, i)
        assert loaded.record == rec
        assert loaded.record.tokens == rec.tokens
    assert load_episode(db, logger.run_id, len(records)) is None
    run = get_run(db, logger.run_id)
    assert run.status == "finished" and run.episodes == len(records)
    assert run.last_episode == len(records) - 1 and run.config == {"n": 1}


def test_failures_with_extra_keys_and_decision_agent(db: Path) -> None:
    rec = synthetic_episode(3)
    rec.failures = [{"agent": 1, "mode": "byzantine"}, {"agent": 2, "mode": "timeout", "s": 2.5}]
    with RunLogger(db, "lab") as logger:
        logger.log_episode(rec)
    back = load_episode(db, logger.run_id, 0).record
    assert back.failures == rec.failures
    assert back.decision == rec.decision and back.decision.agent == -1


def test_queries_filters_and_aggregates(db: Path) -> None:
    with RunLogger(db, "compare", policy="chain") as logger:
        logger.log_episodes(
            synthetic_episode(i, policy=["qmix", "chain"][i % 2]) for i in range(40)
        )
        logger.log_metrics([{"step": s, "episode": s, "loss": 1.0 / (s + 1)} for s in range(5)])
    runs = list_runs(db)
    assert runs.loc[0, "episodes"] == 40 and runs.loc[0, "status"] == "finished"
    wrong = list_episodes(db, EpisodeFilter(correct=False))
    assert (
        len(wrong) == count_episodes(db, EpisodeFilter(correct=False)) and not wrong.correct.any()
    )
    failed = list_episodes(db, EpisodeFilter(with_failures=True, policy="qmix"))
    assert (failed.n_failed > 0).all() and set(failed.policy) == {"qmix"}
    agg = aggregate(db, ("policy",))
    assert set(agg.policy) == {"qmix", "chain"} and agg.episodes.sum() == 40
    expected = sum(synthetic_episode(i).score for i in range(0, 40, 2)) / 20
    assert agg.set_index("policy").loc["qmix", "accuracy"] == pytest.approx(expected)
    rob = robustness(db)
    assert rob.episodes.sum() == 40
    dist = action_distribution(db, "round")
    assert dist.groupby("round")["share"].sum().round(9).eq(1).all()
    assert training_curves(db, logger.run_id).loss.tolist() == [1.0 / (s + 1) for s in range(5)]
    curve = episode_curves(db, logger.run_id, window=5)
    assert len(curve) == 40 and curve.reward_ma.notna().all()
    with pytest.raises(ValueError, match="cannot group by"):
        aggregate(db, ("question; DROP TABLE runs",))


def test_checkpoint_and_metrics_visible_before_ingest(db: Path) -> None:
    logger = RunLogger(db, "train", settings=NEVER)
    logger.log_episode(synthetic_episode(0))
    logger.set_checkpoint(db.parent / "c.pt", 0)
    run = get_run(db, logger.run_id)
    assert run.checkpoint == str(db.parent / "c.pt") and run.checkpoint_episode == 0
    assert run.status == "running" and run.episodes == 1
    logger.close("failed", "boom")
    run = get_run(db, logger.run_id)
    assert (run.status, run.message, run.checkpoint_episode) == ("failed", "boom", 0)


def test_redact_config_hides_keys_and_env_secrets(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "local-secret-value-123")
    config = {
        "backend": {
            "base_url": "http://x",
            "api_key": "abc",
            "key_value": "local-secret-value-123",
        },
        "token_budget": 4000,
        "headers": [{"Authorization": "Bearer zzz"}],
        "other": "sk-proj-ABCDEFGHIJKLMNOPQRSTUV",
        "path": Path("/tmp/x"),
    }
    red = redact_config(config)
    assert red["backend"] == {
        "base_url": "http://x",
        "api_key": "***redacted***",
        "key_value": "***redacted***",
    }
    assert red["token_budget"] == 4000 and red["path"] == "/tmp/x"
    assert red["headers"] == [{"Authorization": "***redacted***"}]
    assert red["other"] == "***redacted***"
    with RunLogger(db, "eval", config) as logger:
        logger.log_episode(synthetic_episode(1))
    raw = db.read_bytes() + b"".join(p.read_bytes() for p in db.parent.rglob("*") if p.is_file())
    assert b"local-secret-value-123" not in raw and b'abc"' not in raw
    assert json.dumps(get_run(db, logger.run_id).config) == json.dumps(red)


@pytest.mark.parametrize("background", [False, True])
def test_segments_rotate_without_losing_rows(db: Path, background: bool) -> None:
    settings = LoggerConfig(
        ingest_every_s=0.0 if not background else 0.01, segment_bytes=4096, background=background
    )
    logger = RunLogger(db, "train", settings=settings)
    records = [synthetic_episode(i) for i in range(25)]
    for rec in records:
        logger.log_episode(rec)
    if not background:
        assert logger._spool.seq > 1, "expected the spool to rotate"
        assert len(list(spool_dir_for(db).glob("*.jsonl"))) == 1
    logger.close()
    for i, rec in enumerate(records):
        assert load_episode(db, logger.run_id, i).record == rec
    assert count_episodes(db) == 25
