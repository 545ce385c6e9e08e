"""Failure lab: fail agents on a logged task, play it again now, in this process, and compare
with the healthy run; measure robustness.

Linkable: ``/failure_lab?run=RUN&episode=N&policy=fixed · full&agents=1,2&mode=crash&from=2``
(``from``: the first failed round, counted from 1; ``&fork=LAB_RUN`` reopens a fork played
before; ``&rbench=…&rrun=…`` the robustness view).
"""

import json
import time
from dataclasses import asdict

import streamlit as st

from lab import data, figures, forks, params, ui

# Episodes offered per evaluation run (any index forks as fast as another).
MAX_LISTED = 200
# Fixed topologies measured by default beside the learned policy (cheap to costly).
ROBUST_DEFAULT = ("single", "chain", "full")

db = data.db_path()
st.title("Failure lab")
st.caption(
    "Pick a logged evaluation episode (its task and its randomness), a policy and the agents to "
    "fail. The lab plays that episode again right here — with and without the failures — logs "
    "both as one labelled *lab* run, and shows them side by side. A failure from a later round "
    "forks the episode there: the rounds before it are the same on both sides."
)
runs = ui.require_runs(db)
url = ui.UrlState("failure_lab")
pending = st.session_state.pop("_fail_pending", {})
for key in ("fail_fork", "fail_robust_bench", "fail_robust_run"):
    if key in pending:
        st.session_state[key] = pending[key]
data.warm_rollout()  # PyTorch loads in the background while the reader picks

# ---------------------------------------------------------------- the task: a logged eval episode
evals = runs[(runs["kind"] == "eval") & (runs["episodes"] > 0)]
if evals.empty:
    st.info(
        "No evaluation run yet to take a task from. Evaluate a policy first, e.g. "
        "`agentqmix eval --benchmark mixed --policy full --episodes 20` with the same `--db`."
    )
    st.stop()
labels = {r["id"]: ui.run_label(r) for _, r in evals.iterrows()}
if url.seed_run("fail_run", "run", labels):
    st.session_state.pop("fail_episode", None)
c1, c2 = st.columns([3, 2])
base_run = c1.selectbox(
    "Take the task from run", list(labels), format_func=labels.get, key="fail_run",
    on_change=lambda: st.session_state.pop("fail_episode", None),
)  # fmt: skip
with ui.friendly():
    info = data.run_info(db, base_run)
    episodes = data.episodes(db, data.Listing(base_run), limit=MAX_LISTED)
if info is None or episodes.empty:
    st.info("This run has no episodes any more.")
    st.stop()
episode_labels = {
    int(i): f"#{i} · {task}"
    for i, task in zip(episodes["episode"], episodes["task_id"], strict=True)
}
url.seed(
    "fail_episode", "episode",
    params.one_of({str(i): i for i in episode_labels}, f"listed episode (first {MAX_LISTED}) of this run"),
)  # fmt: skip
if st.session_state.get("fail_episode") not in episode_labels:
    st.session_state.pop("fail_episode", None)
base_index = c2.selectbox(
    "Episode", list(episode_labels), format_func=episode_labels.get, key="fail_episode"
)
record = data.episode(db, base_run, int(base_index))
if record is None:
    st.warning("That episode is gone (was its run deleted?).")
    st.stop()
team_config = info.config.get("team", {})
opts = forks.fork_options(team_config)
st.markdown(
    f"**Task** {record.task_id} ({record.benchmark}, difficulty {record.difficulty}): "
    f"{record.question[:300]} · [open in Replay]({ui.replay_link(base_run, int(base_index), 0)})"
)

# ---------------------------------------------------------------- the policy and the failures
with ui.friendly():
    ckpts = data.checkpoints(db, tuple(opts.roles))
choices = {
    f"learned · {r['policy']} · {r['id']}": forks.PolicyChoice("checkpoint", r["checkpoint"])
    for _, r in ckpts.iterrows()
}
choices |= {f"fixed · {name}": forks.PolicyChoice("topology", name) for name in forks.TOPOLOGIES}
if ckpts.empty:
    st.caption(
        "No learned checkpoint for this team yet — train one on the **Train** page to fail a "
        "learned policy."
    )
