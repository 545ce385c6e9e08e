"""Replay: pick an episode and step through its rounds; every panel follows one round slider."""

import streamlit as st

from core.actions import ACTION_NAMES
from lab import data, ui

# Episodes offered in the picker at a time (a long run is paged with "From episode #").
PAGE = 200

db = data.db_path()
st.title("Replay an episode")
runs = ui.require_runs(db)

# ---------------------------------------------------------------- choose an episode
run_ids = runs.loc[runs["episodes"] > 0, "id"].tolist()
if not run_ids:
    st.info("No run has finished an episode yet. Runs in progress show up here within seconds.")
    st.stop()
labels = {r["id"]: ui.run_label(r) for _, r in runs.iterrows()}
c_run, c_bench, c_pol, c_ok, c_fail = st.columns([3, 1, 1, 1, 1])
run_id = c_run.selectbox("Run", run_ids, format_func=labels.get, key="replay_run")
with ui.friendly():
    benchmarks = data.distinct(db, "benchmark")
    policies = data.distinct(db, "policy")
benchmark = c_bench.selectbox(
    "Benchmark", [None, *benchmarks], format_func=lambda v: v or "any", key="replay_benchmark"
)
policy = c_pol.selectbox(
    "Policy", [None, *policies], format_func=lambda v: v or "any", key="replay_policy"
)
correct = c_ok.selectbox(
    "Result", [None, True, False], format_func={None: "any", True: "right", False: "wrong"}.get,
    key="replay_correct",
)  # fmt: skip
failed = c_fail.selectbox(
    "Failures", [None, True, False], format_func={None: "any", True: "with", False: "without"}.get,
    key="replay_failures",
)  # fmt: skip
c_ep, c_from = st.columns([5, 1])
from_episode = c_from.number_input(
    "From episode #", 0, None, 0, step=PAGE, key="replay_from",
    help=f"The list holds up to {PAGE} matching episodes from this index on.",
)  # fmt: skip
with ui.friendly():
    episodes = data.episodes(
        db, run_id, benchmark, policy, correct, failed, PAGE, int(from_episode)
    )
if episodes.empty:
    st.info("No episode of this run matches the filters (from this index on).")
    st.stop()
episode_labels = data.episode_labels(episodes)


def _reset_round() -> None:
    st.session_state["replay_round"] = 0
    st.session_state["replay_playing"] = False


index = c_ep.selectbox(
    "Episode", list(episode_labels), format_func=episode_labels.get, key="replay_episode",
    on_change=_reset_round,
)  # fmt: skip
with ui.friendly():
    record = data.episode(db, run_id, int(index))
if record is None or not record.rounds:
    st.warning("This episode has no rounds to replay.")
    st.stop()

# ---------------------------------------------------------------- the task and the result
n_rounds = len(record.rounds)
with st.container(border=True):
    left, right = st.columns([3, 2])
    left.markdown(
        f"**{record.benchmark} · {record.domain} · difficulty {record.difficulty}** — {record.task_id}"
    )
    left.markdown(record.question[:1200])
    verdict = "✔ right" if record.score > 0 else "✘ wrong"
    right.metric(
        "Team answer",
        str(record.team_answer),
        verdict,
        delta_color="normal" if record.score > 0 else "inverse",
    )
    right.caption(
        f"ground truth **{record.ground_truth}** · reward {record.reward:.3f} · "
        f"{record.tokens:,} tokens · policy **{record.policy}**"
    )
    if record.failures:
        right.caption(
            "failures: "
            + ", ".join(
                f"agent {f['agent']} {f['mode']} from round {f['from_round']}"
                for f in record.failures
            )
        )

# ---------------------------------------------------------------- round controls
st.session_state.setdefault("replay_round", 0)
st.session_state.setdefault("replay_playing", False)
st.session_state["replay_round"] = min(st.session_state["replay_round"], n_rounds - 1)
playing = st.session_state["replay_playing"]


def _toggle_play() -> None:
    st.session_state["replay_playing"] = not st.session_state["replay_playing"]
    if st.session_state["replay_playing"]:
        st.session_state["replay_just_started"] = True
        if st.session_state["replay_round"] >= n_rounds - 1:
            st.session_state["replay_round"] = 0


st.button(
    "⏸ Pause" if playing else "▶ Play rounds", key="replay_play", on_click=_toggle_play,
    help="Advance one round a second; every panel follows.",
)  # fmt: skip


def _step(delta: int) -> None:
    st.session_state["replay_round"] = min(
        max(st.session_state["replay_round"] + delta, 0), n_rounds - 1
    )


@st.fragment(run_every=1.2 if playing else None)
def panels() -> None:
    # Each timed rerun while playing moves one round on; the rerun that starts playing does not.
    if st.session_state["replay_playing"] and not st.session_state.pop(
        "replay_just_started", False
    ):
        _step(+1)
    b1, b2, slider = st.columns([1, 1, 10])
    b1.button("◀ step", key="replay_prev", on_click=_step, args=(-1,), disabled=n_rounds == 1)
    b2.button("step ▶", key="replay_next", on_click=_step, args=(+1,), disabled=n_rounds == 1)
    if n_rounds > 1:
        slider.slider("Round", 0, n_rounds - 1, key="replay_round")
    r = st.session_state["replay_round"]
    figs = data.replay_figures(db, run_id, int(index), r)
    rnd = record.rounds[r]

    g, side = st.columns([5, 4])
    with g:
        st.markdown(
            f"#### Round {r} of {n_rounds - 1}"
            + (f" · Q_tot = {rnd.q_tot:.3f}" if rnd.q_tot is not None else "")
        )
        ui.chart(figs["graph"], key="replay_graph")
        st.caption(
            "Arrows point from the agent that is read to the reader. Dashed red: an edge dropped "
            "to break a cycle. Red ring: a failed agent. ◆ D: the decision agent (its inputs in the last round)."
        )
    with side:
        ui.chart(
            figs["q"],
            key="replay_q",
            empty=f"**{record.policy}** is a fixed topology: it has no Q-values.",
        )
        ui.chart(figs["mixer"], key="replay_mixer", empty="No mixer view for this policy.")

    st.markdown("##### Agents this round")
    st.dataframe(figs["table"], hide_index=True, width="stretch", key="replay_table")
    read, tok = st.columns([3, 2])
    with read:
        st.markdown("##### What each agent read")
        steps = {s.agent: s for s in rnd.steps}
        tabs = st.tabs([f"{i} {role}" for i, role in enumerate(record.roles)])
        for i, tab in enumerate(tabs):
            step = steps.get(i)
            with tab:
                if step is None:
                    st.caption("Inactive this round.")
                    continue
                st.caption(
                    f"{ACTION_NAMES[step.action]} · read from {step.read_from or 'nobody'} · {step.tokens} tokens"
                )
                for m in (m for m in rnd.messages if m.dst == i):
                    st.markdown(
                        f"**from {m.src}** (answer {m.answer}, conf {m.confidence:.2f}): {m.text}"
                    )
                st.markdown(f"**wrote:** {step.text or '—'}")
        if not figs["messages"].empty:
            with st.expander("All messages of the round"):
                st.dataframe(
                    figs["messages"], hide_index=True, width="stretch", key="replay_messages"
                )
    with tok:
        ui.chart(figs["tokens"], key="replay_tokens")
    data.prebuild_rounds(db, run_id, int(index), n_rounds)
    if st.session_state["replay_playing"] and r >= n_rounds - 1:
        st.session_state["replay_playing"] = False
        st.rerun(scope="app")


panels()
