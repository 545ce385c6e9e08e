"""Compare: accuracy vs tokens, one point per policy in each run (checkpoints stay apart),
with 95 % intervals and the Pareto front; click a point for the episodes behind it.

Linkable: the benchmark, the toggles, the chosen point and the two runs side by side are
in the URL (``/compare?benchmark=math&point=RUN_ID:POLICY&a=RUN&b=RUN``).
"""

import streamlit as st

from lab import calibration, data, figures, params, simreal, ui
from lab.policies import knob_text

db = data.db_path()
st.title("Compare policies and topologies")
st.page_link(
    "views/methods.py", label="The methods contest (bench methods)", icon=":material/leaderboard:"
)
runs = ui.require_runs(db)
url = ui.UrlState("compare")
with ui.friendly():
    benchmarks = data.distinct(db, "benchmark")

url.seed("compare_benchmark", "benchmark", params.one_of(benchmarks, "benchmark in this database"))
url.seed("compare_healthy", "healthy", params.flag)
url.seed("compare_training", "training", params.flag)
c1, c2, c3 = st.columns([2, 3, 3])
benchmark = c1.selectbox(
    "Benchmark", [None, *benchmarks], format_func=lambda v: v or "all", key="compare_benchmark"
)
healthy = c2.toggle(
    "Healthy episodes only (no injected failures)", value=True, key="compare_healthy"
)
training = c3.toggle(
    f"Include {data.TRAINING_LABEL} episodes",
    value=False,
    key="compare_training",
    help="Episodes played while training explore at random (ε); they say how training "
    "went, not how a policy performs, so they are left out by default.",
)
with ui.friendly():
    agg = data.aggregate(
        db,
        ("run_id", "policy", "backend", "model"),
        None,
        benchmark,
        False if healthy else None,
        training,
    )
if agg.empty:
    st.info("No episodes match; try another benchmark or include episodes with failures.")
    url.write(benchmark=benchmark, healthy=None if healthy else "false", training=None)
    st.stop()
points = {
    f"{r}:{p}": label
    for r, p, label in zip(agg["run_id"], agg["policy_id"], agg["label"], strict=True)
}


def _picked(fig) -> None:
    # A click on the chart picks the point behind it (its customdata names run and policy).
    event = st.session_state.get("compare_pareto")
    try:
        pts = event["selection"]["points"]
    except (KeyError, TypeError):
        return
    key = figures.point_key(fig, pts[0]) if pts else None
    if key in points:
        st.session_state["compare_point"] = key


st.subheader("Accuracy vs tokens")
st.caption(
    "One point per policy in each run (two checkpoints never merge); bars: 95 % intervals "
    "(Wilson for accuracy, normal SE for mean tokens). Click a point for its episodes. "
    "Each learned method (Agent Q-Mix, GPTSwarm, AgentPrune, AgentDropout, G-Designer) and "
    "each fixed topology has its own colour; points of one method differ by marker, and the "
    "hover says what a point is (family, the token weight it was trained at, its knob). "
    "Simulated and real-model runs are drawn in separate panels, each with its own front: "
    "their tokens and accuracies are not one trade-off."
)
if training:
    st.caption(
        f"Hollow circles: {data.TRAINING_LABEL} episodes, one per training run in its method's "
        "colour — played while the method explored (Agent Q-Mix: ε-greedy), not a policy's "
        "held-out result, so never on a front. *Evaluate on held-out tasks* (Train page) plays "
        "a finished run's policy."
    )
fig = figures.pareto_figure(agg)
ui.chart(fig, key="compare_pareto", on_select=lambda: _picked(fig))
for engine, front in figures.fronts(agg).items():
    st.caption(
        f"On the Pareto front{f' of {engine}' if engine else ''} (nothing is both cheaper and "
        f"more accurate): **{', '.join(front['label'])}**."
    )

url.seed("compare_point", "point", params.one_of(list(points), "point of this chart"))
if st.session_state.get("compare_point") not in points:
    st.session_state.pop("compare_point", None)
