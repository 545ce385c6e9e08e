"""Side by side: one task played by two policies (A and B), rounds stepped together — the
graph each drew, what each agent did and read, and the answers: why A got it right where B
did not.

Linkable: ``/sidebyside?a=RUN&pa=POLICY&b=RUN&pb=POLICY&task=TASK&round=R`` (``&healthy=false``
counts episodes with injected failures too, ``&show=a-right`` lists only the tasks A got right
and B wrong, ``&ea=N`` / ``&eb=N`` show that episode of the task instead of the side's first).
Run diff's rows and Replay's *Compare with another run* open it.
"""

import streamlit as st

from core.records import EpisodeRecord
from lab import data, diff, figures, params, sidebyside, ui

# Episode indices a link may name (anything larger is no episode of any run).
MAX_INDEX = 2**62
# The agent table's columns (Replay shows them all; half a 1280-px screen holds these).
AGENT_COLUMNS = ["agent", "action", "answer", "result", "read from", "tokens"]

db = data.db_path()
st.title("Side by side")
st.caption(
    "One task, two policies: A and B play the same task; one round control moves both. "
    "Pick the pair, then a task both played — the list says which side got it right."
)
runs = ui.require_runs(db)
url = ui.UrlState("sidebyside")
done = runs[runs["episodes"] > 0]
if done.empty:
    st.info("No run has finished an episode yet. Runs in progress show up here within seconds.")
    st.stop()
labels = {r["id"]: ui.run_label(r) for _, r in done.iterrows()}
benchmark_of = dict(zip(done["id"], done["benchmark"], strict=True))
# Task, round and pinned episodes are checked against the pair's tasks and episodes below.
link_task, link_round = url.new("task"), url.new("round")
link_pins = {"a": url.new("ea"), "b": url.new("eb")}


def _unpin() -> None:
    for side in "ab":
        st.session_state.pop(f"sbs_episode_{side}", None)
    st.session_state["sbs_round"] = 1


def name_unused(reason: str, names: tuple[str, ...] = ("task", "round", "ea", "eb")) -> None:
    """Say which of the link's task, round and pinned episodes the page did not use, and why
    (it stops short of them, or their task was refused)."""
    raws = {"task": link_task, "round": link_round, "ea": link_pins["a"], "eb": link_pins["b"]}
    for name in names:
        if raws[name] is not None:
            url.refuse(name, raws[name], f"is not used: {reason}", "the pair without it")
            if name in ("ea", "eb"):
                link_pins[name[1]] = None


def policies_of(run_id: str) -> list[str]:
    """A run's policies as pickers offer them: learned first, training episodes last (a
    training episode opened from Replay can still be side A)."""
    with ui.friendly():
        values = data.run_values(db, run_id, "policy")
    training = [p for p in values if p == data.TRAINING_POLICY]
    return sidebyside.learned_first([p for p in values if p != data.TRAINING_POLICY]) + training


# ---------------------------------------------------------------- the pair
url.seed("sbs_healthy", "healthy", params.flag)
url.seed("sbs_show", "show", params.one_of(list(sidebyside.SHOWS), "task filter"))
st.session_state.setdefault("sbs_healthy", True)
st.session_state.setdefault("sbs_show", "all")
ordered = sidebyside.by_kind(done)
url.seed_run("sbs_run_a", "a", labels)
if st.session_state.get("sbs_run_a") not in labels:
    st.session_state["sbs_run_a"] = ordered[0]
col_a, col_b = st.columns(2)
run_a = col_a.selectbox("Run A", ordered, format_func=labels.get, key="sbs_run_a", on_change=_unpin)
policies_a = policies_of(run_a)
url.seed("sbs_policy_a", "pa", params.one_of(policies_a, "policy of run A"))
if st.session_state.get("sbs_policy_a") not in policies_a:
    st.session_state["sbs_policy_a"] = policies_a[0]
policy_a = col_a.selectbox(
    "Policy A", policies_a, format_func=data.policy_label, key="sbs_policy_a", on_change=_unpin
)

partners = sidebyside.partner_runs(done, run_a)
raw_b = url.new("b")
if raw_b is not None and raw_b.strip() in labels and raw_b.strip() not in partners:
    url.refuse(
        "b", raw_b,
        f"is a run on {benchmark_of[raw_b.strip()]}, not on run A's {benchmark_of[run_a]}",
        "another run on A's benchmark",
    )  # fmt: skip
else:
    url.seed_run("sbs_run_b", "b", labels, raw=raw_b)
if st.session_state.get("sbs_run_b") not in partners:
    healthy_now = st.session_state["sbs_healthy"]
    players = data.task_players(db, link_task.strip(), healthy_now) if link_task else None
    pick = sidebyside.pick_partner(partners, (run_a, policy_a), policies_of, players)
    pick = pick or sidebyside.pick_partner(partners, (run_a, policy_a), policies_of)
    if pick is None:
        st.info(
            f"Nothing to put beside A: no other run or policy played {benchmark_of[run_a]}. "
            "Evaluate another policy on it (`agentqmix compare`), or pick another run A."
        )
        name_unused("there is no side B")
        url.write(a=run_a, pa=policy_a, b=None, pb=None, task=None, round=None, ea=None, eb=None)
        st.stop()
    st.session_state["sbs_run_b"], st.session_state["sbs_policy_b"] = pick
