"""One episode out of the lab: as JSON (everything the store holds of it, plus what each
agent was asked) and as a standalone HTML page that animates its rounds with no server —
what an educator puts on a slide or mails to a colleague.

Plain functions of :class:`~core.records.EpisodeRecord` (no Streamlit): Replay offers them
as downloads. Rounds are counted from 1 as people count them (``round_number``); ``round``
keeps the store's index from 0.
"""

from __future__ import annotations

import html
import json
import math
from typing import Any

import plotly.io as pio
from plotly.offline import get_plotlyjs

from core.records import DECISION_AGENT, EpisodeRecord
from lab import asked, figures

FORMAT = "agentqmix-episode/1"
"""What the JSON says it is (bump when its shape changes)."""


def _plain(value: Any) -> Any:
    # JSON has no NaN or infinity; a missing figure is null.
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _asked(record: EpisodeRecord, round_: int, agent: int) -> dict:
    a = asked.asked(record, round_, agent)
    return {"agent": agent, "kind": a.kind, "messages": a.messages}


def episode_dict(record: EpisodeRecord, run_id: str, episode: int) -> dict:
    """The episode as plain data: the stored record (rounds with every agent's action, Q
    values, ε and credit, the round's graph edges and messages; the decision; the calls
    with their tokens) plus ``prompts``: what each agent was asked in each round (exact,
    rebuilt for the synthetic society, or nothing) and a per-round token count."""
    data = record.to_dict()
    for rnd in data["rounds"]:
        rnd["round_number"] = rnd["round"] + 1
        rnd["tokens"] = sum(s["prompt_tokens"] + s["completion_tokens"] for s in rnd["steps"])
    prompts = [
        {"round_number": r.round + 1, **_asked(record, r.round, s.agent)}
        for r in record.rounds
        for s in sorted(r.steps, key=lambda s: s.agent)
    ]
    if record.decision is not None:
        prompts.append({"round_number": None, **_asked(record, len(record.rounds), DECISION_AGENT)})
    return _plain(
        {
            "format": FORMAT,
            "run_id": run_id,
            "episode": int(episode),
            "correct": record.score >= 1.0,
            "tokens": record.tokens,
            "prompt_tokens": record.prompt_tokens,
            "completion_tokens": record.completion_tokens,
            **data,
            "prompts": prompts,
        }
    )


def episode_json(record: EpisodeRecord, run_id: str, episode: int) -> str:
    """:func:`episode_dict` as indented JSON text."""
    return json.dumps(episode_dict(record, run_id, episode), indent=1, ensure_ascii=False)


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>{title}</title>
<style>
 body {{ font-family: Inter, "Segoe UI", Helvetica, Arial, sans-serif; margin: 24px; color: #222; }}
 .bar {{ display: flex; gap: 12px; align-items: center; margin: 12px 0; }}
 table {{ border-collapse: collapse; font-size: 13px; }}
 td, th {{ border-bottom: 1px solid #ddd; padding: 4px 8px; text-align: left; vertical-align: top; }}
 .round {{ display: none; }} .round.on {{ display: block; }}
 .meta {{ color: #555; font-size: 14px; }}
</style>
<script>{plotly}</script></head>
<body>
<h2>{title}</h2>
<p class="meta">{meta}</p>
<p><b>Task</b> {question}</p>
<div class="bar">
 <button id="prev" aria-label="previous round">&#9664;</button>
 <input id="step" type="range" min="0" max="{last}" value="0" aria-label="round">
 <button id="next" aria-label="next round">&#9654;</button>
 <button id="play">Play</button>
 <span id="label"></span>
</div>
<div id="graph" style="max-width: 760px"></div>
{tables}
<script>
const figs = {figs};
const names = {names};
const graph = document.getElementById("graph");
const step = document.getElementById("step");
let timer = null;
function show(k) {{
  k = Math.max(0, Math.min(figs.length - 1, k));
  step.value = k;
  Plotly.react(graph, figs[k].data, figs[k].layout, {{displaylogo: false, responsive: true}});
  document.querySelectorAll(".round").forEach((el, j) => el.classList.toggle("on", j === k));
  document.getElementById("label").textContent = names[k];
}}
step.oninput = () => show(+step.value);
document.getElementById("prev").onclick = () => show(+step.value - 1);
document.getElementById("next").onclick = () => show(+step.value + 1);
document.getElementById("play").onclick = (e) => {{
  if (timer) {{ clearInterval(timer); timer = null; e.target.textContent = "Play"; return; }}
  e.target.textContent = "Pause";
  timer = setInterval(() => {{
    if (+step.value >= figs.length - 1) {{ show(0); }} else {{ show(+step.value + 1); }}
  }}, 1500);
}};
show(0);
</script>
</body></html>
"""


def episode_html(record: EpisodeRecord, run_id: str, episode: int) -> str:
    """A standalone page (Plotly inlined: no server, no network) that steps through the
    episode's rounds: the communication graph, and under it who did what and said what."""
    n = len(record.rounds)
    figs = [json.loads(pio.to_json(figures.communication_graph(record, r))) for r in range(n)]
    names = [f"{figures.round_name(r)} of {n}" for r in range(n)]
    tables = []
    for r in range(n):
        acts = figures.round_table(record, r).to_html(index=False, border=0, escape=True)
        msgs = figures.messages_table(record.rounds[r], record.roles)
        said = (
            msgs.to_html(index=False, border=0, escape=True) if len(msgs) else "<p>No messages.</p>"
        )
        tables.append(
            f'<div class="round"><h3>{html.escape(names[r])}</h3>{acts}<h4>Messages</h4>{said}</div>'
        )
    verdict = "right" if record.score >= 1.0 else "wrong"
    meta = (
        f"run {run_id} · episode #{episode} · policy {record.policy} · {record.benchmark} · "
        f"answer {record.team_answer!r} ({verdict}; expected {record.ground_truth!r}) · "
        f"{record.tokens:,} tokens · reward {record.reward:.3f}"
    )
    return _PAGE.format(
        title=html.escape(f"Agent Q-Mix Lab · {run_id} #{episode}"),
        meta=html.escape(meta),
        question=html.escape(record.question),
        plotly=get_plotlyjs(),
        last=max(n - 1, 0),
        tables="\n".join(tables),
        # </script> inside the data would end the script block early.
        figs=json.dumps(figs).replace("</", "<\\/"),
        names=json.dumps(names),
    )