point = st.selectbox(
    "Episodes behind a point",
    [None, *points],
    format_func=lambda k: "— click a point, or pick one here —" if k is None else points[k],
    key="compare_point",
)
if point is not None:
    run_id, policy_id = point.split(":", 1)
    with ui.friendly():
        listing = data.Listing(
            run_id, benchmark, policy_id, with_failures=False if healthy else None
        )
        eps = data.episodes(db, listing, limit=500)
    eps = eps.assign(replay=[ui.replay_link(run_id, e) for e in eps["episode"]])
    st.dataframe(
        eps[
            [
                "replay",
                "episode",
                "task_id",
                "difficulty",
                "correct",
                "tokens",
                "reward",
                "n_failed",
            ]
        ],  # fmt: skip
        hide_index=True,
        width="stretch",
        column_config={
            "replay": st.column_config.LinkColumn("replay", display_text="open in Replay"),
            "correct": st.column_config.CheckboxColumn("right"),
            "reward": st.column_config.NumberColumn(format="%.3f"),
        },
        key="compare_point_episodes",
    )
    st.caption(f"{len(eps):,} episodes (up to 500 listed) of {points[point]}.")

st.subheader("Rewards")
table = agg.assign(
    accuracy_ci=[
        f"{lo:.0%}–{hi:.0%}" for lo, hi in zip(agg["accuracy_lo"], agg["accuracy_hi"], strict=True)
    ],
    reward_ci=[
        "—" if lo != lo else f"{lo:.3f} – {hi:.3f}"
        for lo, hi in zip(agg["reward_lo"], agg["reward_hi"], strict=True)
    ],
    trained_at=agg["token_weight"],
    knob_text=[knob_text(k) for k in agg["knob"]],
).sort_values("mean_reward", ascending=False)
st.dataframe(
    table[
        [
            "label",
            "family",
            "method",
            "trained_at",
            "knob_text",
            "engine",
            "episodes",
            "accuracy",
            "accuracy_ci",
            "mean_tokens",
            "mean_reward",
            "reward_ci",
        ]
    ],  # fmt: skip
    hide_index=True,
    width="stretch",
    column_config={
        "label": st.column_config.TextColumn("policy · run", width="medium", pinned=True),
        "family": st.column_config.TextColumn("family", help="learned or fixed topology"),
        "method": st.column_config.TextColumn("method"),
        "trained_at": st.column_config.NumberColumn(
            "trained at w",
            help="the token weight of the reward it was trained at",
            format="%g",
        ),
        "knob_text": st.column_config.TextColumn("knob", help="its method's knob and value"),
        "engine": st.column_config.TextColumn("back-end · model"),
        "episodes": st.column_config.NumberColumn("n"),
        "accuracy": st.column_config.NumberColumn(format="percent"),
        "accuracy_ci": st.column_config.TextColumn("accuracy 95 % CI"),
        "mean_tokens": st.column_config.NumberColumn("mean tokens", format="%.0f"),
        "mean_reward": st.column_config.NumberColumn("mean reward", format="%.3f"),
        "reward_ci": st.column_config.TextColumn("reward 95 % CI"),
    },
    key="compare_rewards",
)

st.subheader("Sweeps: the learned trade-off against the fixed topologies")
with ui.friendly():
    sweeps = data.sweeps(db)
live = data.live_sweeps(db)
sweep_labels = {r["sweep_id"]: data.sweep_label(r) for _, r in sweeps.iterrows()}
for sid, progress in live.items():  # started, maybe with no trial in the store yet
    sweep_labels.setdefault(sid, f"{sid} · {progress.benchmark} · {progress.line()}")
sweep_labels = dict(
    sorted(sweep_labels.items(), key=lambda kv: kv[0] not in live or not live[kv[0]].live)
)  # running sweeps first
url.seed("compare_sweep", "sweep", params.one_of(list(sweep_labels), "sweep in this database"))
sweep = None
if not sweep_labels:
    st.caption(
        "No sweep yet. `agentqmix sweep --benchmark mixed --token-weights 0.1,0.3,1.0 "
        "--seeds 0,1 ...` with the same `--db` trains one policy per token weight and seed and "
        "plays them and every fixed topology on the same held-out tasks (docs/sweep.md); "
        "it shows here live while it runs."
    )