n_agents, n_rounds = len(record.roles), len(record.rounds)
url.seed("fail_policy", "policy", params.one_of(list(choices), "policy"))
url.seed("fail_agents", "agents", params.some_of(range(n_agents), "agent of this team"))
url.seed("fail_mode", "mode", params.one_of(forks.MODES, "failure mode"))
url.seed("fail_from_round", "from", params.whole(1, n_rounds))
if st.session_state.get("fail_policy") not in choices:
    st.session_state.pop("fail_policy", None)
# Carried over from another episode (a smaller team, fewer rounds): what still applies.
st.session_state.setdefault("fail_agents", [min(1, n_agents - 1)])
st.session_state["fail_agents"] = [a for a in st.session_state["fail_agents"] if a < n_agents]
if not 1 <= st.session_state.get("fail_from_round", 1) <= n_rounds:
    st.session_state["fail_from_round"] = 1
p1, p2, p3, p4 = st.columns([2, 2, 1, 1])
policy_label = p1.selectbox("Policy", list(choices), key="fail_policy")
agents = p2.multiselect(
    "Agents to fail", list(range(n_agents)),
    format_func=lambda i: figures.agent_labels(record.roles)[i], key="fail_agents",
)  # fmt: skip
mode = p3.selectbox("How", forks.MODES, key="fail_mode")
from_round = p4.number_input(
    "From round",
    1,
    n_rounds,
    key="fail_from_round",
    help="The first failed round (1 = from the start).",
)
if len(agents) >= n_agents:
    st.warning("Keep at least one agent healthy.")


def _policy(choice: forks.PolicyChoice):
    """The chosen policy, loaded once per checkpoint file (and its modification time)."""
    mtime = data.checkpoint_mtime(choice.value) if choice.kind == "checkpoint" else None
    return data.policy(choice.kind, choice.value, mtime, json.dumps(asdict(opts)))


choice = choices[policy_label]
failures = forks.chosen_failures(agents, mode, from_round)
read_only = ui.read_only_notice(db, "playing and logging a fork")


def _clicked() -> None:
    # The wait a note reports starts at the click (callbacks run before the page is drawn
    # again), not after the page above the button is (it said 3.2 s where one waited 6.0 s).
    st.session_state["_fail_clicked"] = time.perf_counter()


def _waited() -> str:
    """Seconds since the click, to the note that reports it (drawn in the rerun after)."""
    return (
        f"{time.perf_counter() - st.session_state.get('_fail_clicked', time.perf_counter()):.1f} s"
    )


if st.button(
    "Run it now", type="primary", key="fail_run_now", on_click=_clicked,
    disabled=read_only or not agents or len(agents) >= n_agents,
):  # fmt: skip
    with st.status(f"Playing episode #{base_index} with and without the failures…") as status:
        if choice.kind == "checkpoint":
            status.write(f"loading {policy_label} (once per checkpoint)")
        with ui.friendly():
            policy = _policy(choice)
            status.write("playing both episodes and logging them")
            fork = forks.fork_episode(
                db, team_config, base_run, int(base_index), int(info.seed), policy,
                policy_label, failures,
            )  # fmt: skip
        status.update(label="Played and logged", state="complete", expanded=False)
    data.clear()
    # Widgets below cannot be set once drawn: the next run picks the new fork up first thing.
    st.session_state["_fail_pending"] = {
        "fail_fork": fork.run_id,
        "note": f"Played episode #{base_index} twice and logged both as run {fork.run_id} in "
        "{waited} (from your click).",
    }
    st.rerun()

