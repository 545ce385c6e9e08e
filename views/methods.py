"""Compare · methods: a methods contest (``agentqmix bench methods``) — the leaderboard with
intervals that include seed-to-seed variation, Agent Q-Mix's paired margins, the figures per
difficulty and per domain, the round-0 graph each checkpoint designs for a few held-out
tasks, and how each contestant was tuned; one protocol at a time, always named.

Linkable: ``/methods?contest=ID&protocol=tools&by=domain&metric=score&seed=12&tasks=3,41``.
"""

import streamlit as st

from lab import data, methods, params, ui

MAX_TASKS = 6  # tasks drawn at most (one row of graphs each)

db = data.db_path()
st.title("Compare: the methods contest")
st.page_link(
    "views/compare.py", label="Compare policies and topologies", icon=":material/arrow_back:"
)
url = ui.UrlState("methods")
url.seed("methods_by", "by", params.one_of(["difficulty", "domain"], "grouping"))
url.seed("methods_metric", "metric", params.one_of(list(methods.METRICS), "metric"))
url.seed("methods_all", "all", params.flag)
with ui.friendly():
    contests = data.contests(db)
if contests.empty:
    # A link's contest, protocol, seed or tasks name nothing here: say so, as for any value.
    for key, param, what in (
        ("methods_contest", "contest", "contest in this database"),
        ("methods_protocol", "protocol", "protocol of a contest here"),
        ("methods_seed", "seed", "training seed of a contest here"),
        ("methods_tasks", "tasks", "held-out episode of a contest here"),
    ):
        url.seed(key, param, params.one_of([], what))
    st.info(
        "No methods contest in this database yet: run `agentqmix bench methods --out "
        "runs/contest` (it logs to `$AGENTQMIX_DB` or ./agentqmix.duckdb, or to `--db`) and "
        "its results show here.",
        icon=":material/leaderboard:",
    )
    url.write()
    st.stop()

labels = {
    r["contest"]: f"{r['contest']} · {r['benchmark']} · {r['runs']} evaluation runs · "
    f"{r['started_at']:%Y-%m-%d %H:%M}"
    for _, r in contests.iterrows()
}
url.seed("methods_contest", "contest", params.one_of(list(labels), "contest in this database"))
if st.session_state.get("methods_contest") not in labels:
    st.session_state["methods_contest"] = next(iter(labels))  # the newest
contest = st.selectbox("Contest", list(labels), format_func=labels.get, key="methods_contest")
with ui.friendly():
    runs = data.contest_runs(db, contest)
settings = runs["contest"].iloc[-1]["settings"]
st.caption(
    f"{settings['benchmark']}: every run trained for {settings['episodes']:,} episodes on "
    f"training seeds {', '.join(map(str, settings['seeds']))}, after tuning on seed "
    f"{settings['tune_seed']} (stream {settings['tune_stream']}, "
    f"{settings['tune_episodes']:,} episodes; {settings['grid_size']} configurations each, "
    f"highest mean reward chosen); judged on held-out stream {settings['eval_stream']} "
    f"({settings['eval_episodes']:,} episodes, the same tasks for every policy). "
    f"Trials and table: `{runs['contest'].iloc[-1]['folder']}`."
)

protocols = sorted(runs["protocol"].unique())
url.seed("methods_protocol", "protocol", params.one_of(protocols, "protocol of this contest"))
if st.session_state.get("methods_protocol") not in protocols:
    st.session_state["methods_protocol"] = protocols[0]
protocol = st.radio(
    "Protocol", protocols, key="methods_protocol", horizontal=True,
    format_func=lambda p: methods.PROTOCOL_TEXT.get(p, p).split(" — ")[0],
)  # fmt: skip
st.info(f"Protocol **`{protocol}`**: {methods.PROTOCOL_TEXT.get(protocol, protocol)}.")
mine = runs[runs["protocol"] == protocol]
run_ids = tuple(sorted(mine["run_id"]))
with ui.friendly(), st.spinner("Bootstrapping the intervals…"):
    standings = data.contest_standings(db, contest, run_ids)
    board = data.contest_leaderboard(db, contest, run_ids)
    claim = data.contest_claim(db, contest, run_ids)

st.subheader(f"Leaderboard · protocol `{protocol}`")
st.caption(
    "Means over training seeds and held-out episodes, with 95 % intervals from the contest's "
    "hierarchical bootstrap: a policy's training seeds resampled, then the episodes — so "
    "seed-to-seed variation is inside each interval (a fixed topology has one run: episode "
    "noise only). Q-Mix − it: paired by task, each side's seeds resampled apart. "
    f"{methods.RESAMPLES} resamples here; the contest's own table is in its folder."
)
st.dataframe(
    methods.leaderboard_table(board), hide_index=True, width="stretch", key="methods_board",
    column_config={"policy": st.column_config.TextColumn("policy", pinned=True)},
)  # fmt: skip
if claim:
    st.caption(claim)