run_b = col_b.selectbox(
    "Run B", partners, format_func=labels.get, key="sbs_run_b", on_change=_unpin
)
policies_b = policies_of(run_b)
url.seed("sbs_policy_b", "pb", params.one_of(policies_b, "policy of run B"))
if st.session_state.get("sbs_policy_b") not in policies_b:
    others = [p for p in policies_b if (run_b, p) != (run_a, policy_a)]
    st.session_state["sbs_policy_b"] = (others or policies_b)[0]
policy_b = col_b.selectbox(
    "Policy B", policies_b, format_func=data.policy_label, key="sbs_policy_b", on_change=_unpin
)

t1, t2 = st.columns(2)
healthy = t1.toggle(
    "Healthy episodes only (no injected failures)", key="sbs_healthy", on_change=_unpin
)
show = t2.selectbox(
    "Tasks listed", list(sidebyside.SHOWS), format_func=lambda s: sidebyside.SHOWS[s][0],
    key="sbs_show", on_change=_unpin,
    help="A task played several times on a side counts by how often it was answered right there.",
)  # fmt: skip
view = dict(
    a=run_a, pa=policy_a, b=run_b, pb=policy_b,
    healthy=None if healthy else "false", show=None if show == "all" else show,
)  # fmt: skip
if (run_a, policy_a) == (run_b, policy_b):
    st.info("Both sides are the same run and policy: pick another run or policy for B.")

# ---------------------------------------------------------------- the task
with ui.friendly():
    outcomes_a = data.task_outcomes(db, run_a, policy_a, healthy)
    outcomes_b = data.task_outcomes(db, run_b, policy_b, healthy)
table = diff.task_diff(outcomes_a, outcomes_b)
if table.empty:
    st.warning(
        f"These two share no task ({len(outcomes_a):,} tasks in A, {len(outcomes_b):,} in B): "
        "side by side needs runs played on the same tasks (the same benchmark and seed, or "
        "one sweep)."
    )
    name_unused("these two share no task")
    url.write(**view, task=None, round=None, ea=None, eb=None)
    st.stop()
shown = sidebyside.listed(table, show)
if link_task is not None:
    task = link_task.strip()
    played = (task in set(outcomes_a["task_id"]), task in set(outcomes_b["task_id"]))
    names = (
        f"A (run {run_a}, {data.policy_label(policy_a)})",
        f"B (run {run_b}, {data.policy_label(policy_b)})",
    )
    if not all(played):
        url.refuse(
            "task", link_task, sidebyside.unplayed(played, names, healthy), "the first task listed"
        )
        name_unused("its task is not shown", ("ea", "eb"))
    elif task not in set(shown["task_id"]):
        url.refuse(
            "task", link_task, f"is not listed under “{sidebyside.SHOWS[show][0]}”",
            "the first task listed",
        )  # fmt: skip
        name_unused("its task is not shown", ("ea", "eb"))
    else:
        _unpin()
        st.session_state["sbs_task"] = task
if shown.empty:
    st.info(
        f"No shared task is listed under “{sidebyside.SHOWS[show][0]}” ({len(table):,} "
        "shared): pick another filter."
    )
    name_unused("no task is listed", ("round", "ea", "eb"))
    url.write(**view, task=None, round=None, ea=None, eb=None)
    st.stop()
task_labels = sidebyside.task_labels(shown)
if st.session_state.get("sbs_task") not in task_labels:
    # Set, not dropped: a dropped value leaves the browser showing the old list's pick.
    _unpin()
    st.session_state["sbs_task"] = next(iter(task_labels))
task = st.selectbox(
    f"Task ({len(shown):,} of {len(table):,} shared tasks listed)", list(task_labels),
    format_func=task_labels.get, key="sbs_task", on_change=_unpin,
)  # fmt: skip
row = shown.set_index("task_id").loc[task]
sides = {
    "a": (run_a, policy_a, int(row["episode_a"])),
    "b": (run_b, policy_b, int(row["episode_b"])),
}


def pin(side: str, raw: str) -> None:
    """Show the linked episode ``raw`` on ``side`` if it is that side's episode of the task."""
    run_id, policy, _ = sides[side]
    try:
        index = params.whole(0, MAX_INDEX)(raw)
        with ui.friendly():
            record = data.episode(db, run_id, index)
        if record is None or record.task_id != task or record.policy != policy:
            raise params.BadParam(f"is not an episode of side {side.upper()}'s policy on {task}")
    except params.BadParam as err:
        url.refuse(f"e{side}", raw, str(err), f"{side.upper()}'s first episode of the task")
        return
    st.session_state[f"sbs_episode_{side}"] = index


for side, raw in link_pins.items():
    if raw is not None:
        pin(side, raw)
