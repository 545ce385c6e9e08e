"""Runs: every run in the database with status and headline figures; export or delete one.

Export and delete act on the run the picker shows at the moment of the click (the
callback receives that run id), and deleting asks for the run id to be typed: a
confirmation belongs to one run and is gone as soon as the choice changes.
"""

import streamlit as st

from core.errors import UserError
from lab import data, params, ui

db = data.db_path()
st.title("Runs")
runs = ui.require_runs(db)
url = ui.UrlState("runs")

kind_options = sorted(runs["kind"].unique())
status_options = sorted(runs["status"].unique())
url.seed("runs_kind", "kind", params.some_of(kind_options, "kind of run in this database"))
url.seed("runs_status", "status", params.some_of(status_options, "status of a run here"))
link_run = url.new("run")
f1, f2 = st.columns(2)
kinds = f1.multiselect("Kind", kind_options, key="runs_kind")
statuses = f2.multiselect("Status", status_options, key="runs_status")
shown = runs
if kinds:
    shown = shown[shown["kind"].isin(kinds)]
if statuses:
    shown = shown[shown["status"].isin(statuses)]
table = shown.assign(policy=shown["policy"].map(data.policy_label))
st.dataframe(
    table[
        [
            "id",
            "kind",
            "status",
            "incomplete",
            "policy",
            "benchmark",
            "backend",
            "episodes",
            "planned",
            "accuracy",
            "mean_tokens",
            "mean_reward",
            "token_weight",
            "token_penalty",
            "idle",
            "sandbox",
            "budget",
            "started_at",
            "ended_at",
        ]
    ],  # fmt: skip
    hide_index=True,
    width="stretch",
    column_config={
        "id": st.column_config.TextColumn("run", width="medium", pinned=True),
        "incomplete": st.column_config.CheckboxColumn(
            help="Stopped before all its episodes: resume it with `agentqmix eval --resume "
            "RUN_ID` (compare, robustness, train likewise)."
        ),
        "planned": st.column_config.NumberColumn("of", help="Episodes the run set out to play."),
        # Widths for headers longer than their values (auto-sized, "accuracy" showed "accurac").
        "accuracy": st.column_config.NumberColumn(format="percent", width=90),
        "mean_tokens": st.column_config.NumberColumn("mean tokens", format="%.0f", width=110),
        "mean_reward": st.column_config.NumberColumn("mean reward", format="%.3f", width=110),
        "token_weight": st.column_config.NumberColumn("w_tok", format="%.2f"),
        "token_penalty": st.column_config.TextColumn("penalty"),
        "idle": st.column_config.TextColumn("idle agents", help="keep: no call; call: re-solve"),
        "sandbox": st.column_config.TextColumn(
            "sandbox",
            help="Where generated code ran: bwrap (bubblewrap), process (the weaker sandbox, "
            "chosen with --sandbox process), none (no code ran); empty: not recorded.",
        ),
        "budget": st.column_config.TextColumn(
            "spent / budget",
            help="A real back-end's run with --budget-tokens/--budget-calls: what its logged "
            "episodes spent of it (its probe episode and a batch stopped at the cap are "
            "billed but not logged).",
        ),
        "started_at": st.column_config.DatetimeColumn("started", format="YYYY-MM-DD HH:mm"),
        "ended_at": st.column_config.DatetimeColumn("ended", format="YYYY-MM-DD HH:mm"),
    },
    key="runs_table",
)

st.subheader("Export or delete a run")
if shown.empty:
    st.info("No run matches the Kind and Status filters.")
    url.write(kind=kinds, status=statuses, run=None)
    st.stop()
labels = {r["id"]: ui.run_label(r) for _, r in shown.iterrows()}
if link_run is not None:
    if link_run.strip() in labels:
        st.session_state["runs_pick"] = link_run.strip()
    elif link_run.strip() in set(runs["id"]):
        url.refuse("run", link_run, "is not among the runs the Kind and Status filters show",
                   "the first one that is")  # fmt: skip
    else:
        url.seed_run("runs_pick", "run", labels, raw=link_run)
if st.session_state.get("runs_pick") not in labels:
    st.session_state.pop("runs_pick", None)
run_id = st.selectbox("Run", list(labels), format_func=labels.get, key="runs_pick")
url.write(kind=kinds, status=statuses, run=run_id)


def _export(run: str, folder: str) -> None:
    try:
        target, counts = data.export_to_folder(db, folder, run)
    except (UserError, ValueError) as err:
        st.session_state["runs_message"] = ("error", str(err))
    else:
        st.session_state["runs_message"] = (
            "success",
            f"Wrote {sum(counts.values()):,} rows of {run} in {len(counts)} Parquet files "
            f"to `{target}`.",
        )


def _delete(run: str) -> None:
    # The confirmation is read here, at the click, for exactly this run.
    if st.session_state.get(f"runs_confirm_{run}", "").strip() != run:
        st.session_state["runs_message"] = ("error", f"Type {run} to confirm deleting it.")
        return
    try:
        counts = data.delete_logged_run(db, run)
    except UserError as err:
        st.session_state["runs_message"] = ("error", str(err))
        return
    for key in [k for k in st.session_state if str(k).startswith("runs_confirm_")]:
        del st.session_state[key]
    st.session_state.pop("runs_pick", None)
    st.session_state["runs_message"] = (
        "success",
        f"Deleted {run} ({counts.get('episodes', 0)} episodes).",
    )


message = st.session_state.pop("runs_message", None)
if message:
    kind, text = message
    (st.success if kind == "success" else st.error)(text)
e1, e2 = st.columns(2)
with e1, st.container(border=True):
    st.markdown(f"**Export** `{run_id}`")
    st.download_button(
        "Download as Parquet (zip)",
        data=lambda: data.export_zip(db, run_id),
        file_name=f"{run_id}.zip",
        mime="application/zip",
        key=f"runs_download_{run_id}",
        icon=":material/download:",
        help="One Parquet file per table (the run's row, episodes, rounds, steps, messages, "
        "calls, training metrics), zipped; built when you click.",
    )
    folder = st.text_input(
        "Or write the files on the server, into this folder",
        data.EXPORTS,
        key="runs_export_dir",
        help=f"A folder inside the database's folder ({data.db_folder(db)}); the run's files "
        "go into a subfolder named after the run.",
    )
    st.button(
        "Write Parquet files", key="runs_export", on_click=_export, args=(run_id, folder),
        icon=":material/save:",
    )  # fmt: skip
with e2, st.container(border=True):
    st.markdown(f"**Delete** `{run_id}`")
    read_only = ui.read_only_notice(db, "deleting a run")
    typed = st.text_input(
        f"Type the run id to confirm: {run_id}",
        key=f"runs_confirm_{run_id}",
        # No placeholder: the run id in grey looked like a box already filled in.
        placeholder="type it here",
        help="The confirmation belongs to this run only; pick another run and it starts empty.",
    )
    st.button(
        "Delete this run and all its episodes", key="runs_delete", type="primary",
        disabled=read_only or typed.strip() != run_id, on_click=_delete, args=(run_id,),
        icon=":material/delete:",
    )  # fmt: skip