st.subheader(f"By difficulty and domain · protocol `{protocol}`")
c1, c2, c3 = st.columns([2, 4, 3])
by = c1.radio("Group by", ["difficulty", "domain"], key="methods_by", horizontal=True)
metric = c2.radio(
    "Figure", list(methods.METRICS), format_func=methods.METRICS.get, key="methods_metric",
    horizontal=True,
)  # fmt: skip
everyone = c3.toggle(
    "Fixed and ablations", key="methods_all",
    help="Draw the fixed topologies and the papers' readings (ablations) beside the contestants.",
)  # fmt: skip
shown = standings.policies
if not everyone:
    shown = shown[shown["kind"] == "contestant"]
names = tuple(shown["label"])
with ui.friendly():
    bars = data.contest_subsets(db, contest, run_ids, by, metric, names, False)
    margins = data.contest_subsets(db, contest, run_ids, by, metric, names, True)
ui.chart(
    methods.subset_figure(bars, by, methods.METRICS[metric]), key="methods_by_subset",
)  # fmt: skip
if not margins.empty:
    ahead = "Q-Mix spends more" if metric in ("tokens", "prompt", "completion") else "Q-Mix ahead"
    st.markdown(f"##### Agent Q-Mix − it, {methods.METRICS[metric]} (above 0: {ahead})")
    ui.chart(
        methods.subset_figure(margins, by, f"Q-Mix − it: {methods.METRICS[metric]}"),
        key="methods_margins",
    )

st.subheader(f"The graphs each checkpoint designs · protocol `{protocol}`")
learned = standings.policies[standings.policies["kind"] == "contestant"]
if learned.empty:
    st.info("No contestant of this protocol has finished its evaluation yet.")
    url.write(contest=contest, protocol=protocol, by=by, metric=metric)
    st.stop()
seeds = sorted({s for ss in learned["seeds"] for s in ss})
with ui.friendly():
    plans = data.first_round_plans(db, tuple(r for ids in learned["run_ids"] for r in ids))
st.caption(
    "Round 0 of each held-out task: how many distinct graphs (edges and actions) each "
    "checkpoint designed over all the tasks, and how often its most common one. A method "
    "that designs per query has many; one graph on every task is a fixed topology, learned."
)
st.dataframe(
    methods.design_counts(plans, standings, list(learned["label"])), hide_index=True,
    key="methods_designs",
    column_config={"most common": st.column_config.NumberColumn(format="percent")},
)  # fmt: skip
tasks = standings.tasks
url.seed("methods_seed", "seed", params.one_of(seeds, "training seed of this contest"))
url.seed("methods_tasks", "tasks", params.some_of(list(tasks["episode"]), "held-out episode"))
if st.session_state.get("methods_seed") not in seeds:
    st.session_state["methods_seed"] = seeds[0]
if "methods_tasks" not in st.session_state:
    st.session_state["methods_tasks"] = methods.default_tasks(tasks)
# Tasks of another contest (the picker moved) are not options here; a link may name more
# than the page draws.
picked = [t for t in st.session_state["methods_tasks"] if t in set(tasks["episode"])]
if len(picked) > MAX_TASKS:
    st.warning(f"The link names {len(picked)} tasks; the first {MAX_TASKS} are drawn.")
st.session_state["methods_tasks"] = picked[:MAX_TASKS]
g1, g2 = st.columns([1, 3])
seed = g1.selectbox("Checkpoint (training seed)", seeds, key="methods_seed")
chosen = g2.multiselect(
    "Held-out tasks", list(tasks["episode"]), key="methods_tasks", max_selections=MAX_TASKS,
    format_func=lambda e: methods.task_label(tasks, e),
)  # fmt: skip
for episode in chosen:
    st.markdown(f"**{methods.task_label(tasks, episode)}**")
    columns = st.columns(len(learned))
    for col, (_, p) in zip(columns, learned.iterrows(), strict=True):
        with col:
            if seed not in p["seeds"]:
                st.caption(f"{p['label']}: no checkpoint of seed {seed}")
                continue
            run_id = p["run_ids"][p["seeds"].index(seed)]
            with ui.friendly():
                record = data.episode(db, run_id, int(episode))
            st.markdown(f"[{p['label']}]({ui.replay_link(run_id, episode, 0)})")
            if record is None:
                st.caption("not logged")
                continue
            st.plotly_chart(
                methods.round0_figure(record), width="stretch", config=ui.plotly_config(),
                key=f"methods_graph_{p['label']}_{episode}",
            )  # fmt: skip
            st.caption(methods.round0_text(record))

with st.expander(f"How each contestant was tuned · protocol `{protocol}`"):
    st.caption(
        f"Trained on seed {settings['tune_seed']}, judged on stream {settings['tune_stream']} "
        "(never the evaluation stream); rule: the highest mean reward, ties to fewer tokens."
    )
    st.dataframe(methods.tuning_table(mine), hide_index=True, key="methods_tuning")

url.write(
    contest=contest, protocol=protocol, by=by, metric=metric, all="true" if everyone else None,
    seed=seed, tasks=",".join(map(str, chosen)) or None,
)  # fmt: skip
