"""CTDE explained: decentralised Q-heads, the monotonic QMIX mixer and why greedy agents agree.

Linkable: ``/ctde?state=…&mixer=free`` (the non-monotonic counter-example).
"""

import pandas as pd
import streamlit as st

from core.actions import ACTION_NAMES
from lab import ctde, figures, params, ui

st.title("Centralised training, decentralised execution")
url = ui.UrlState("ctde")


@st.cache_resource(show_spinner=False)
def mixer(monotonic: bool):
    return ctde.build_mixer(monotonic=monotonic)


config = ctde.CtdeConfig()
lo, hi = ctde.REWARD_RANGE
st.markdown(
    """
**1 · Each agent has its own Q-head.** During a round an agent sees only its own observation
(its role, the task, what it read last round) and scores the six actions: *Q_i(o_i, a)*.
At run time it simply takes its best action — no agent needs to know what the others pick.

**2 · Training looks at the team.** A *mixer* turns the agents' chosen Q-values into one team
value *Q_tot*, using the global state (that is the "centralised" part). The team reward
trains *Q_tot*, and the gradient flows back into every agent's Q-head.

**3 · The mixer is monotonic.** Its weights are forced to be non-negative, so raising any
agent's Q-value can never lower *Q_tot* (∂Q_tot/∂Q_i ≥ 0). Consequence: the joint action
that maximises *Q_tot* is exactly each agent's own best action. Try it below — then switch
the mixer to *unconstrained* to see what goes wrong without that rule.
"""
)

url.seed("ctde_state", "state", params.one_of(list(ctde.STATES), "state"))
url.seed("ctde_free", "mixer", params.one_of({"qmix": False, "free": True}, "mixer"))
s1, s2 = st.columns([3, 2])
state = s1.selectbox("Pick a state", list(ctde.STATES), key="ctde_state")
free = s2.toggle(
    "Unconstrained (non-monotonic) mixer",
    value=False,
    key="ctde_free",
    help="The same network and parameters without the abs() on its weights.",
)
url.write(state=state, mixer="free" if free else None)
table = ctde.example_q_table(state, config)
avail = ctde.available(state, config)
crashed = ctde.CRASHED.get(state)
if crashed is not None:
    st.warning(
        f"**Agent {crashed} has crashed.** It sits the round out, so its only available action "
        f"is *{ACTION_NAMES[0]}* (the others are masked, as in the real team); its Q-head still "
        "runs, and the state the mixer reads says that an agent is down.",
        icon=":material/power_off:",
    )
st.markdown("**Per-agent Q-values** — drag the sliders to change what each agent believes.")
cols = st.columns(config.n_agents)
edited = []
for i, col in enumerate(cols):
    with col:
        st.markdown(f"**agent {i}**" + (" · crashed" if i == crashed else ""))
        row = [
            st.slider(
                ctde.action_label(i, a),
                lo,
                hi,
                table[i][a],
                ctde.Q_STEP,
                key=f"ctde_q_{state}_{i}_{a}",
                disabled=not avail[i][a],
                help=None if avail[i][a] else "Not available to a crashed agent.",
            )  # fmt: skip
            for a in range(len(ACTION_NAMES))
        ]
        edited.append(row)

m = mixer(not free)
s = ctde.state_tensor(state, config)
greedy = ctde.greedy_actions(edited, avail)
chosen = [edited[i][a] for i, a in enumerate(greedy)]
view = ctde.mix(m, chosen, s)
joint, best = ctde.joint_argmax(m, edited, s, avail)
q_tot = float(view.q_tot[0])

st.subheader("What the team does")
t, c = st.columns([3, 1])
t.dataframe(
    pd.DataFrame(
        {
            "agent": [
                f"agent {i}" + (" (crashed)" if i == crashed else "")
                for i in range(config.n_agents)
            ],
            "decentralised: own argmax": [ACTION_NAMES[x] for x in greedy],
            "its Q-value": chosen,
            # A short header (a long one was cut to "…all 216 joint act…"); the count is
            # in the caption under the table.
            "centralised: joint argmax": [ACTION_NAMES[x] for x in joint],
        }
    ),
    hide_index=True,
    width="stretch",
    key="ctde_actions",
)
t.caption(
    f"Centralised: the joint action with the highest Q_tot, searched over all "
    f"{ctde.joint_count(avail)} joint actions."
)
c.metric("Q_tot of the greedy joint action", f"{q_tot:.3f}")
c.metric("best Q_tot over all joint actions", f"{best:.3f}")
if abs(best - q_tot) < 1e-5:
    st.success(
        "Same value: the agents' own greedy choices give the team's best joint action.",
        icon=":material/check_circle:",
    )