# ---------------------------------------------------------------- side by side
fork_runs = runs[runs["kind"] == forks.FORK_KIND]
fork_ids = [st.session_state["fail_fork"]] if st.session_state.get("fail_fork") else []
fork_ids += [i for i in fork_runs["id"] if i not in fork_ids]
url.seed("fail_fork", "fork", params.one_of(fork_ids, "fork played in this lab"))
url.write(
    run=base_run, episode=int(base_index), policy=policy_label, agents=sorted(agents),
    mode=mode, fork=st.session_state.get("fail_fork"),
    **{"from": None if int(from_round) == 1 else int(from_round)},
)  # fmt: skip
if fork_ids:
    st.subheader("With and without the failures")
    if pending.get("note"):
        st.success(pending["note"].format(waited=_waited()), icon=":material/timer:")
    fork_labels = dict(zip(fork_runs["id"], fork_runs["fork_label"], strict=True))
    fork_id = st.selectbox(
        "Fork", fork_ids, key="fail_fork",
        format_func=lambda i: fork_labels.get(i) or i,
        help="Every fork played in this lab (a *lab* run each: episode 0 with the failures, "
        "episode 1 without).",
    )  # fmt: skip
    with ui.friendly():
        fork_info = data.run_info(db, fork_id)
        recs = [data.episode(db, fork_id, k) for k in (0, 1)]
    if fork_info is None or any(r is None for r in recs):
        st.warning("That fork's episodes are not in the database (was the run deleted?).")
    else:
        meta = fork_info.config.get("fork", {})
        failed_agents = sorted({int(f["agent"]) for f in meta.get("failures", [])})
        st.caption(
            f"Forked from [{meta.get('run')} #{meta.get('episode')}]"
            f"({ui.replay_link(meta.get('run', ''), int(meta.get('episode', 0)), 0)}) · "
            f"{meta.get('policy', fork_info.policy)} · failed: "
            f"{forks.stored_failure_text(meta.get('failures', []), recs[0].roles)}"
        )
        # Rounds counted from 1, as the rest of the page counts them.
        n_shown = len(recs[0].rounds)
        r_show = st.slider("Round", 1, n_shown, n_shown, key="fail_show_round") - 1
        cols = st.columns(2)
        for k, (col, rec) in enumerate(zip(cols, recs, strict=True)):
            side = forks.FORK_SIDES[k]
            with col:
                st.markdown(f"#### {side}")
                st.markdown(f"[open in Replay]({ui.replay_link(fork_id, k, 0)})")
                a, b, c = st.columns(3)
                a.metric("answer", str(rec.team_answer))
                if rec.score > 0:
                    a.badge("right", icon=":material/check:", color="green")
                else:
                    a.badge("wrong", icon=":material/close:", color="red")
                b.metric("tokens", f"{rec.tokens:,}")
                c.metric("reward", f"{rec.reward:.3f}")
                r = min(r_show, len(rec.rounds) - 1)
                ui.chart(figures.communication_graph(rec, r), key=f"fail_graph_{k}")
        # The tables at full width, one side above the other: in half a page their answers
        # and texts were cut off ("[coder · deba…").
        names = ", ".join(figures.agent_name(a, recs[0].roles) for a in failed_agents)
        for k, rec in enumerate(recs):
            side = forks.FORK_SIDES[k]
            st.markdown(f"##### {side}: round {min(r_show, len(rec.rounds) - 1) + 1}")
            st.dataframe(
                figures.round_table(rec, min(r_show, len(rec.rounds) - 1)), hide_index=True,
                width="stretch", key=f"fail_table_{k}",
            )  # fmt: skip
        for k, rec in enumerate(recs):
            st.markdown(f"##### {forks.FORK_SIDES[k]}: what {names} sent")
            st.dataframe(
                figures.sent_table(rec, failed_agents), hide_index=True, width="stretch",
                key=f"fail_sent_{k}",
                column_config={"text": st.column_config.TextColumn("text", width="large")},
            )  # fmt: skip
        d_tokens = recs[0].tokens - recs[1].tokens
        st.info(
            f"The failure cost **{recs[1].score - recs[0].score:+.2f}** in score and changed the "
            f"token bill by **{d_tokens:+,}** (reward {recs[0].reward - recs[1].reward:+.3f})."
        )

# ---------------------------------------------------------------- robustness
measured = data.robustness_runs(db)
benches = sorted(measured["benchmark"].dropna().unique()) if not measured.empty else []
url.seed("fail_robust_bench", "rbench", params.one_of(benches, "benchmark with a measurement"))
if benches and st.session_state.get("fail_robust_bench") not in benches:
    st.session_state["fail_robust_bench"] = (
        opts.benchmark if opts.benchmark in benches else benches[0]
    )
