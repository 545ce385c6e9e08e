"""Train: start training in a background process, stop or resume any job, watch runs live.

Jobs are listed from the registry next to the database, so every browser session (and
every lab server on that database) sees them and can stop them. Linkable:
``/train?runs=RUN_A,RUN_B&smoothing=0.8``.
"""

import json
import time
from dataclasses import asdict
from pathlib import Path
from urllib.parse import quote

import streamlit as st

from lab import data, figures, heldout, params, ui
from lab.jobs import (
    LAB_BENCHMARKS,
    ROLE_POOL,
    TRAIN_METHOD_LABELS,
    TRAIN_METHODS,
    TeamSpec,
    TrainParams,
    offered_backends,
    resume_command,
    setting_range,
    team_roles,
    train_command,
)
from lab.policies import short_policy

# The training curves' default smoothing (EMA weight on the past).
SMOOTHING = 0.6


db = data.db_path()
st.title("Train a team")
url = ui.UrlState("train")
manager = data.jobs(db)

# ---------------------------------------------------------------- start a run
read_only = ui.read_only_notice(db, "starting or resuming a training run")
with st.form("train_form", border=True):
    st.markdown(
        "**New training run** — runs as `agentqmix train` in the background; the app stays usable."
    )
    c1, c2, c3, c4 = st.columns(4)
    benchmark = c1.selectbox(
        "Benchmark", LAB_BENCHMARKS, index=LAB_BENCHMARKS.index("mixed"), key="train_benchmark"
    )
    defaults = TrainParams()  # every default is the team options' own (lab.jobs.TeamSpec)
    agents = c2.number_input(
        "Agents", 1, len(ROLE_POOL), len(defaults.team.roles), key="train_agents"
    )
    rounds = c3.number_input(
        "Rounds", *setting_range("rounds"), defaults.team.rounds, key="train_rounds"
    )
    episodes = c4.number_input("Episodes", 1, 100_000, 300, step=50, key="train_episodes")
    c5, c6, c7, c8 = st.columns(4)
    token_weight = c5.slider(
        "Token weight w_tok", 0.0, 1.0, defaults.team.token_weight, 0.05, key="train_token_weight"
    )
    fail_prob = c6.slider(
        "Failure probability", 0.0, 0.9, defaults.fail_prob, 0.05, key="train_fail_prob"
    )
    seed = c7.number_input("Seed", 0, 2**31 - 1, 0, key="train_seed")
    backends, local_note = offered_backends()
    backend = c8.selectbox("Agents played by", backends, key="train_backend", help=local_note)
    st.caption(local_note)
    method = st.selectbox(
        "Method", TRAIN_METHODS, key="train_method", format_func=TRAIN_METHOD_LABELS.get,
        help="Agent Q-Mix, or a learned topology from the field at its defaults "
        "(docs/baselines.md; `agentqmix train --method NAME --set KEY=VALUE` for its settings).",
    )  # fmt: skip
    submitted = st.form_submit_button("Start training", type="primary", disabled=read_only)

if submitted:
    team = TeamSpec(
        benchmark, team_roles(int(agents)), int(rounds), float(token_weight), backend=backend
    )
    train = TrainParams(team, int(episodes), float(fail_prob), int(seed), method=method)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    checkpoint = data.workdir(db) / "checkpoints" / f"train-{method}-{stamp}.pt"
    job = manager.start(
        f"train {method} · {benchmark} ×{episodes}",
        train_command(db, train, checkpoint),
        kind="train",
    )
    # Followed until its run shows in the store: then it is the run watched below.
    st.session_state["train_follow"] = {
        "job": job.id, "pid": job.pid, "since": job.started_at, "label": job.label,
        "settings": {**asdict(train), "checkpoint": str(checkpoint)},
    }  # fmt: skip
    st.toast("Training started.", icon=":material/model_training:")


# ---------------------------------------------------------------- every training job
def _stop(job_id: str) -> None:
    job = manager.get(job_id)
    if job is not None:
        job.stop()
    data.clear()


def _resume(run_id: str) -> None:
    manager.start(f"resume {run_id}", resume_command(db, run_id), kind="train")
    st.session_state.pop("train_follow", None)
    data.clear()
    st.toast(f"Resuming {run_id}.", icon=":material/replay:")


# The list polls while a training job runs; otherwise it waits for a page run (the sidebar's
# status reruns the page when a job starts elsewhere: lab/ui.py ``sidebar_status``).
_jobs_live = bool(manager.running("train"))


