"""The store's last line of defence: text a back-end failed to clean, credentials in a config."""

from __future__ import annotations

from pathlib import Path

from core.store import RunLogger, get_run, load_episode, redact_config
from core.store.spool import dumps
from core.store.synthetic import synthetic_episode


def test_lone_surrogates_are_stored_as_replacement_characters(db: Path) -> None:
    assert dumps({"text": "a\ud800b"}) == '{"text":"a\ufffdb"}\n'.encode()
    rec = synthetic_episode(1)
    rec.rounds[0].steps[0].text = "model said \udfff here"
    with RunLogger(db, "eval") as logger:
        logger.log_episode(rec)
    stored = load_episode(db, logger.run_id, 0).record
    assert stored.rounds[0].steps[0].text == "model said \ufffd here"


def test_url_credentials_never_reach_the_run_config(db: Path) -> None:
    config = {"team": {"base_url": "http://alice:URLPASS-42@127.0.0.1:8000/v1"}}
    assert redact_config(config) == {"team": {"base_url": "http://***@127.0.0.1:8000/v1"}}
    with RunLogger(db, "eval", config) as logger:
        logger.log_episode(synthetic_episode(1))
    assert get_run(db, logger.run_id).config == redact_config(config)
    raw = b"".join(p.read_bytes() for p in db.parent.rglob("*") if p.is_file())
    assert b"URLPASS-42" not in raw