elif free:
    st.error(
        f"The greedy choices miss the joint argmax by {best - q_tot:.3f}: with signed weights, "
        "raising an agent's own Q-value can *lower* Q_tot, so no agent can find the team's best "
        "action on its own. That is why QMIX keeps its mixing weights non-negative.",
        icon=":material/error:",
    )
else:
    st.error("The greedy choices disagree with the joint argmax — that would break CTDE.")

st.info(
    "**What the numbers mean.** Q-values and Q_tot are in units of the team's reward: a "
    "trained Q_tot predicts the episode's reward from this state on, "
    "`w_acc × score − w_tok × min(tokens / budget, 1)`, which lies between "
    f"**{lo:g}** and **{hi:g}** on the default settings. The sliders span that range, and "
    "this mixer — seeded, not trained — is scaled so that its Q_tot does too (lowest with "
    "every Q-value at the bottom, highest with every one at the top"
    + ("; the unconstrained mixer is not monotonic, so it can leave the range" if free else "")
    + "). Its *level* says nothing about a real team; what carries over is the shape: which "
    "joint action wins, and how much each agent's Q-value moves Q_tot (the credit).",
    icon=":material/straighten:",
)

st.subheader("Inside the mixer")
left, right = st.columns(2)
with left:
    st.markdown(
        "##### Q_tot as one agent's Q-value moves"
        + (" (not monotonic!)" if free else " (only ever rises)")
    )
    grid = [lo + (hi - lo) * k / 30 for k in range(31)]
    curves = {f"agent {i}": ys for i, ys in ctde.sweep(m, chosen, s, grid).items()}
    ui.chart(figures.ctde_sweep_figure(grid, curves), key="ctde_sweep")
    st.caption("Hold the others fixed and move one agent's chosen Q-value (x axis).")
with right:
    labels = [f"agent {i}" for i in range(config.n_agents)]
    rnd = ctde.view_round(view)
    st.markdown("##### credit ∂Q_tot/∂Q_i (and its share of the total)")
    ui.chart(figures.credit_figure(rnd, (), height=200, labels=labels), key="ctde_credit")
    st.markdown("##### weights W₁ (agent × unit)")
    ui.chart(
        figures.weights_figure(rnd.mixer_weights, (), height=200, labels=labels), key="ctde_mixer"
    )
    st.caption(
        "Credit ∂Q_tot/∂Q_i is how much Q_tot moves per unit of agent i's Q-value — a rate, "
        "so the credits need not add up to 1; the percentages are each agent's part of their "
        "sum. The weights change with the state (pick another state above); QMIX's stay "
        "non-negative" + (", these do not (red: negative)." if free else ".")
    )

with st.expander("The price of monotonicity: the climbing game (a known limit)"):
    st.markdown(
        "Monotonic mixing makes decentralised greedy play safe, but some team payoffs cannot "
        "be represented that way. In Claus & Boutilier's *climbing game* two agents pick one "
        "of three actions and the team is paid this table (agent 0 picks the row):"
    )
    st.dataframe(
        pd.DataFrame(ctde.climbing_payoff(), index=["a0", "a1", "a2"], columns=["a0", "a1", "a2"]),
        key="ctde_climbing",
    )
    st.markdown(
        "The best joint action (a0, a0) pays 11, but it sits next to the −30s: if a0 were "
        "each agent's best utility, monotonicity would force Q_tot(a0, a1) ≥ Q_tot(a1, a1), "
        "i.e. value −30 at least as highly as 7. Trained with the engine's defaults, QMIX "
        "settles on a safe joint action (5, 6 or 7) on every seed — the method's known "
        "limit, checked by the test suite. Try it: `agentqmix train --env "
        "core.qmix.games:climbing_game --episodes 600 --out climbing.pt` (docs/games.md, with "
        "the two-step game QMIX does solve)."
    )