@st.fragment(run_every=ui.LIVE_POLL_S if _jobs_live else None)
def job_list() -> None:
    if bool(manager.running("train")) != _jobs_live:
        st.rerun()  # a job ended (or started): the page polls at the other pace from now on
    jobs = manager.jobs("train")[:8]
    if not jobs:
        return
    with st.container(border=True):
        st.markdown("**Training jobs** (from any browser session)")
        for job in jobs:
            j1, j2, j3 = st.columns([5, 2, 1])
            j1.markdown(
                f"{job.label} · started {time.strftime('%H:%M:%S', time.localtime(job.started_at))}"
            )
            j2.markdown(f"**{job.status}**")
            j3.button(
                "Stop", key=f"train_stop_{job.id}", on_click=_stop, args=(job.id,),
                disabled=job.status != "running", icon=":material/stop:",
            )  # fmt: skip
            if job.status == "failed":
                st.code(job.log_tail(12) or "(no output)")


job_list()

# ---------------------------------------------------------------- a run just started here
follow = st.session_state.get("train_follow")
if follow is not None:
    with ui.friendly():
        started = data.run_of_job(db, follow["pid"], follow["since"])
    job = manager.get(follow["job"])
    if started is not None:
        st.session_state["train_watch_runs"] = [started]
        del st.session_state["train_follow"]
        data.clear()
    elif job is None or job.status != "running":
        del st.session_state["train_follow"]
        st.error(
            f"{follow['label']} ended before it logged a run ({job.status if job else 'gone'})."
        )
        st.code((job.log_tail(12) if job else "") or "(no output)")
    else:
        st.subheader("Watch runs")
        st.info(
            f"Starting **{follow['label']}**: its run shows here, live, as soon as it logs "
            "(a few seconds while PyTorch loads).",
            icon=":material/hourglass_top:",
        )
        st.subheader("Configuration")
        st.caption("What the run was started with:")
        st.json(follow["settings"], expanded=2)

        @st.fragment(run_every=1.0)
        def wait_for_run() -> None:
            job = manager.get(follow["job"])
            if data.run_of_job(db, follow["pid"], follow["since"]) or job is None or not job.alive:
                st.rerun(scope="app")

        wait_for_run()
        st.stop()

# ---------------------------------------------------------------- watch runs
st.subheader("Watch runs")
with ui.friendly():
    train_runs = data.runs(db, "train")
if train_runs.empty:
    if manager.running("train"):
        st.info("Starting the training process… its run appears here in a few seconds.")

        @st.fragment(run_every=2.0)
        def wait_for_run() -> None:
            data.clear()
            if not data.runs(db, "train").empty:
                st.rerun(scope="app")

        wait_for_run()
    else:
        st.info(
            "No training run yet: start one above, or run `agentqmix train ... --db` in a "
            "terminal — it appears here live."
        )
    url.write(runs=None, smoothing=None)
    st.stop()

ids = train_runs["id"].tolist()
url.seed("train_watch_runs", "runs", params.some_of(ids, "training run in this database"))
watched = [r for r in st.session_state.get("train_watch_runs", ids[:1]) if r in ids] or ids[:1]
st.session_state["train_watch_runs"] = watched
# Static labels: the live status and episode count are drawn below and refresh on their own.
labels = {
    r["id"]: f"{r['id']} · {r['benchmark']} · started {r['started_at']:%Y-%m-%d %H:%M}"
    for _, r in train_runs.iterrows()
}
w1, w2 = st.columns([4, 1])
watched = w1.multiselect(
    "Training runs (several overlay on the same charts)",
    ids,
    format_func=labels.get,
    key="train_watch_runs",
)
url.seed("train_smoothing", "smoothing", lambda raw: round(params.number(0.0, 0.99)(raw), 2))
smoothing = w2.slider(
    "Smoothing (EMA)", 0.0, 0.99, SMOOTHING, 0.01, key="train_smoothing",
    help="Exponential moving average of each curve (0 = raw); the raw values stay faint.",
)  # fmt: skip
url.write(runs=watched, smoothing=None if smoothing == SMOOTHING else smoothing)
if not watched:
    st.info("Pick at least one run.")
    st.stop()
live = bool(train_runs.loc[train_runs["id"].isin(watched), "status"].eq("running").any())


def _not_logged(heading: str, methods: dict[str, str]) -> str:
    """Why a curve panel is empty (an empty pair of axes said nothing)."""
    others = sorted({m for m in methods.values() if m != "qmix"})
    if others:
        return (
            f"No {heading} logged: {', '.join(others)} learn without it (it belongs to Agent "
            "Q-Mix's learner: ε-greedy exploration, the mixer's Q_tot)."
        )
    return f"No {heading} logged yet."


