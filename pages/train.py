"""Train: start a training run in a background process and watch any run's curves live."""

import time

import pandas as pd
import streamlit as st

from core.tasks.registry import BENCHMARKS
from lab import data, figures, ui
from lab.jobs import ROLE_POOL, TeamSpec, TrainParams, team_roles, train_command

db = data.db_path()
st.title("Train a team")

# ---------------------------------------------------------------- start a run
with st.form("train_form", border=True):
    st.markdown(
        "**New training run** — runs as `agentqmix train` in the background; the app stays usable."
    )
    c1, c2, c3, c4 = st.columns(4)
    benchmark = c1.selectbox(
        "Benchmark", BENCHMARKS, index=BENCHMARKS.index("mixed"), key="train_benchmark"
    )
    agents = c2.number_input("Agents", 1, len(ROLE_POOL), 4, key="train_agents")
    rounds = c3.number_input("Rounds", 1, 10, 3, key="train_rounds")
    episodes = c4.number_input("Episodes", 1, 100_000, 300, step=50, key="train_episodes")
    c5, c6, c7 = st.columns(3)
    token_weight = c5.slider("Token weight w_tok", 0.0, 1.0, 0.1, 0.05, key="train_token_weight")
    fail_prob = c6.slider("Failure probability", 0.0, 0.9, 0.0, 0.05, key="train_fail_prob")
    seed = c7.number_input("Seed", 0, 2**31 - 1, 0, key="train_seed")
    submitted = st.form_submit_button("Start training", type="primary")

if submitted:
    team = TeamSpec(benchmark, team_roles(int(agents)), int(rounds), float(token_weight))
    params = TrainParams(team, int(episodes), float(fail_prob), int(seed))
    checkpoint = data.workdir(db) / "checkpoints" / f"train-{time.strftime('%Y%m%d-%H%M%S')}.pt"
    job = data.jobs(db).start(
        f"train {benchmark} ×{episodes}", train_command(db, params, checkpoint)
    )
    st.session_state["train_job"] = job.id
    st.session_state["train_follow"] = job.started_at
    st.toast("Training started.", icon=":material/model_training:")

manager = data.jobs(db)
job = manager.get(st.session_state.get("train_job", -1))
if job is not None:
    with st.container(border=True):
        s1, s2 = st.columns([4, 1])
        s1.markdown(f"**Started here:** {job.label} — **{job.status}**")
        if s2.button("Stop", key="train_stop", disabled=job.status != "running"):
            job.stop()
            data.clear()
            st.rerun()
        if job.status == "failed":
            st.error("The training command failed:")
            st.code(job.log_tail(15) or "(no output)")

# ---------------------------------------------------------------- watch a run
st.subheader("Watch a run")
with ui.friendly():
    train_runs = data.runs(db, "train")
follow = st.session_state.get("train_follow")


def _new_runs(runs: pd.DataFrame) -> pd.DataFrame:
    return runs[runs["started_at"] >= pd.Timestamp(follow - 1, unit="s")]


if follow is not None:
    # Switch to the run started from this page as soon as it shows up in the database.
    if not _new_runs(train_runs).empty:
        st.session_state["train_watch_run"] = _new_runs(train_runs).iloc[0]["id"]
        del st.session_state["train_follow"]
    elif job is not None and job.status == "running":
        st.info("Starting the training process… its run appears here in a few seconds.")

        @st.fragment(run_every=2.0)
        def wait_for_run() -> None:
            data.clear()
            if not _new_runs(data.runs(db, "train")).empty:
                st.rerun(scope="app")

        wait_for_run()
if train_runs.empty:
    st.info(
        "No training run yet: start one above, or run `agentqmix train ... --db` in a terminal "
        "— it appears here live."
    )
    st.stop()
labels = {r["id"]: ui.run_label(r) for _, r in train_runs.iterrows()}
run_id = st.selectbox("Training run", list(labels), format_func=labels.get, key="train_watch_run")
live = bool((train_runs.loc[train_runs["id"] == run_id, "status"] == "running").any()) or (
    job is not None and job.status == "running"
)


@st.fragment(run_every=2.0 if live else None)
def watch() -> None:
    with ui.friendly():
        runs = data.runs(db, "train")
        row = runs.loc[runs["id"] == run_id]
        episodes_df, metrics = data.curves(db, run_id)
    if row.empty:
        st.warning("This run was deleted.")
        return
    row = row.iloc[0]
    m1, m2, m3, m4 = st.columns(4)
    m1.metric("status", row["status"])
    m2.metric("episodes", int(row["episodes"]))
    m3.metric("accuracy", "—" if row["accuracy"] != row["accuracy"] else f"{row['accuracy']:.1%}")
    m4.metric(
        "mean tokens",
        "—" if row["mean_tokens"] != row["mean_tokens"] else f"{row['mean_tokens']:.0f}",
    )
    if episodes_df.empty:
        st.info("This run has no episodes yet; they appear here as it logs them.")
        return
    ui.chart(figures.training_curves_figure(episodes_df, metrics), key="train_curves")
    bucket = max(1, int(row["episodes"]) // 20)  # episodes_df is thinned on long runs
    mix = data.action_mix(db, run_id, bucket)
    ui.chart(
        figures.action_mix_figure(
            mix, "episode", title=f"Action mix over training (blocks of {bucket} episodes)"
        ),
        key="train_action_mix",
        empty="No actions logged yet.",
    )
    if row["status"] != "running" and live:
        data.clear()
        st.rerun(scope="app")


watch()
