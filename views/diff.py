"""Run diff: pick two runs (or two policies of one run) and see, task by task, which answers
went from right to wrong and back, with token and reward deltas and both replays a click
away (and both played round by round, side by side) — the experiment comparison of a
tracing tool, here across topologies.

Linkable: ``/diff?a=RUN&pa=POLICY&b=RUN&pb=POLICY&regressed=true&healthy=false``.
"""

import streamlit as st

from lab import data, diff, params, sidebyside, ui

db = data.db_path()
st.title("Run diff")
st.caption(
    "Side A is the baseline, side B the challenger: a task *regressed* when B answered it "
    "right less often than A. Only tasks both sides played are compared."
)
runs = ui.require_runs(db)
url = ui.UrlState("diff")
done = runs[runs["episodes"] > 0]
labels = {r["id"]: ui.run_label(r) for _, r in done.iterrows()}
ids = list(labels)
url.seed_run("diff_run_a", "a", labels)
url.seed_run("diff_run_b", "b", labels)
for key, default in (("diff_run_a", 0), ("diff_run_b", min(1, len(ids) - 1))):
    if st.session_state.get(key) not in labels:
        st.session_state[key] = ids[default]

sides = []
for col, side in zip(st.columns(2), ("a", "b"), strict=True):
    run_id = col.selectbox(
        f"Run {side.upper()}", ids, format_func=labels.get, key=f"diff_run_{side}"
    )
    with ui.friendly():
        policies = [p for p in data.run_values(db, run_id, "policy") if p != data.TRAINING_POLICY]
    policies = policies or data.run_values(db, run_id, "policy")
    url.seed(f"diff_policy_{side}", f"p{side}", params.one_of(policies, "policy of that run"))
    if st.session_state.get(f"diff_policy_{side}") not in policies:
        # Two policies of one run: B starts on the run's second policy.
        first = 1 if side == "b" and len(policies) > 1 and st.session_state.get(
            "diff_run_a") == run_id else 0  # fmt: skip
        st.session_state[f"diff_policy_{side}"] = policies[first]
    policy = col.selectbox(
        f"Policy {side.upper()}", policies, format_func=data.policy_label,
        key=f"diff_policy_{side}",
    )  # fmt: skip
    sides.append((run_id, policy))

url.seed("diff_healthy", "healthy", params.flag)
url.seed("diff_regressed", "regressed", params.flag)
t1, t2 = st.columns(2)
healthy = t1.toggle("Healthy episodes only (no injected failures)", True, key="diff_healthy")
regressed_only = t2.toggle("Regressed only", False, key="diff_regressed")

with ui.friendly():
    a, b = (data.task_outcomes(db, run_id, policy, healthy) for run_id, policy in sides)
table = diff.task_diff(a, b)
total = diff.summary(a, b, table)
url.write(
    a=sides[0][0], pa=sides[0][1], b=sides[1][0], pb=sides[1][1],
    healthy=None if healthy else "false", regressed="true" if regressed_only else None,
)  # fmt: skip
if sides[0] == sides[1]:
    st.info("Both sides are the same run and policy: pick another run or policy for B.")
if not total.shared:
    st.warning(
        f"These two share no task ({len(a):,} tasks in A, {len(b):,} in B): a diff needs "
        "runs played on the same tasks (the same benchmark and seed, or one sweep)."
    )
    st.stop()

m = st.columns(5)
m[0].metric("tasks in both", f"{total.shared:,}")
m[1].metric(diff.REGRESSED, f"{total.regressed:,}")
m[2].metric(diff.FIXED, f"{total.fixed:,}")
m[3].metric("Δ tokens (B − A)", f"{total.mean_token_delta:+,.0f}", help="mean over the tasks")
m[4].metric("Δ reward (B − A)", f"{total.mean_reward_delta:+.3f}", help="mean over the tasks")
if total.only_a or total.only_b:
    st.caption(
        f"Not compared: {total.only_a:,} tasks only A played, {total.only_b:,} only B played."
    )

shown = table[table["change"] == diff.REGRESSED] if regressed_only else table
shown = shown.assign(
    replay_a=[ui.replay_link(sides[0][0], e) for e in shown["episode_a"]],
    replay_b=[ui.replay_link(sides[1][0], e) for e in shown["episode_b"]],
    side_by_side=[sidebyside.link(sides[0], sides[1], t, healthy) for t in shown["task_id"]],
)
st.dataframe(
    shown[["change", "task_id", "a", "b", "answer_a", "answer_b", "ground_truth", "token_delta",
           "reward_delta", "side_by_side", "replay_a", "replay_b", "question"]],
    hide_index=True, width="stretch", key="diff_table",
    column_config={
        # Wide enough for "right → wrong" (it showed "right → wron").
        "change": st.column_config.TextColumn("A → B", pinned=True, width=120),
        "task_id": st.column_config.TextColumn("task", pinned=True),
        "a": "A", "b": "B", "answer_a": "A answered", "answer_b": "B answered",
        "ground_truth": "expected",
        "token_delta": st.column_config.NumberColumn("Δ tokens", format="%+.0f"),
        "reward_delta": st.column_config.NumberColumn("Δ reward", format="%+.3f"),
        "side_by_side": st.column_config.LinkColumn("A and B", display_text="side by side"),
        "replay_a": st.column_config.LinkColumn("replay A", display_text="open A"),
        "replay_b": st.column_config.LinkColumn("replay B", display_text="open B"),
    },
)  # fmt: skip
st.caption(f"{len(shown):,} of {total.shared:,} shared tasks listed.")
st.download_button(
    "Diff (CSV)", table.to_csv(index=False), file_name="run-diff.csv", mime="text/csv",
    icon=":material/download:", key="diff_csv", on_click="ignore", type="tertiary",
)  # fmt: skip
