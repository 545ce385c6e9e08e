"""Compare: accuracy vs tokens per policy (Pareto front), rewards, action mixes, two runs."""

import streamlit as st

from lab import data, figures, ui

db = data.db_path()
st.title("Compare policies and topologies")
runs = ui.require_runs(db)
with ui.friendly():
    benchmarks = data.distinct(db, "benchmark")
    policies = data.distinct(db, "policy")

c1, c2 = st.columns([2, 3])
benchmark = c1.selectbox(
    "Benchmark", [None, *benchmarks], format_func=lambda v: v or "all", key="compare_benchmark"
)
healthy = c2.toggle(
    "Healthy episodes only (no injected failures)", value=True, key="compare_healthy"
)
with ui.friendly():
    agg = data.aggregate(db, ("policy",), None, benchmark, False if healthy else None)
if agg.empty:
    st.info("No episodes match; try another benchmark or include episodes with failures.")
    st.stop()

left, right = st.columns([3, 2])
with left:
    st.subheader("Accuracy vs tokens")
    ui.chart(figures.pareto_figure(agg), key="compare_pareto")
    front = figures.pareto_front(agg)["policy"].tolist()
    st.caption(
        f"On the Pareto front (nothing is both cheaper and more accurate): **{', '.join(map(str, front))}**."
    )
with right:
    st.subheader("Rewards")
    st.dataframe(
        agg[
            ["policy", "episodes", "accuracy", "mean_tokens", "mean_reward", "std_reward"]
        ].sort_values("mean_reward", ascending=False),
        hide_index=True,
        width="stretch",
        column_config={
            "accuracy": st.column_config.NumberColumn(format="percent"),
            "mean_tokens": st.column_config.NumberColumn("mean tokens", format="%.0f"),
            "mean_reward": st.column_config.NumberColumn("mean reward", format="%.3f"),
            "std_reward": st.column_config.NumberColumn("std", format="%.3f"),
        },
        key="compare_rewards",
    )

st.subheader("Which actions, when")
default = policies.index("qmix") if "qmix" in policies else 0
policy = st.selectbox("Policy", policies, index=default, key="compare_policy")
d1, d2 = st.columns(2)
with ui.friendly():
    by_diff = data.action_distribution(db, "difficulty", None, benchmark, policy)
    by_round = data.action_distribution(db, "round", None, benchmark, policy)
with d1:
    ui.chart(
        figures.action_mix_figure(by_diff, "difficulty", title="by task difficulty"),
        key="compare_by_difficulty",
    )
with d2:
    ui.chart(figures.action_mix_figure(by_round, "round", title="by round"), key="compare_by_round")

st.subheader("Two runs side by side")
done = runs[runs["episodes"] > 0]
labels = {r["id"]: ui.run_label(r) for _, r in done.iterrows()}
ids = list(labels)
s1, s2 = st.columns(2)
pair = [
    s1.selectbox("Run A", ids, index=0, format_func=labels.get, key="compare_run_a"),
    s2.selectbox(
        "Run B", ids, index=min(1, len(ids) - 1), format_func=labels.get, key="compare_run_b"
    ),
]
for col, run_id, side in zip((s1, s2), pair, ("a", "b"), strict=True):
    row = done.loc[done["id"] == run_id].iloc[0]
    with col:
        m1, m2, m3 = st.columns(3)
        m1.metric("accuracy", f"{row['accuracy']:.1%}")
        m2.metric("mean tokens", f"{row['mean_tokens']:.0f}")
        m3.metric("mean reward", f"{row['mean_reward']:.3f}")
        with ui.friendly():
            mix = data.action_distribution(db, "round", (run_id,))
        ui.chart(
            figures.action_mix_figure(mix, "round", height=260, title="actions by round"),
            key=f"compare_mix_{side}",
        )