pins = {side: st.session_state.get(f"sbs_episode_{side}") for side in "ab"}
records: dict[str, EpisodeRecord] = {}
for side, (run_id, policy, first) in sides.items():
    index = first if pins[side] is None else pins[side]
    sides[side] = (run_id, policy, index)
    with ui.friendly():
        record = data.episode(db, run_id, index)
    if record is None:
        st.warning(f"Episode #{index} of run {run_id} is gone (the run was deleted): reload.")
        st.stop()
    records[side] = record
n_rounds = max(len(r.rounds) for r in records.values())
if link_round is not None:
    try:
        st.session_state["sbs_round"] = params.whole(1, n_rounds)(link_round)
    except params.BadParam as err:
        url.refuse("round", link_round, f"{err} (the rounds of these episodes)", "round 1")
        st.session_state["sbs_round"] = 1
st.session_state.setdefault("sbs_round", 1)
if not 1 <= st.session_state["sbs_round"] <= max(n_rounds, 1):
    st.session_state["sbs_round"] = 1

first = records["a"]
with st.container(border=True):
    st.markdown(f"**{first.benchmark} · {first.domain} · difficulty {first.difficulty}** — {task}")
    if first.domain == "code":
        st.code(first.question[:4000], language="python")
    else:
        st.markdown(ui.markdown_literal(first.question[:1200]))
    st.caption(f"ground truth **{ui.markdown_literal(str(first.ground_truth))}**")


# ---------------------------------------------------------------- one round control, two sides
number = ui.round_stepper("sbs", n_rounds, "Round (both sides)", sides=", on both sides")
url.write(**view, task=task, round=number, ea=pins["a"], eb=pins["b"])


def show_side(side: str, run_id: str, policy: str, index: int, record: EpisodeRecord) -> None:
    """One side's column: its answer, then the round's graph, agents and messages (or why
    its episode has no such round)."""
    key = side.lower()
    st.markdown(f"#### {side} · {data.policy_label(policy)}")
    st.caption(f"run {labels[run_id]} · episode #{index}")
    verdict = st.container(horizontal=True)
    verdict.markdown(f"team answer **{ui.markdown_literal(str(record.team_answer))}**")
    if record.score > 0:
        verdict.badge("right", icon=":material/check:", color="green")
    else:
        verdict.badge("wrong", icon=":material/close:", color="red")
    failed = ", ".join(f"agent {f['agent']} {f['mode']}" for f in record.failures)
    st.caption(
        f"**{record.tokens:,} tokens** · reward {record.reward:.3f}"
        + (f" · failures: {failed}" if failed else "")
    )
    last = len(record.rounds)
    st.markdown(f"[Open in Replay]({ui.replay_link(run_id, index, min(number, last) - 1)})")
    note = sidebyside.ended_note(side, last, number)
    if note is not None:
        st.info(note, icon=":material/last_page:")
        return
    r = number - 1  # the record's index of the round
    figs = data.side_figures(db, run_id, index, r)
    rnd = record.rounds[r]
    st.markdown(
        f"##### Round {number} of {last}"
        + (f" · Q_tot = {rnd.q_tot:.3f}" if rnd.q_tot is not None else "")
    )
    ui.chart(figs["graph"], key=f"sbs_graph_{key}")
    # A static table: its cells wrap in a half-width column (a data grid's canvas cut
    # "aggregate_refine" and every code answer short, unseen by any check).
    agents = figs["table"][AGENT_COLUMNS].rename(columns={"read from": "reads"})
    code = record.domain == "code"
    if code:
        agents["answer"] = [sidebyside.code_cell(a) for a in agents["answer"]]
    st.table(agents.set_index("agent"))
    if code:
        with st.expander("The code each agent answered this round"):
            for step in sorted(rnd.steps, key=lambda s: s.agent):
                st.markdown(f"**{figures.agent_name(step.agent, record.roles)}**")
                st.code(str(step.answer or "—"), language="python", wrap_lines=True)
    so_far = sum(x.tokens for x in record.rounds[:number])
    if number == last and record.decision is not None:
        so_far += record.decision.tokens
    st.caption(
        f"This round: {int(figs['table']['tokens'].sum()):,} tokens"
        + (" (with the decision agent D)" if number == last and record.decision else "")
        + f" · so far {so_far:,} of {record.tokens:,}."
    )
    st.markdown(f"##### Messages of round {number} ({len(rnd.messages)})")
    if not rnd.messages:
        st.caption("Nobody read anybody this round.")
        return
    # A long round's messages scroll in a box; a short one's take only their room.
    with st.container(height=260 if len(rnd.messages) > 4 else "content"):
        for m in rnd.messages:
            src, dst = (figures.agent_name(i, record.roles) for i in (m.src, m.dst))
            st.markdown(
                f"**{src} → {dst}** · answer {ui.markdown_literal(str(m.answer))} · conf "
                f"{m.confidence:.2f}: {ui.markdown_literal(m.text)}"
            )


for column, side in zip(st.columns(2), "ab", strict=True):
    with column:
        show_side(side.upper(), *sides[side], records[side])
