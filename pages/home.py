"""Overview: what is in the database and where to go next."""

import streamlit as st

from lab import data, ui

db = data.db_path()
st.title("Agent Q-Mix Lab")
st.markdown(
    "A team of LLM agents picks, every round, one of six **communication actions**; the "
    "actions decide who reads whom. A QMIX learner trains the agents together and lets each "
    "one act on its own. Use the pages on the left to **replay** episodes, **train** a team, "
    "**fail** agents live, **compare** learned and fixed topologies, and see **CTDE** explained."
)

runner = data.demo_slot(db)["runner"]
if runner is not None and not runner.finished:
    st.subheader("Preparing a demo")
    st.caption("First start on an empty database: a short training run and evaluations.")

    @st.fragment(run_every=1.0)
    def demo_progress() -> None:
        st.progress(runner.fraction, text=f"{runner.current or 'starting'}…")
        for step in runner.steps[: runner.done]:
            st.caption(f"✅ {step.label}")
        if runner.finished:
            data.clear()
            st.rerun(scope="app")

    demo_progress()
elif runner is not None and runner.error:
    st.error(f"The demo could not finish. {runner.error}")

runs = ui.require_runs(db)
with ui.friendly():
    n_episodes = data.count(db)
    by_policy = data.aggregate(db, ("policy",))

c1, c2, c3, c4 = st.columns(4)
c1.metric("runs", len(runs))
c2.metric("episodes", f"{n_episodes:,}")
c3.metric("training runs", int((runs["kind"] == "train").sum()))
c4.metric("running now", int((runs["status"] == "running").sum()))

st.subheader("Policies at a glance")
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
st.dataframe(
    runs[
        ["id", "kind", "status", "policy", "benchmark", "episodes", "accuracy", "mean_tokens"]
    ].head(8),
    hide_index=True,
    width="stretch",
    key="home_runs",
)