@st.fragment(run_every=2.0 if live else None)
def watch() -> None:
    with ui.friendly():
        runs = data.runs(db, "train")
        learns = {r: data.train_run_method(data.run_info(db, r)) for r in watched}
        # A run's label says what it learns; its method gives the curves their colour.
        labels = {r: f"{data.short_run(r)} · {short_policy(*learns[r])}" for r in watched}
        curves = {labels[r]: data.curves(db, r) for r in watched}
    methods = {labels[r]: learns[r][0] for r in watched}
    rows = runs[runs["id"].isin(watched)]
    st.dataframe(
        rows.assign(learns=[short_policy(*learns[r]) for r in rows["id"]])[
            ["id", "learns", "status", "episodes", "accuracy", "mean_tokens", "mean_reward"]
        ],
        hide_index=True,
        width="stretch",
        column_config={
            "id": st.column_config.TextColumn("run", width="medium"),
            "learns": st.column_config.TextColumn(
                "learns", help="method, the token weight it trains at, its knob"
            ),
            "accuracy": st.column_config.NumberColumn(format="percent"),
            "mean_tokens": st.column_config.NumberColumn("mean tokens", format="%.0f"),
            "mean_reward": st.column_config.NumberColumn("mean reward", format="%.3f"),
        },
        key="train_status",
    )
    if all(ep.empty for ep, _ in curves.values()):
        st.info("No episodes yet; they appear here as the run logs them.")
        return
    for k in range(0, len(figures.CURVE_METRICS), 3):
        cols = st.columns(3)
        for col, (column, heading, _) in zip(cols, figures.CURVE_METRICS[k : k + 3], strict=True):
            with col:
                st.markdown(f"##### {heading}")
                ui.chart(
                    figures.training_curve_figure(curves, column, smoothing, methods=methods),
                    key=f"train_curve_{column}",
                    empty=_not_logged(heading, methods),
                )
    first = rows.iloc[0] if not rows.empty else None
    if first is not None:
        bucket = max(1, int(first["episodes"]) // 20)
        st.markdown(f"##### Action mix over training · {first['id']} (blocks of {bucket} episodes)")
        ui.chart(
            figures.action_mix_figure(data.action_mix(db, first["id"], bucket), "episode"),
            key="train_action_mix",
            empty="No actions logged yet.",
        )
    if live and not rows["status"].eq("running").any():
        data.clear()
        st.rerun(scope="app")


watch()

st.subheader("Configuration")
running_jobs = {j.pid: j for j in manager.running("train")}
for run_id in watched:
    with ui.friendly():
        info = data.run_info(db, run_id)
    if info is None:
        st.warning(f"{run_id} was deleted.")
        continue
    # No status or count here: this header is drawn once, while the table above follows
    # the run live (a running run's header said "0 episodes" beside the table's 160).
    with st.expander(f"{run_id} · configuration", expanded=len(watched) == 1):
        b1, b2 = st.columns(2)
        job = running_jobs.get(info.pid) if info.status == "running" else None
        if job is not None:
            b1.button(
                "Stop this run", key=f"train_stop_run_{run_id}", on_click=_stop, args=(job.id,),
                icon=":material/stop:",
            )  # fmt: skip
        # A learned-topology method's run is not resumed (docs/baselines.md, "Checkpoints").
        resumable = (
            info.status in ("interrupted", "failed")
            and "method" not in info.config
            and bool(info.checkpoint and Path(info.checkpoint).is_file())
        )
        if resumable and not read_only:
            b2.button(
                f"Resume from episode {(info.checkpoint_episode or 0) + 1}",
                key=f"train_resume_{run_id}", on_click=_resume, args=(run_id,),
                icon=":material/replay:",
                help=f"Runs `agentqmix train --resume {run_id}` in the background.",
            )  # fmt: skip
        st.caption(f"checkpoint: `{info.checkpoint or '—'}`")
        st.json(info.config, expanded=2)

# ---------------------------------------------------------------- evaluate on held-out tasks
st.subheader("Evaluate on held-out tasks")
st.caption(
    "A finished run's checkpoint (any method) played greedily on held-out episodes of a stream "
    "it never trained on — and, if asked, every fixed topology on the same episodes (those this "
    "team already played there are not played again). Runs as `agentqmix compare` / `eval` in "
    "the background; its points appear on Compare, apart from the training episodes."
)
if st.session_state.get("train_eval_run") not in watched:
    st.session_state["train_eval_run"] = watched[0]
eval_run = st.selectbox(
    "Training run to evaluate", watched, format_func=labels.get, key="train_eval_run"
)
with ui.friendly():
    eval_info = data.run_info(db, eval_run)
why = heldout.problem(eval_info)
if why is not None:
    st.info(why, icon=":material/info:")
else:
    with st.form("train_eval_form", border=True):
        e1, e2, e3 = st.columns(3)
        eval_episodes = e1.number_input(
            "Episodes", 0, 100_000, heldout.EPISODES, step=50, key="train_eval_episodes",
            help="Held-out episodes per policy; 300 make 95 % intervals about ±4 points wide.",
        )  # fmt: skip
        eval_seed = e2.number_input(
            "Stream seed", 0, 2**31 - 1, heldout.default_seed(eval_info), key="train_eval_seed",
            help=f"The held-out stream (never the training run's seed, {eval_info.seed}).",
        )  # fmt: skip
        eval_fixed = e3.checkbox(
            "Also the fixed topologies", True, key="train_eval_fixed",
            help="Every fixed topology on the same episodes, except those this team already "
            "played on this stream in the store (at least as many episodes).",
        )  # fmt: skip
        evaluate = st.form_submit_button(
            "Evaluate on held-out tasks", type="primary", disabled=read_only,
            icon=":material/fact_check:",
        )  # fmt: skip
    if evaluate:
        held = heldout.HeldOut(int(eval_episodes), int(eval_seed), bool(eval_fixed))
        why = heldout.problem(eval_info, held)
        if why is not None:
            st.error(why)
        else:
            team_json = json.dumps(asdict(heldout.eval_team(eval_info.config)))
            with ui.friendly():
                done = data.evaluated_topologies(db, team_json, held.seed, held.episodes)
            todo = heldout.still_to_play(held, done)
            label, argv = heldout.command(db, eval_info, held, todo)
            manager.start(label, argv, kind=heldout.EVAL_KIND)
            skipped = sorted(done) if held.fixed else []
            if skipped:
                st.caption(
                    f"Already in the store on this stream, not played again: {', '.join(skipped)}."
                )
            st.toast("Evaluation started.", icon=":material/fact_check:")
with ui.friendly():
    evaluated = data.evaluations_of(db, eval_run)
if not evaluated.empty:
    st.caption(
        f"Evaluations of {eval_run} in the store: "
        + ", ".join(
            f"[{r['id']}](/compare?benchmark={quote(r['benchmark'])}) ({r['status']}, "
            f"{r['episodes']:,} episodes, stream {r['seed']})"
            for _, r in evaluated.iterrows()
        )
        + "."
    )


def _cancel(job_id: str) -> None:
    job = manager.get(job_id)
    if job is not None:
        job.stop()
    data.clear()


_evals_live = bool(manager.running(heldout.EVAL_KIND))


@st.fragment(run_every=ui.LIVE_POLL_S if _evals_live else None)
def eval_jobs() -> None:
    """Every evaluation job (from any session): its progress in episodes, Cancel, its end."""
    if bool(manager.running(heldout.EVAL_KIND)) != _evals_live:
        data.clear()  # one ended (or started): Compare shows its points from the next draw
        st.rerun()
    for job in manager.jobs(heldout.EVAL_KIND)[:4]:
        with st.container(border=True):
            with ui.friendly():
                run_id = data.run_of_eval_job(db, job.pid, job.started_at)
                run = data.run_info(db, run_id) if run_id else None
            done, total = heldout.progress(run) if run is not None else (0, 0)
            j1, j2 = st.columns([5, 1])
            j1.progress(
                done / total if total else 0.0,
                text=f"{job.label} · **{job.status}** · {done:,} of {total or '…'} episodes",
            )
            j2.button(
                "Cancel", key=f"train_eval_cancel_{job.id}", on_click=_cancel, args=(job.id,),
                disabled=job.status != "running", icon=":material/cancel:",
            )  # fmt: skip
            if run is not None and run.status == "finished":
                st.page_link(
                    "views/compare.py", label=f"{run_id}: its points are on Compare",
                    icon=":material/scatter_plot:", query_params={"benchmark": run.benchmark},
                )  # fmt: skip
            elif job.status == "stopped":
                st.caption(f"Cancelled: the {done:,} episodes it logged stay in the store.")
            elif job.status == "failed":
                st.error((job.log_tail(1) or "The evaluation ended without output.").strip())


eval_jobs()