st.subheader(
    f"Robustness on {st.session_state['fail_robust_bench']}: accuracy vs failed agents"
    if benches
    else "Robustness: accuracy vs failed agents"
)
if benches:
    r1, r2 = st.columns([1, 3])
    bench = r1.selectbox("Benchmark", benches, key="fail_robust_bench")
    of_bench = measured[measured["benchmark"] == bench]
    r_labels = {
        r["id"]: f"{r['id']} · {r['robustness_mode'] or 'crash'} · {r['episodes']:,} episodes"
        for _, r in of_bench.iterrows()
    }
    url.seed("fail_robust_run", "rrun", params.one_of(list(r_labels), "measurement of it"))
    if st.session_state.get("fail_robust_run") not in r_labels:
        st.session_state["fail_robust_run"] = next(iter(r_labels))
    robust_run = r2.selectbox(
        "Measurement", list(r_labels), format_func=r_labels.get, key="fail_robust_run"
    )
    url.write(rbench=bench, rrun=robust_run)
    if pending.get("robust_note"):
        st.success(pending["robust_note"].format(waited=_waited()), icon=":material/timer:")
    with ui.friendly():
        robust = data.robustness(db, run_ids=(robust_run,))
    mode_of = of_bench.set_index("id").loc[robust_run, "robustness_mode"] or "crash"
    st.caption(
        f"{bench}, agents failed by *{mode_of}* from the first round, every policy on the same held-out "
        "tasks. Bars: 95 % Wilson intervals; n = episodes per point (in the hover and the table)."
    )
    ui.chart(figures.robustness_figure(robust), key="fail_robustness")
    st.dataframe(
        figures.robustness_table(robust), hide_index=True, width="stretch",
        key="fail_robustness_table",
    )  # fmt: skip
else:
    st.info("No robustness measurement yet: measure one below.")

with st.form("fail_measure_form", border=True):
    st.markdown(
        f"**Measure robustness now** on {opts.benchmark} with this run's team: the newest "
        "learned policy of each family for it (Agent Q-Mix, GPTSwarm, …; if any) and the fixed topologies you pick, with 0 to k "
        "failed agents, on the same held-out tasks."
    )
    m1, m2, m3, m4 = st.columns([3, 1, 1, 1])
    topologies = m1.multiselect(
        "Fixed topologies", list(forks.TOPOLOGIES), default=list(ROBUST_DEFAULT),
        key="fail_robust_topologies",
    )  # fmt: skip
    n_eps = m2.number_input("Episodes per point", 10, 2000, 200, 10, key="fail_robust_episodes")
    max_failed = m3.number_input(
        "Up to k failed", 0, max(n_agents - 1, 0), min(2, n_agents - 1), key="fail_robust_k"
    )
    r_mode = m4.selectbox("How", forks.MODES, key="fail_robust_mode")
    go = st.form_submit_button(
        "Measure robustness now", key="fail_measure", disabled=read_only, on_click=_clicked
    )
if go:
    with st.status("Measuring robustness…") as status:
        with ui.friendly():
            policies = []
            # The newest checkpoint of each learned family (qmix, gptswarm, ...), side by side.
            for _, newest in ckpts.drop_duplicates("policy").iterrows():
                status.write(f"loading learned · {newest['policy']} · {newest['id']}")
                policies.append(_policy(forks.PolicyChoice("checkpoint", newest["checkpoint"])))
            policies += [_policy(forks.PolicyChoice("topology", t)) for t in topologies]
            if not policies:
                status.update(label="Pick at least one topology.", state="error")
                st.stop()
            n_total = int(n_eps) * len(policies) * (int(max_failed) + 1)
            status.write(f"{len(policies)} policies × {int(max_failed) + 1} levels × {int(n_eps)} "
                         f"episodes = {n_total:,} episodes")  # fmt: skip
            rows = forks.measure_robustness(
                db, opts, policies, int(n_eps), int(info.seed), int(max_failed), r_mode
            )
        status.update(label="Measured and logged", state="complete", expanded=False)
    data.clear()
    st.session_state["_fail_pending"] = {
        "fail_robust_bench": opts.benchmark,
        "fail_robust_run": rows[0]["run_id"],
        "robust_note": f"Measured {n_total:,} episodes and logged them as run "
        f"{rows[0]['run_id']} in {{waited}} (from your click).",
    }
    st.rerun()
