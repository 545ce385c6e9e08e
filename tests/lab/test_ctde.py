"""The teaching page's claims, checked on the real mixer: monotonic Q_tot, greedy = joint argmax."""

import pytest
import torch

from lab import ctde


@pytest.mark.parametrize("state", list(ctde.STATES))
def test_greedy_agents_reach_the_joint_argmax(state):
    config = ctde.CtdeConfig()
    mixer = ctde.build_mixer(config)
    table = ctde.example_q_table(state, config)
    s = ctde.state_tensor(state, config)
    greedy = ctde.greedy_actions(table)
    joint, best = ctde.joint_argmax(mixer, table, s)
    view = ctde.mix(mixer, [table[i][a] for i, a in enumerate(greedy)], s)
    assert float(view.q_tot[0]) == pytest.approx(best, abs=1e-5)
    assert (view.credit >= 0).all() and (view.w1 >= 0).all()
    # A deliberately bad joint action is worse.
    worst = [min(range(6), key=lambda a: row[a]) for row in table]
    assert float(ctde.mix(mixer, [table[i][a] for i, a in enumerate(worst)], s).q_tot[0]) < best


def test_sweep_is_monotonic_and_credit_is_the_slope():
    config = ctde.CtdeConfig()
    mixer = ctde.build_mixer(config)
    s = ctde.state_tensor(list(ctde.STATES)[1], config)
    chosen = [0.3, -0.2, 1.0]
    grid = [x / 10 for x in range(-30, 31)]
    for ys in ctde.sweep(mixer, chosen, s, grid).values():
        assert all(b >= a - 1e-6 for a, b in zip(ys, ys[1:], strict=False))
    view = ctde.mix(mixer, chosen, s)
    eps = 1e-3
    for i in range(3):
        up = list(chosen)
        up[i] += eps
        slope = (float(ctde.mix(mixer, up, s).q_tot[0]) - float(view.q_tot[0])) / eps
        assert slope == pytest.approx(float(view.credit[0, i]), rel=1e-2, abs=1e-3)


def test_mixer_is_deterministic_in_the_seed():
    a, b = ctde.build_mixer(), ctde.build_mixer()
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q)
    with pytest.raises(ValueError, match="n_agents"):
        ctde.CtdeConfig(n_agents=9).validate()


@pytest.mark.parametrize("state", list(ctde.STATES))
def test_without_monotonicity_greedy_agents_miss_the_joint_argmax(state):
    # The same parameters without abs(): the page's counter-example must really be one.
    config = ctde.CtdeConfig()
    free = ctde.build_mixer(config, monotonic=False)
    table = ctde.example_q_table(state, config)
    avail = ctde.available(state, config)
    s = ctde.state_tensor(state, config)
    greedy = ctde.greedy_actions(table, avail)
    joint, best = ctde.joint_argmax(free, table, s, avail)
    q_greedy = float(ctde.mix(free, [table[i][a] for i, a in enumerate(greedy)], s).q_tot[0])
    assert greedy != joint and best > q_greedy + 1e-3
    assert (ctde.mix(free, [0.0] * config.n_agents, s).w1 < 0).any()


def test_a_crashed_agent_can_only_sit_out():
    state = next(iter(ctde.CRASHED))
    agent = ctde.CRASHED[state]
    avail = ctde.available(state)
    assert avail[agent] == [True] + [False] * 5
    assert all(all(row) for i, row in enumerate(avail) if i != agent)
    table = ctde.example_q_table(state)
    table[agent] = [-3.0, 3.0, 3.0, 3.0, 3.0, 3.0]  # it would love to broadcast, but cannot
    mixer = ctde.build_mixer()
    s = ctde.state_tensor(state)
    assert ctde.greedy_actions(table, avail)[agent] == 0
    joint, _ = ctde.joint_argmax(mixer, table, s, avail)
    assert joint[agent] == 0 and joint == ctde.greedy_actions(table, avail)
    assert ctde.action_label(1, 1) == "agent 1 · broadcast_all"
