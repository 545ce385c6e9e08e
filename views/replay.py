"""Replay: pick an episode and step through its rounds; one round control moves every panel.

Linkable: ``/replay?run=RUN_ID&episode=N&round=R`` opens episode N of that run at round R
(rounds count from 1, as people count them; the filters, search, sort order and page
travel in the URL too, so a shared link opens the sender's view).
"""

import math

import streamlit as st

from core.actions import ACTION_NAMES
from core.records import DECISION_AGENT
from lab import data, episode_export, figures, params, sidebyside, ui

# Episodes offered in the picker at a time (a long run is paged).
PAGE = 200
ORDERS = {
    "episode #": ("episode", False),
    "tokens, most first": ("tokens", True),
    "tokens, fewest first": ("tokens", False),
    "reward, best first": ("reward", True),
    "reward, worst first": ("reward", False),
    "difficulty, hardest first": ("difficulty", True),
    "difficulty, easiest first": ("difficulty", False),
}
# Widgets that depend on the run: a new run starts them afresh (no stale filter or page).
RUN_DEPENDENT = (
    "replay_benchmark", "replay_policy", "replay_correct", "replay_failures", "replay_search",
    "replay_order", "replay_page", "replay_episode",
)  # fmt: skip
RESULTS = {None: "any", True: "right", False: "wrong"}
FAILURES = {None: "any", True: "with", False: "without"}
# Episode indices a link may name (anything larger is no episode of any run).
MAX_INDEX = 2**62
# Seconds between a round drawn and the next one shown while playing.
PLAY_PAUSE_S = 1.2

db = data.db_path()
st.title("Replay an episode")
runs = ui.require_runs(db)
url = ui.UrlState("replay")


def _reset_round() -> None:
    st.session_state["replay_round"] = 1
    st.session_state["replay_playing"] = False


def _reset_for_run() -> None:
    for key in RUN_DEPENDENT:
        st.session_state.pop(key, None)
    _reset_round()


def _reset_page() -> None:
    st.session_state.pop("replay_page", None)
    st.session_state.pop("replay_episode", None)
    _reset_round()


# ---------------------------------------------------------------- choose an episode
run_ids = runs.loc[runs["episodes"] > 0, "id"].tolist()
if not run_ids:
    st.info("No run has finished an episode yet. Runs in progress show up here within seconds.")
    st.stop()
labels = {r["id"]: ui.run_label(r) for _, r in runs.iterrows()}

if url.seed_run("replay_run", "run", {r: labels[r] for r in run_ids}):
    # A link names a run: start from its plain listing, then apply the rest of the link.
    _reset_for_run()
elif st.session_state.get("replay_run") not in run_ids:
    # No link: a learned policy's held-out episodes, not the newest robustness sweep.
    st.session_state["replay_run"] = data.replay_first(runs)
run_id = st.selectbox(
    "Run", run_ids, format_func=labels.get, key="replay_run", on_change=_reset_for_run
)
st.caption(ui.run_provenance(runs.set_index("id").loc[run_id].rename(run_id)))
with ui.friendly():
    run_benchmarks = data.run_values(db, run_id, "benchmark")
    run_policies = data.run_values(db, run_id, "policy")

url.seed("replay_benchmark", "benchmark", params.one_of(run_benchmarks, "benchmark of this run"))
url.seed("replay_policy", "policy", params.one_of(run_policies, "policy of this run"))
url.seed("replay_correct", "result", params.one_of({v: k for k, v in RESULTS.items()}, "result"))
url.seed(
    "replay_failures", "failures",
    params.one_of({v: k for k, v in FAILURES.items()} | {"true": True, "false": False}, "choice"),
)  # fmt: skip
url.seed("replay_search", "q", params.text)
url.seed("replay_order", "sort", params.one_of(list(ORDERS), "sort order"))
# Page, episode and round are checked against the listing and the episode below.
link_page, link_episode, link_round = url.new("page"), url.new("episode"), url.new("round")

