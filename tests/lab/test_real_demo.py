"""The first screen's real-model demo: the local model plays, the home page follows, Replay
shows what it wrote (a real llama.cpp server with the shipped SmolLM2 model)."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from core.store.queries import list_runs, load_episode
from lab import data, real_demo, ui
from lab.jobs import JobManager, workdir
from tests.lab.conftest import ROOT

APP = str(ROOT / "app.py")


def _open(page: str | None = None, **query: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    for name, value in query.items():
        at.query_params[name] = value
    if page:
        at.switch_page(page)
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def test_the_button_starts_the_demo_on_the_local_model(own_db, local_server):
    at = _open()
    at.button(key="home_real_demo").click().run()
    assert not at.exception, [e.message for e in at.exception]
    jobs = data.jobs(str(own_db)).jobs(real_demo.REAL_DEMO_KIND)
    try:
        assert len(jobs) == 1
        assert jobs[0].argv == real_demo.real_demo_command(str(own_db), real_demo.RealDemoConfig())
        argv = jobs[0].argv
        assert argv[argv.index("--benchmark") + 1] == "gsm8k"
        assert argv[argv.index("--backend") + 1] == "local" and argv.count("--backend") == 1
        assert at.button(key="home_real_demo").disabled  # one demo at a time
    finally:
        for job in jobs:
            job.stop(grace_s=5)


def test_real_episodes_show_progress_then_open_in_replay(own_db, local_server):
    # The demo's job as the button starts it (on the lab process's server), made tiny: one episode, two agents, one round,
    # 16 completion tokens a call, every call sent (no response cache from an earlier run).
    small = real_demo.RealDemoConfig(episodes=1, roles=("solver", "analyst"), rounds=1)
    argv = real_demo.real_demo_command(str(own_db), small) + ["--max-tokens", "16", "--no-cache"]
    job = JobManager(workdir(own_db) / "jobs").start("demo", argv, kind=real_demo.REAL_DEMO_KIND)
    try:
        assert job.wait(600) == 0, job.log_tail()
    finally:
        job.stop(grace_s=5)
    run = list_runs(own_db, kind="eval").iloc[0]
    assert run["backend"] == "local" and run["pid"] == job.pid
    at = _open()
    assert any("Done: 1 real episodes" in s.value for s in at.success)
    link = f"/replay?run={run['id']}&episode=0"
    assert any(link in m.value for m in at.markdown), [m.value for m in at.markdown]

    record = load_episode(own_db, run["id"], 0).record
    assert record.backend == "local" and record.model.startswith("SmolLM2-135M")
    assert record.calls and all(
        c.prompt and c.usage_reported and c.completion_tokens > 0 and c.latency_s > 0
        for c in record.calls
    ), record.calls  # exact prompts, the server's usage, latency
    replay = _open("views/replay.py", run=run["id"], episode="0")
    shown = " ".join(m.value for m in replay.markdown)
    wrote = [s.text for rnd in record.rounds for s in rnd.steps if s.text.strip()]
    # the real replies, as written (escaped so that Markdown shows them verbatim)
    assert wrote and all(ui.markdown_literal(text.strip())[:40] in shown for text in wrote)
