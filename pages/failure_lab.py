"""Failure lab: fail agents on a logged task, run it now, and compare with the healthy run.

Linkable: ``/failure_lab?run=RUN&episode=N&policy=fixed · full&agents=1,2&mode=crash&from=1``.
"""

import streamlit as st

from core.team.failures import FAILURE_MODES
from core.team.topologies import FIXED_TOPOLOGIES
from lab import data, figures, ui
from lab.jobs import (
    CommandQueue,
    FailureChoice,
    Step,
    TeamSpec,
    robustness_command,
    side_by_side_commands,
)

# Largest episode index offered: replaying episode k runs the k episodes before it too.
MAX_INDEX = 49

db = data.db_path()
st.title("Failure lab")
st.caption(
    "Pick a logged evaluation episode (its task and its randomness), a policy and the agents to "
    "fail. The lab plays that episode again twice — with and without the failures — logs both "
    "runs, and shows them side by side. A failure from a later round forks the episode there."
)
runs = ui.require_runs(db)
url = ui.UrlState("failure_lab")

# ---------------------------------------------------------------- the task: a logged eval episode
evals = runs[(runs["kind"] == "eval") & (runs["episodes"] > 0)]
if evals.empty:
    st.info(
        "No evaluation run yet to take a task from. Evaluate a policy first, e.g. "
        "`agentqmix eval --benchmark mixed --policy full --episodes 20` with the same `--db`."
    )
    st.stop()
labels = {r["id"]: ui.run_label(r) for _, r in evals.iterrows()}
if url.seed("fail_run", "run", choices=list(labels)):
    st.session_state.pop("fail_episode", None)
c1, c2 = st.columns([3, 2])
base_run = c1.selectbox(
    "Take the task from run", list(labels), format_func=labels.get, key="fail_run",
    on_change=lambda: st.session_state.pop("fail_episode", None),
)  # fmt: skip
with ui.friendly():
    info = data.run_info(db, base_run)
    # Replaying episode k plays episodes 0..k of the stream, so keep k small.
    episodes = data.episodes(db, base_run, limit=MAX_INDEX + 1)
if info is None or episodes.empty:
    st.info("This run has no episodes any more.")
    st.stop()
episode_labels = {
    int(i): f"#{i} · {task}"
    for i, task in zip(episodes["episode"], episodes["task_id"], strict=True)
}
url.seed("fail_episode", "episode", int, choices=list(episode_labels))
if st.session_state.get("fail_episode") not in episode_labels:
    st.session_state.pop("fail_episode", None)
base_index = c2.selectbox(
    "Episode", list(episode_labels), format_func=episode_labels.get, key="fail_episode"
)
record = data.episode(db, base_run, int(base_index))
if record is None:
    st.warning("That episode is gone (was its run deleted?).")
    st.stop()
team = TeamSpec.from_run_config(info.config)
st.markdown(
    f"**Task** {record.task_id} ({record.benchmark}, difficulty {record.difficulty}): "
    f"{record.question[:300]}"
)

# ---------------------------------------------------------------- the policy and the failures
with ui.friendly():
    ckpts = data.checkpoints(db, team.roles)
choices = {f"learned · {r['id']}": ("checkpoint", r["checkpoint"]) for _, r in ckpts.iterrows()}
choices |= {f"fixed · {name}": ("policy", name) for name in FIXED_TOPOLOGIES}
if ckpts.empty:
    st.caption(
        "No learned checkpoint for this team yet — train one on the **Train** page to fail a "
        "learned policy."
    )
n_agents, n_rounds = len(record.roles), len(record.rounds)
url.seed("fail_policy", "policy", choices=list(choices))
url.seed(
    "fail_agents", "agents",
    lambda v: [int(a) for a in v.split(",") if a.strip().isdigit() and int(a) < n_agents],
)  # fmt: skip
url.seed("fail_mode", "mode", choices=list(FAILURE_MODES))
url.seed("fail_from_round", "from", lambda v: min(max(int(v), 0), n_rounds - 1))
if st.session_state.get("fail_policy") not in choices:
    st.session_state.pop("fail_policy", None)
st.session_state.setdefault("fail_agents", [min(1, n_agents - 1)])
st.session_state["fail_agents"] = [a for a in st.session_state["fail_agents"] if a < n_agents]
if st.session_state.get("fail_from_round", 0) > n_rounds - 1:
    st.session_state["fail_from_round"] = n_rounds - 1
p1, p2, p3, p4 = st.columns([2, 2, 1, 1])
policy_label = p1.selectbox("Policy", list(choices), key="fail_policy")
agents = p2.multiselect(
    "Agents to fail", list(range(n_agents)),
    format_func=lambda i: figures.agent_labels(record.roles)[i], key="fail_agents",
)  # fmt: skip
mode = p3.selectbox("How", FAILURE_MODES, key="fail_mode")
from_round = p4.number_input("From round", 0, n_rounds - 1, key="fail_from_round")
url.write(
    run=base_run, episode=int(base_index), policy=policy_label, agents=sorted(agents),
    mode=mode, **{"from": int(from_round) or None},
)  # fmt: skip
if len(agents) >= n_agents:
    st.warning("Keep at least one agent healthy.")