c_bench, c_pol, c_ok, c_fail = st.columns(4)
benchmark = c_bench.selectbox(
    "Benchmark", [None, *run_benchmarks], format_func=lambda v: v or "any",
    key="replay_benchmark", on_change=_reset_page,
)  # fmt: skip
policy = c_pol.selectbox(
    "Policy", [None, *run_policies], format_func=data.policy_label, key="replay_policy",
    on_change=_reset_page,
)  # fmt: skip
correct = c_ok.selectbox(
    "Result", list(RESULTS), format_func=RESULTS.get, key="replay_correct", on_change=_reset_page
)
failed = c_fail.selectbox(
    "Failures", list(FAILURES), format_func=FAILURES.get, key="replay_failures",
    on_change=_reset_page,
)  # fmt: skip
c_search, c_sort, c_page = st.columns([3, 2, 1])
search = c_search.text_input(
    "Search task id or question", key="replay_search", on_change=_reset_page,
    placeholder="e.g. gsm-12 or 'prime'",
)  # fmt: skip
order = c_sort.selectbox("Sort by", list(ORDERS), key="replay_order", on_change=_reset_page)
order_by, descending = ORDERS[order]
with ui.friendly():
    listing = data.Listing(run_id, benchmark, policy, correct, failed, search)
    n_match = data.count(db, listing)
n_pages = max(1, math.ceil(n_match / PAGE))
if link_page is not None:
    try:
        st.session_state["replay_page"] = params.whole(1, n_pages)(link_page)
    except params.BadParam as err:
        url.refuse("page", link_page, f"{err} (pages of this listing)", "page 1")
        st.session_state["replay_page"] = 1
if link_episode is not None:
    # The linked episode within the linked filters, search and sort: open the page holding it.
    try:
        linked = params.whole(0, MAX_INDEX)(link_episode)
        with ui.friendly():
            position = data.episode_position(db, listing, linked, order_by, descending)
            exists = position is not None or data.episode(db, run_id, linked) is not None
        if position is None:
            raise params.BadParam(
                "does not match this view's filters and search"
                if exists
                else "is not an episode of this run"
            )
    except params.BadParam as err:
        url.refuse("episode", link_episode, str(err), "the first episode of the listing")
        st.session_state.pop("replay_episode", None)
    else:
        st.session_state["replay_episode"] = linked
        st.session_state["replay_page"] = position // PAGE + 1
        st.session_state["replay_playing"] = False
        if link_round is None:
            st.session_state["replay_round"] = 1
page_value = st.session_state.get("replay_page", 1)
if not isinstance(page_value, int) or not 1 <= page_value <= n_pages:
    # The listing shrank under the page (a filter changed): back to its first page.
    st.session_state["replay_page"] = 1
page_no = c_page.number_input(
    f"Page (of {n_pages})", 1, n_pages, key="replay_page", on_change=_reset_round,
    help=f"{PAGE} matching episodes per page.",
)  # fmt: skip
view = dict(
    run=run_id, benchmark=benchmark, policy=policy,
    result=None if correct is None else RESULTS[correct],
    failures=None if failed is None else FAILURES[failed], q=search,
    sort=None if order == "episode #" else order,
    page=None if page_no == 1 else int(page_no),
)  # fmt: skip
with ui.friendly():
    episodes = data.episodes(db, listing, PAGE, order_by, descending, (int(page_no) - 1) * PAGE)
if episodes.empty:
    st.info("No episode of this run matches the filters and search.")
    url.write(**view, episode=None, round=None)
    st.stop()
episode_labels = data.episode_labels(episodes)
if st.session_state.get("replay_episode") not in episode_labels:
    # Set, not dropped: a dropped value leaves the browser showing the old listing's pick
    # (the widget keeps its key) while the page shows the new listing's first episode.
    st.session_state["replay_episode"] = next(iter(episode_labels))
index = st.selectbox(
    f"Episode ({n_match:,} match)", list(episode_labels), format_func=episode_labels.get,
    key="replay_episode", on_change=_reset_round,
)  # fmt: skip
with ui.friendly():
    record = data.episode(db, run_id, int(index))
if record is None or not record.rounds:
    st.warning("This episode has no rounds to replay.")
    st.stop()
n_rounds = len(record.rounds)
if link_round is not None:
    try:
        st.session_state["replay_round"] = params.whole(1, n_rounds)(link_round)
    except params.BadParam as err:
        url.refuse("round", link_round, f"{err} (the rounds of this episode)", "round 1")
        st.session_state["replay_round"] = 1

