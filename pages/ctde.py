"""CTDE explained: decentralised Q-heads, the monotonic QMIX mixer and why greedy agents agree."""

import pandas as pd
import streamlit as st

from core.actions import ACTION_NAMES
from core.records import RoundRecord
from lab import ctde, figures, ui

st.title("Centralised training, decentralised execution")


@st.cache_resource(show_spinner=False)
def mixer():
    return ctde.build_mixer()


config = ctde.CtdeConfig()
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
that maximises *Q_tot* is exactly each agent's own best action. Try it below.
"""
)

state = st.selectbox("Pick a state", list(ctde.STATES), key="ctde_state")
table = ctde.example_q_table(state, config)
st.markdown("**Per-agent Q-values** — drag the sliders to change what each agent believes.")
cols = st.columns(config.n_agents)
edited = []
for i, col in enumerate(cols):
    with col:
        st.markdown(f"**agent {i}**")
        row = [
            st.slider(ACTION_NAMES[a], -3.0, 3.0, table[i][a], 0.1, key=f"ctde_q_{state}_{i}_{a}")
            for a in range(len(ACTION_NAMES))
        ]
        edited.append(row)

m = mixer()
s = ctde.state_tensor(state, config)
greedy = ctde.greedy_actions(edited)
chosen = [edited[i][a] for i, a in enumerate(greedy)]
view = ctde.mix(m, chosen, s)
joint, best = ctde.joint_argmax(m, edited, s)
q_tot = float(view.q_tot[0])

st.subheader("What the team does")
t, c = st.columns([3, 1])
t.dataframe(
    pd.DataFrame(
        {
            "agent": [f"agent {i}" for i in range(config.n_agents)],
            "decentralised: own argmax": [ACTION_NAMES[x] for x in greedy],
            "its Q-value": chosen,
            f"centralised: argmax of Q_tot over all {6**config.n_agents} joint actions": [
                ACTION_NAMES[x] for x in joint
            ],
        }
    ),
    hide_index=True,
    width="stretch",
    key="ctde_actions",
)
c.metric("Q_tot of the greedy joint action", f"{q_tot:.3f}")
c.metric("best Q_tot over all joint actions", f"{best:.3f}")
if abs(best - q_tot) < 1e-5:
    st.success(
        "Same value: the agents' own greedy choices give the team's best joint action.",
        icon=":material/check_circle:",
    )
else:
    st.error("The greedy choices disagree with the joint argmax — that would break CTDE.")

st.subheader("Inside the mixer")
left, right = st.columns(2)
with left:
    grid = [x / 10 for x in range(-30, 31, 2)]
    curves = {f"agent {i}": ys for i, ys in ctde.sweep(m, chosen, s, grid).items()}
    ui.chart(figures.ctde_sweep_figure(grid, curves), key="ctde_sweep")
    st.caption("Hold the others fixed and move one agent's Q-value: Q_tot only goes up.")
with right:
    rnd = RoundRecord(
        round=0, edges=[], dropped_edges=[], layers=[], steps=[], q_tot=q_tot,
        mixer_weights=view.w1[0].tolist(), credit=view.credit[0].tolist(),
    )  # fmt: skip
    ui.chart(figures.mixer_figure(rnd, ["agent"] * config.n_agents), key="ctde_mixer")
    st.caption(
        "Credit ∂Q_tot/∂Q_i is each agent's share of the blame or praise; the weights change "
        "with the state (pick another state above) but stay non-negative."
    )
