"""One episode out of Replay: JSON with everything the store holds of it, and a standalone
HTML animation (no server, no network)."""

from __future__ import annotations

import json
import re

from core.records import EpisodeRecord
from core.store.queries import load_episode
from core.store.synthetic import synthetic_episode
from core.store.writer import RunLogger
from lab import asked, episode_export
from tests.lab.test_pages import _open


def _stored(db) -> tuple[str, EpisodeRecord]:
    with RunLogger(db, "eval", {"team": {}}, policy="qmix", benchmark="math", seed=0) as log:
        log.log_episode(synthetic_episode(7, n_agents=3, n_rounds=3))
        run_id = log.run_id
    return run_id, load_episode(db, run_id, 0).record


def test_json_holds_rounds_actions_graph_q_values_messages_prompts_and_tokens(own_db):
    run_id, rec = _stored(own_db)
    out = json.loads(episode_export.episode_json(rec, run_id, 0))
    assert (out["format"], out["run_id"], out["episode"]) == (episode_export.FORMAT, run_id, 0)
    assert [r["round_number"] for r in out["rounds"]] == [1, 2, 3]
    first = out["rounds"][0]
    assert [s["action"] for s in first["steps"]] == [s.action for s in rec.rounds[0].steps]
    assert first["steps"][0]["q_values"] == rec.rounds[0].steps[0].q_values
    assert [tuple(e) for e in first["edges"]] == list(rec.rounds[0].edges)
    assert len(first["messages"]) == len(rec.rounds[0].messages)
    assert (
        out["tokens"]
        == rec.tokens
        == sum(r["tokens"] for r in out["rounds"])
        + (rec.decision.prompt_tokens + rec.decision.completion_tokens)
    )
    # What each agent was asked, round by round, then the decision agent.
    assert len(out["prompts"]) == sum(len(r.steps) for r in rec.rounds) + 1
    sent = [p for p in out["prompts"] if p["messages"]]
    assert sent and all(p["kind"] == asked.REBUILT for p in sent)
    assert sent[0]["messages"][0]["role"] == "system"
    # It reads back as the record it came from.
    back = {k: v for k, v in out.items() if k in EpisodeRecord.__dataclass_fields__}
    for r in back["rounds"]:
        r.pop("round_number"), r.pop("tokens")
    assert EpisodeRecord.from_dict(back).tokens == rec.tokens


def test_html_animates_every_round_with_no_server():
    rec = synthetic_episode(3, n_agents=4, n_rounds=3)
    rec.question = "What is 1 < 2? </script><b>"
    page = episode_export.episode_html(rec, "eval-x", 4)
    assert "Plotly.newPlot" in page or "Plotly.react" in page
    assert not re.search(r"<script[^>]+src=", page)  # plotly.js inlined, nothing fetched
    figs = json.loads(re.search(r"const figs = (.*);\n", page).group(1).replace("<\\/", "</"))
    assert len(figs) == 3 and page.count('<div class="round">') == 3
    assert "round 3 of 3" in page
    assert "</script><b>" not in page.split("<body>")[1].split("<script>")[0]  # escaped


def test_replay_offers_both_downloads(own_db):
    run_id, _ = _stored(own_db)
    at = _open("views/replay.py", run=run_id, episode="0")
    keys = {b.key for b in at.get("download_button")}
    assert {"replay_export_json", "replay_export_html"} <= keys