# ---------------------------------------------------------------- the task and the result
with st.container(border=True):
    left, right = st.columns([3, 2])
    left.markdown(
        f"**{record.benchmark} · {record.domain} · difficulty {record.difficulty}** — {record.task_id}"
    )
    if record.domain == "code":
        left.code(record.question[:4000], language="python")
    else:
        left.markdown(ui.markdown_literal(record.question[:1200]))
    right.metric("Team answer", str(record.team_answer))
    if record.score > 0:
        right.badge("right", icon=":material/check:", color="green")
    else:
        right.badge("wrong", icon=":material/close:", color="red")
    right.caption(
        f"ground truth **{record.ground_truth}** · reward {record.reward:.3f} · "
        f"**{record.tokens:,} tokens** · policy **{data.policy_label(record.policy)}**"
    )
    if record.failures:
        right.caption(
            "failures: "
            + ", ".join(
                f"agent {f['agent']} {f['mode']} from round {f['from_round'] + 1}"
                for f in record.failures
            )
        )

    # The buttons take the width their labels need (a third of the column cut "HTML an…").
    downloads = right.container(horizontal=True)
    stem = f"{run_id}-episode-{int(index)}"
    downloads.download_button(
        "JSON", lambda: episode_export.episode_json(record, run_id, int(index)),
        file_name=f"{stem}.json", mime="application/json", icon=":material/download:",
        key="replay_export_json", on_click="ignore", type="tertiary",
        help="Rounds, actions, graphs, Q-values, messages, what each agent was asked, tokens.",
    )  # fmt: skip
    downloads.download_button(
        "HTML animation", lambda: episode_export.episode_html(record, run_id, int(index)),
        file_name=f"{stem}.html", mime="text/html", icon=":material/slideshow:",
        key="replay_export_html", on_click="ignore", type="tertiary",
        help="One file that steps through the rounds in any browser, with no server.",
    )  # fmt: skip
    # A link, not a button that switches: it can be opened in a new tab or copied.
    downloads.page_link(
        "views/sidebyside.py", label="Compare with another run", icon=":material/view_column_2:",
        query_params=sidebyside.link_query(
            (run_id, record.policy), record.task_id, int(index), healthy=not record.failures
        ),
        help="This task played by another run or policy beside this one, rounds stepped together.",
    )  # fmt: skip

# ---------------------------------------------------------------- the one round control
# Rounds count from 1 here, in the URL and in the prompts; the records count from 0.
st.session_state.setdefault("replay_round", 1)
st.session_state.setdefault("replay_playing", False)
if not 1 <= st.session_state["replay_round"] <= n_rounds:
    st.session_state["replay_round"] = 1  # another episode, with fewer rounds
playing = st.session_state["replay_playing"]
url.write(**view, episode=int(index))


def _toggle_play() -> None:
    st.session_state["replay_playing"] = not st.session_state["replay_playing"]
    if st.session_state["replay_playing"]:
        st.session_state["replay_just_started"] = True
        if st.session_state["replay_round"] >= n_rounds:
            st.session_state["replay_round"] = 1


st.button(
    "Pause" if playing else "Play rounds", key="replay_play", on_click=_toggle_play,
    icon=":material/pause:" if playing else ":material/play_arrow:",
    # The timer starts once a round is drawn: the step is this pause plus the drawing (it
    # said "one a second" while rounds came every 1.5-1.9 s).
    help=f"Show the next round {PLAY_PAUSE_S:g} s after this one is drawn; every panel follows.",
)  # fmt: skip