kind, value = choices[policy_label]
failures = [FailureChoice(int(a), mode, int(from_round)) for a in agents]
if st.button(
    "Run it now", type="primary", key="fail_run_now", disabled=not agents or len(agents) >= n_agents
):
    failed_cmd, healthy_cmd = side_by_side_commands(
        db, team, int(base_index), int(info.seed), failures, **{kind: value}
    )
    manager = data.jobs(db)
    st.session_state["fail_jobs"] = (
        manager.start(f"failure lab: {policy_label} with failures", failed_cmd, kind="eval").id,
        manager.start(f"failure lab: {policy_label} healthy", healthy_cmd, kind="eval").id,
        int(base_index),
    )

# ---------------------------------------------------------------- side by side
pending = st.session_state.get("fail_jobs")
if pending:
    jobs = [data.jobs(db).get(i) for i in pending[:2]]
    if any(j is None for j in jobs):
        st.session_state.pop("fail_jobs")
        st.rerun()
    running = any(j.status == "running" for j in jobs)

    @st.fragment(run_every=1.0 if running else None)
    def side_by_side() -> None:
        if any(j.status == "running" for j in jobs):
            with st.status("Running the episode with and without failures…", expanded=False):
                for j in jobs:
                    st.write(f"{j.label}: {j.status}")
            return
        bad = [j for j in jobs if j.status != "finished" or not (j.result() or {}).get("run_id")]
        if bad:
            st.error(f"{bad[0].label} did not finish:")
            st.code(bad[0].log_tail(15) or "(no output)")
            return
        if running:
            # Both finished: one full rerun picks up the new runs and stops the 1 s refresh.
            data.clear()
            st.rerun(scope="app")
        # Each side-by-side run logged only the forked episode, as its episode 0.
        recs = [data.episode(db, j.result()["run_id"], 0) for j in jobs]
        if any(r is None for r in recs):
            st.warning(
                "The runs finished but their episodes are not in the database yet; reload in a moment."
            )
            return
        r_show = st.slider(
            "Round", 0, len(recs[0].rounds) - 1, len(recs[0].rounds) - 1, key="fail_show_round"
        )
        cols = st.columns(2)
        for col, rec, title in zip(cols, recs, ("with failures", "without failures"), strict=True):
            with col:
                st.markdown(f"#### {title}")
                a, b, c = st.columns(3)
                a.metric("answer", str(rec.team_answer))
                if rec.score > 0:
                    a.badge("right", icon=":material/check:", color="green")
                else:
                    a.badge("wrong", icon=":material/close:", color="red")
                b.metric("tokens", f"{rec.tokens:,}")
                c.metric("reward", f"{rec.reward:.3f}")
                r = min(r_show, len(rec.rounds) - 1)
                ui.chart(figures.communication_graph(rec, r), key=f"fail_graph_{title}")
                st.dataframe(
                    figures.round_table(rec, r),
                    hide_index=True,
                    width="stretch",
                    key=f"fail_table_{title}",
                )
        d_tokens = recs[0].tokens - recs[1].tokens
        st.info(
            f"The failure cost **{recs[1].score - recs[0].score:+.2f}** in score and changed the token "
            f"bill by **{d_tokens:+,}** (reward {recs[0].reward - recs[1].reward:+.3f})."
        )

    side_by_side()

# ---------------------------------------------------------------- robustness
st.subheader("Robustness: accuracy vs failed agents")
st.caption(
    f"Bars: 95 % Wilson intervals. {data.TRAINING_LABEL} episodes are left out (they explore "
    "at random)."
)
with ui.friendly():
    robust = data.robustness(db, record.benchmark)
ui.chart(
    figures.robustness_figure(robust) if not robust.empty else None,
    key="fail_robustness",
    empty="No evaluation episodes yet.",
)
slot = data.queues(db)
queue = slot.get("robustness")
busy = queue is not None and not queue.finished
if st.button(
    "Measure robustness now",
    key="fail_measure",
    disabled=busy,
    help="Runs the newest learned policy for this team (if any) and every fixed topology "
    "with 0, 1 and 2 crashed agents, 20 episodes each.",
):
    ckpt = ckpts.iloc[0]["checkpoint"] if not ckpts.empty else None
    argv = robustness_command(
        db, team, checkpoint=ckpt, episodes=20, max_failed=min(2, n_agents - 1)
    )
    slot["robustness"] = CommandQueue(data.jobs(db), [Step("robustness sweep", argv)]).start()
    st.rerun()
if busy:

    @st.fragment(run_every=1.0)
    def robustness_progress() -> None:
        st.progress(queue.fraction, text=f"{queue.current or 'done'}…")
        if queue.finished:
            data.clear()
            st.rerun(scope="app")

    robustness_progress()
elif queue is not None and queue.error:
    st.error(queue.error)