else:
    if st.session_state.get("compare_sweep") not in sweep_labels:
        st.session_state["compare_sweep"] = next(iter(sweep_labels))
    sweep = st.selectbox(
        "Sweep", list(sweep_labels), format_func=sweep_labels.get, key="compare_sweep"
    )
    running = sweep in live and live[sweep].live

    @st.fragment(run_every=3.0 if running else None)
    def sweep_view() -> None:
        # While the sweep runs, its trials land in the store one by one: redraw every 3 s.
        progress = data.live_sweeps(db).get(sweep)
        if progress is not None and progress.state != "finished":
            st.progress(
                (progress.done + progress.failed) / max(progress.total, 1),
                text=f"{'Running' if progress.live else 'Ended'}: {progress.line()}"
                + (f" — {progress.error}" if progress.error else ""),
            )
        with ui.friendly():
            sweep_pts = data.sweep_points(
                db, sweep, None if progress is None else progress.done + progress.failed
            )
        if sweep_pts.empty:
            st.info("No held-out episodes of this sweep yet: its first trial is still training.")
            return
        rules = sorted(sweep_pts["pass_through"].unique())
        st.caption(
            f"Answered by **{', '.join(figures.engines(sweep_pts))}**"
            f"; decision agent: **{', '.join(rules)}** (pass-through; off = the paper's). "
            "Learned trials in their method's colour (Agent Q-Mix and each learned-topology "
            "method its own), darker for a larger token weight, one marker per training seed "
            "(and knob value); the hover names method, token weight and knob. Diamonds: the "
            "fixed topologies on the same held-out tasks, each in its own colour. Bars: 95 % "
            "intervals (Wilson for accuracy, normal SE for mean tokens); dashed: the front so "
            "far, its points named (hover for the rest). One panel and front per back-end · "
            "model and per pass-through rule when the sweep has several."
        )
        ui.chart(figures.sweep_figure(sweep_pts), key="compare_sweep_chart")
        st.dataframe(
            sweep_pts.assign(
                accuracy_ci=[
                    f"{lo:.0%}–{hi:.0%}"
                    for lo, hi in zip(sweep_pts["accuracy_lo"], sweep_pts["accuracy_hi"], strict=True)
                ],
                on_front=sweep_pts.index.isin(
                    [i for front in figures.fronts(sweep_pts).values() for i in front.index]
                ),
            )[["label", "method", "engine", "pass_through", "episodes", "accuracy", "accuracy_ci",
               "mean_tokens", "mean_reward", "on_front"]],
            hide_index=True, width="stretch", key="compare_sweep_table",
            column_config={
                "label": st.column_config.TextColumn("point", pinned=True),
                "method": st.column_config.TextColumn("method"),
                "engine": st.column_config.TextColumn("back-end · model"),
                "pass_through": st.column_config.TextColumn("pass-through"),
                "episodes": st.column_config.NumberColumn("n"),
                "accuracy": st.column_config.NumberColumn(format="percent"),
                "accuracy_ci": st.column_config.TextColumn("accuracy 95 % CI"),
                "mean_tokens": st.column_config.NumberColumn("mean tokens", format="%.0f"),
                "mean_reward": st.column_config.NumberColumn("mean reward", format="%.3f"),
                "on_front": st.column_config.CheckboxColumn("on the front of its panel"),
            },
        )  # fmt: skip

    sweep_view()

st.subheader("Which actions, when")
policies = sorted(agg["policy_id"].unique())
url.seed("compare_policy", "policy", params.one_of(policies, "policy here"))
if st.session_state.get("compare_policy") not in policies:
    st.session_state["compare_policy"] = "qmix" if "qmix" in policies else policies[0]