@st.fragment(run_every=PLAY_PAUSE_S if playing else None)
def panels() -> None:
    # Each timed rerun while playing moves one round on; the rerun that starts playing does not.
    if st.session_state["replay_playing"] and not st.session_state.pop(
        "replay_just_started", False
    ):
        ui.step_round("replay", +1, n_rounds)
    number = ui.round_stepper("replay", n_rounds, "Round")
    url.write(round=number)
    r = number - 1  # the record's index of the round
    figs = data.replay_figures(db, run_id, int(index), r)
    rnd = record.rounds[r]

    g, side = st.columns([5, 4])
    with g:
        st.markdown(
            f"#### Round {number} of {n_rounds}"
            + (f" · Q_tot = {rnd.q_tot:.3f}" if rnd.q_tot is not None else "")
        )
        ui.chart(figs["graph"], key="replay_graph")
        st.caption(
            "An arrow a → b: b read a's answer this round (edges bow to the right of their "
            "direction, so a → b and b → a never overlap). Dashed red: asked for but dropped "
            "to break a cycle. Red ring: a failed agent. D (outside the ring): the decision "
            "agent; dotted grey, in the last round: the final answers it read."
        )
    with side:
        st.markdown("##### Q-values")
        ui.chart(
            figs["q"],
            key="replay_q",
            empty=f"**{data.policy_label(record.policy)}** has no Q-values (a fixed topology).",
        )
        if figs["q"] is not None:
            st.caption(figures.q_values_caption(rnd))
        if figs["credit"] is not None:
            st.markdown("##### The mixer: credit ∂Q_tot/∂Q_i and weights |W₁|")
            # One above the other: side by side in this column, each is too narrow to read.
            ui.chart(figs["credit"], key="replay_credit")
            ui.chart(figs["weights"], key="replay_weights")

    st.markdown("##### Agents this round")
    st.dataframe(
        figs["table"], hide_index=True, width="stretch", key="replay_table",
        column_config={"read from": st.column_config.TextColumn(width="small")},
    )  # fmt: skip
    so_far = sum(x.tokens for x in record.rounds[: r + 1])
    if r == n_rounds - 1 and record.decision is not None:
        so_far += record.decision.tokens
    st.caption(
        f"This round: {int(figs['table']['tokens'].sum()):,} tokens"
        + (" (with the decision agent D)" if r == n_rounds - 1 and record.decision else "")
        + f" · episode so far: {so_far:,} of {record.tokens:,}."
    )
    read, tok = st.columns([3, 2])
    with read:
        st.markdown("##### What each agent read, and was asked")
        steps = {s.agent: s for s in rnd.steps}
        if DECISION_AGENT in figs["asked"]:
            steps[DECISION_AGENT] = record.decision
        tabs = st.tabs([figs["names"][i] for i in figs["asked"]])
        for i, tab in zip(figs["asked"], tabs, strict=True):
            step = steps.get(i)
            with tab:
                if step is None or figures.failed_silent(step):
                    st.caption(
                        "Out of this round"
                        + (f" ({step.fault})." if step is not None and step.fault else ".")
                    )
                    ui.show_asked(figs["asked"][i])
                    continue
                how = (
                    "decides after the last round"
                    if i == DECISION_AGENT
                    else f"{ACTION_NAMES[step.action]} ({figures.choice(step)})"
                )
                st.caption(f"{how} · read from {step.read_from or 'nobody'} · {step.tokens} tokens")
                for m in (m for m in rnd.messages if m.dst == i):
                    st.markdown(
                        f"**from {m.src}** (answer {ui.markdown_literal(str(m.answer))}, "
                        f"conf {m.confidence:.2f}): {ui.markdown_literal(m.text)}"
                    )
                st.markdown(f"**wrote:** {ui.markdown_literal(step.text) or '—'}")
                ui.show_asked(figs["asked"][i])
    with tok:
        st.markdown(f"##### Tokens · {record.tokens:,} in the episode")
        ui.chart(figs["tokens"], key="replay_tokens")
    # At full width: in the left column their texts were cut off ("Answer: 4…").
    if not figs["calls"].empty:
        with st.expander("Calls of the round: tokens, latency, retries, cache, errors"):
            st.dataframe(figs["calls"], hide_index=True, width="stretch", key="replay_calls")
    if not figs["messages"].empty:
        with st.expander("All messages of the round"):
            st.dataframe(
                figs["messages"], hide_index=True, width="stretch", key="replay_messages",
                column_config={"text": st.column_config.TextColumn(width="large")},
            )  # fmt: skip
    data.prebuild_rounds(db, run_id, int(index), n_rounds)
    if st.session_state["replay_playing"] and number >= n_rounds:
        st.session_state["replay_playing"] = False
        st.rerun(scope="app")


panels()
