"""Overview: what is in the database and where to go next."""

import streamlit as st

from lab import data, real_demo, ui

db = data.db_path()
st.title("Agent Q-Mix Lab")
ui.UrlState("home")  # no parameters: a link's stray ones are named
st.markdown(
    "A team of LLM agents picks, every round, one of six **communication actions**; the "
    "actions decide who reads whom. A QMIX learner trains the agents together and lets each "
    "one act on its own. Use the pages on the left to **replay** episodes, **train** a team, "
    "**fail** agents live, **compare** learned and fixed topologies, and see **CTDE** explained."
)

demo = data.demo_status(db)
if demo is not None and demo.live:
    st.subheader("Preparing a demo")
    st.caption(
        "First start on an empty database: a short training run and evaluations "
        "(the same progress is printed in the terminal that started the lab)."
    )

    @st.fragment(run_every=1.0)
    def demo_progress() -> None:
        status = data.demo_status(db)
        if status is None:
            return
        ui.demo_progress(status, db)
        if not status.live:
            data.clear()
            st.rerun(scope="app")

    demo_progress()
elif demo is not None and demo.cancelled:
    st.info("The demo was cancelled; what it logged before stays.", icon=":material/cancel:")
    writable = data.read_only(db) is None
    if writable and st.button(
        "Start the demo again", key="home_demo_restart", icon=":material/replay:"
    ):
        ui.restart_demo(db)
        st.rerun()
elif demo is not None and (demo.state == "failed" or demo.lost):
    st.error(
        f"The demo could not finish. {demo.error or 'Its process ended early.'} "
        f"(log: `{demo.log_path}`)"
    )

st.subheader("Real agents on this machine")
st.caption(
    "Three held-out GSM8K problems played by a team of three agents (star topology, two "
    "rounds) on the local model, SmolLM2-135M served by llama.cpp on this computer: no key, "
    "no download. About a minute or two an episode on two cores; then open them in Replay "
    "to read the real prompts and replies."
)
jobs = data.jobs(db)
demo_jobs = jobs.jobs(real_demo.REAL_DEMO_KIND)
latest_demo = demo_jobs[0] if demo_jobs else None
read_only = ui.read_only_notice(db, "playing real episodes")
if not read_only and st.button(
    f"Run {real_demo.RealDemoConfig().episodes} real episodes on the local model",
    key="home_real_demo",
    disabled=latest_demo is not None and latest_demo.alive,
):
    jobs.start(
        "real episodes on the local model",
        real_demo.real_demo_command(db, real_demo.RealDemoConfig()),
        kind=real_demo.REAL_DEMO_KIND,
    )
    st.rerun()  # draw the button disabled: one demo at a time


def real_demo_status(job) -> None:
    total = real_demo.RealDemoConfig().episodes
    with ui.friendly():
        run = real_demo.run_of(job, data.runs(db))
    done = 0 if run is None else int(run["episodes"])
    status = job.status
    if status == "running":
        starting = " (starting the local model…)" if run is None else ""
        st.progress(done / total, text=f"{done} of {total} episodes{starting}")
    elif status == "finished":
        st.success(f"Done: {done} real episodes.")
    else:
        st.error(f"The real episodes {status}: {job.log_tail(3) or 'no output'}")
    if run is not None and done:
        with ui.friendly():
            eps = data.episodes(db, data.Listing(run["id"]), limit=total)
        links = [
            f"[episode {e} ({'right' if c else 'wrong'})]({ui.replay_link(run['id'], e)})"
            for e, c in zip(eps["episode"], eps["correct"], strict=True)
        ]
        st.markdown("Open in Replay: " + " · ".join(links))


@st.fragment(run_every=2.0)
def real_demo_progress(job) -> None:
    real_demo_status(job)
    if not job.alive:
        data.clear()
        st.rerun(scope="app")


if latest_demo is not None:
    (real_demo_progress if latest_demo.alive else real_demo_status)(latest_demo)

runs = ui.require_runs(db)
with ui.friendly():
    n_episodes = data.count(db)
    by_policy = data.aggregate(db, ("policy",), include_training=True)

c1, c2, c3, c4 = st.columns(4)
c1.metric("runs", len(runs))
c2.metric("episodes", f"{n_episodes:,}")
c3.metric("training runs", int((runs["kind"] == "train").sum()))
c4.metric("running now", int((runs["status"] == "running").sum()))

st.subheader("Policies at a glance")
st.caption(
    f"**{data.TRAINING_LABEL}**: episodes played while training, with exploration — not a "
    "policy to compare (the Compare page leaves them out unless asked)."
)
st.dataframe(
    by_policy[["policy", "episodes", "accuracy", "mean_tokens", "mean_reward"]],
    hide_index=True,
    width="stretch",
    column_config={
        "accuracy": st.column_config.ProgressColumn(
            "accuracy", format="percent", min_value=0, max_value=1
        ),
        "mean_tokens": st.column_config.NumberColumn("mean tokens", format="%.0f"),
        "mean_reward": st.column_config.NumberColumn("mean reward", format="%.3f"),
    },
    key="home_policies",
)
st.subheader("Latest runs")
latest = runs[["id", "kind", "status", "policy", "benchmark", "episodes", "accuracy"]].head(8)
latest = latest.assign(policy=latest["policy"].map(data.policy_label))
st.dataframe(
    latest,
    hide_index=True,
    width="stretch",
    column_config={
        "id": st.column_config.TextColumn("run", width="medium"),
        "accuracy": st.column_config.NumberColumn(format="percent"),
    },
    key="home_runs",
)
