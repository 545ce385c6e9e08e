"""Runs: every run in the database with status and headline figures; export or delete one."""

import streamlit as st

from core.errors import UserError
from core.store.commands import delete_run, export_run
from lab import data, ui

db = data.db_path()
st.title("Runs")
runs = ui.require_runs(db)

f1, f2 = st.columns(2)
kinds = f1.multiselect("Kind", sorted(runs["kind"].unique()), key="runs_kind")
statuses = f2.multiselect("Status", sorted(runs["status"].unique()), key="runs_status")
shown = runs
if kinds:
    shown = shown[shown["kind"].isin(kinds)]
if statuses:
    shown = shown[shown["status"].isin(statuses)]
st.dataframe(
    shown[
        [
            "id",
            "kind",
            "status",
            "policy",
            "benchmark",
            "backend",
            "episodes",
            "accuracy",
            "mean_tokens",
            "mean_reward",
            "started_at",
            "ended_at",
        ]
    ],
    hide_index=True,
    width="stretch",
    column_config={
        "accuracy": st.column_config.NumberColumn(format="percent"),
        "mean_tokens": st.column_config.NumberColumn("mean tokens", format="%.0f"),
        "mean_reward": st.column_config.NumberColumn("mean reward", format="%.3f"),
    },
    key="runs_table",
)

st.subheader("Export or delete a run")
labels = {r["id"]: ui.run_label(r) for _, r in runs.iterrows()}
run_id = st.selectbox("Run", list(labels), format_func=labels.get, key="runs_pick")
e1, e2 = st.columns(2)
with e1:
    out_dir = st.text_input(
        "Export folder", str(data.workdir(db) / "exports" / run_id), key="runs_export_dir"
    )
    if st.button("Export as Parquet", key="runs_export"):
        try:
            counts = export_run(run_id, out_dir, db)
        except UserError as err:
            st.error(str(err))
        else:
            st.success(
                f"Wrote {sum(counts.values()):,} rows in {len(counts)} Parquet files to `{out_dir}`."
            )
with e2:
    sure = st.checkbox("Yes, delete this run and all its episodes", key="runs_delete_sure")
    if st.button("Delete run", key="runs_delete", type="primary", disabled=not sure):
        try:
            counts = delete_run(run_id, db)
        except UserError as err:
            st.error(str(err))
        else:
            data.clear()
            st.session_state.pop("runs_pick", None)
            st.toast(f"Deleted {run_id} ({counts.get('episodes', 0)} episodes).")
            st.rerun()
