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