policy = st.selectbox("Policy", policies, format_func=data.policy_label, key="compare_policy")
d1, d2 = st.columns(2)
with ui.friendly():
    by_diff = data.action_distribution(db, "difficulty", None, benchmark, policy)
    by_round = data.action_distribution(db, "round", None, benchmark, policy)
with d1:
    st.markdown("##### by task difficulty")
    ui.chart(figures.action_mix_figure(by_diff, "difficulty"), key="compare_by_difficulty")
with d2:
    st.markdown("##### by round")
    ui.chart(figures.action_mix_figure(by_round, "round"), key="compare_by_round")

st.subheader("Two runs side by side")
st.caption(
    "The runs drawn above, under the same benchmark and toggles (so a training run is offered "
    "only when its episodes are included); figures over the episodes those keep."
)
# Runs in the chart's order and under its filters; figures summed over a run's policies.
per_run = (
    agg.assign(
        _right=agg["accuracy"] * agg["episodes"],
        _tokens=agg["mean_tokens"] * agg["episodes"],
        _reward=agg["mean_reward"] * agg["episodes"],
    )
    .groupby("run_id", sort=False)[["episodes", "_right", "_tokens", "_reward"]]
    .sum()
)
labels = {r["id"]: ui.run_label(r) for _, r in runs.iterrows() if r["id"] in per_run.index}
ids = list(labels)
url.seed_run("compare_run_a", "a", labels)
url.seed_run("compare_run_b", "b", labels)
for key, default in (("compare_run_a", 0), ("compare_run_b", min(1, len(ids) - 1))):
    if st.session_state.get(key) not in labels:
        st.session_state[key] = ids[default]
s1, s2 = st.columns(2)
pair = [
    s1.selectbox("Run A", ids, format_func=labels.get, key="compare_run_a"),
    s2.selectbox("Run B", ids, format_func=labels.get, key="compare_run_b"),
]
for col, run_id, side in zip((s1, s2), pair, ("a", "b"), strict=True):
    row = per_run.loc[run_id]
    n = int(row["episodes"])
    with col:
        m1, m2, m3 = st.columns(3)
        m1.metric("accuracy", f"{row['_right'] / n:.1%}", help=f"n = {n:,} episodes")
        m2.metric("mean tokens", f"{row['_tokens'] / n:.0f}")
        m3.metric("mean reward", f"{row['_reward'] / n:.3f}")
        with ui.friendly():
            mix = data.action_distribution(db, "round", (run_id,), benchmark)
        st.markdown("##### actions by round")
        ui.chart(figures.action_mix_figure(mix, "round", height=260), key=f"compare_mix_{side}")

calibrations = data.runs(db, "calibrate")
if not calibrations.empty:
    st.subheader("Simulated vs real")
    cal_labels = {r["id"]: calibration.label(r) for _, r in calibrations.iterrows()}
    cal = st.selectbox(
        "Calibration (agentqmix calibrate)", list(cal_labels), format_func=cal_labels.get,
        key="compare_calibration",
    )  # fmt: skip
    with ui.friendly():
        report = data.calibration_report(db, cal)
    st.caption(calibration.caption(report))
    for which in ("by_topology", "by_action"):
        st.dataframe(calibration.check_frame(report, which), hide_index=True)

studies = data.runs(db, "study")
if not studies.empty:
    st.subheader("Sim vs real")
    study_labels = {r["id"]: simreal.label(r) for _, r in studies.iterrows()}
    chosen = st.selectbox(
        "Transfer study (agentqmix study transfer)", list(study_labels),
        format_func=study_labels.get, key="compare_study",
    )  # fmt: skip
    with ui.friendly():
        result = data.study_result(db, chosen)
    st.caption(simreal.caption(result))
    st.dataframe(simreal.policy_frame(result), hide_index=True)
    st.dataframe(simreal.ranking_frame(result), hide_index=True)
    st.dataframe(simreal.differences_frame(result), hide_index=True)

url.write(
    benchmark=benchmark, healthy=None if healthy else "false", training="true" if training else None,
    point=point, policy=policy, a=pair[0], b=pair[1], sweep=sweep,
)  # fmt: skip
