"""QMIX monotonicity, exact credit, IGM on small cases; VDN; shape errors."""

from __future__ import annotations

import itertools

import pytest
import torch

from core.qmix.mixers import MixerConfig, QMixer, VDNMixer, make_mixer
from tests.core.torch_threads import one_torch_thread  # noqa: F401


def random_mixer(n: int, s: int, seed: int, scale: float = 1.0) -> QMixer:
    torch.manual_seed(seed)
    mixer = QMixer(n, s, MixerConfig(embed=16, hypernet_hidden=16))
    with torch.no_grad():
        for p in mixer.parameters():
            p.mul_(scale)  # larger weights push the ELU into both of its regimes
    return mixer


@pytest.mark.parametrize("seed", range(6))
def test_qmix_gradient_is_non_negative_everywhere(seed):
    n, s = 2 + seed % 4, 7
    mixer = random_mixer(n, s, seed, scale=1.0 + seed)
    g = torch.Generator().manual_seed(100 + seed)
    qs = (torch.randn(8, 25, n, generator=g) * 5).requires_grad_(True)
    states = torch.randn(8, 25, s, generator=g) * 3
    q_tot = mixer(qs, states)
    assert q_tot.shape == (8, 25, 1)
    (grad,) = torch.autograd.grad(q_tot.sum(), qs)
    assert (grad >= 0).all()
    assert (grad > 0).any(), "the mixer must depend on the agents' Q-values"
    # The hypernetwork weights themselves are non-negative for every state.
    w1, _, w_final, _ = mixer.weights(states.reshape(-1, s))
    assert (w1 >= 0).all() and (w_final >= 0).all()


def test_qmix_is_monotone_along_each_agent():
    mixer = random_mixer(3, 5, seed=11, scale=2.0)
    states = torch.randn(200, 5)
    base = torch.randn(200, 3) * 4
    with torch.no_grad():
        for i in range(3):
            up = base.clone()
            up[:, i] += torch.rand(200) * 3
            assert (mixer(up, states) >= mixer(base, states) - 1e-6).all()


@pytest.mark.parametrize("seed", range(4))
def test_view_credit_equals_autograd_gradient(seed):
    n, s, b = 3, 6, 64
    mixer = random_mixer(n, s, seed, scale=1.5)
    qs = torch.randn(b, n) * 4
    states = torch.randn(b, s)
    view = mixer.view(qs, states)
    q = qs.clone().requires_grad_(True)
    q_tot = mixer(q, states)  # (B, 1)
    (grad,) = torch.autograd.grad(q_tot.sum(), q)
    torch.testing.assert_close(view.credit, grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(view.q_tot, q_tot.squeeze(-1).detach(), rtol=1e-5, atol=1e-6)
    assert view.w1.shape == (b, n, 16) and view.b1.shape == (b, 16)
    assert view.w_final.shape == (b, 16) and view.v.shape == (b,)


@pytest.mark.parametrize(
    ("n", "a", "seed"), [(2, 3, 0), (2, 6, 1), (3, 4, 2), (3, 5, 3), (3, 6, 4)]
)
def test_igm_greedy_per_agent_equals_joint_argmax(n, a, seed):
    """Individual-global-max: the agents' own argmaxes form a joint argmax of Q_tot."""
    s, cases = 4, 20
    mixer = random_mixer(n, s, seed, scale=2.0)
    g = torch.Generator().manual_seed(seed)
    joint = torch.tensor(list(itertools.product(range(a), repeat=n)))  # (A^N, N)
    agent_q = torch.randn(cases, n, a, generator=g) * 3  # each agent's Q over its actions
    states = torch.randn(cases, 1, s, generator=g).expand(-1, len(joint), -1)
    chosen = agent_q[:, torch.arange(n), joint]  # (cases, A^N, N): Q_i of each joint action
    with torch.no_grad():
        q_tot = mixer(chosen, states).squeeze(-1)  # (cases, A^N)
    greedy = agent_q.argmax(-1)  # (cases, N)
    greedy_row = (joint.unsqueeze(0) == greedy.unsqueeze(1)).all(-1).float().argmax(-1)
    assert torch.equal(joint[greedy_row], greedy)
    best = q_tot.max(-1).values
    assert (q_tot.gather(-1, greedy_row.unsqueeze(-1)).squeeze(-1) >= best - 1e-5).all()


def test_vdn_is_a_sum_with_unit_credit():
    vdn = VDNMixer(3, 4)
    qs = torch.randn(2, 5, 3)
    torch.testing.assert_close(vdn(qs, torch.randn(2, 5, 4)), qs.sum(-1, keepdim=True))
    view = vdn.view(qs[:, 0], torch.randn(2, 4))
    assert torch.equal(view.credit, torch.ones(2, 3))
    torch.testing.assert_close(view.q_tot, qs[:, 0].sum(-1))


def test_make_mixer_and_config_validation():
    assert isinstance(make_mixer(3, 4, MixerConfig(kind="qmix")), QMixer)
    assert isinstance(make_mixer(3, 4, MixerConfig(kind="vdn")), VDNMixer)
    assert MixerConfig().embed == 64
    with pytest.raises(ValueError, match="'mix'"):
        MixerConfig(kind="mix").validate()
    with pytest.raises(ValueError, match="embed"):
        MixerConfig(embed=0).validate()


@pytest.mark.parametrize("mixer", [QMixer(3, 4, MixerConfig()), VDNMixer(3, 4)])
def test_mixers_reject_wrong_shapes(mixer):
    with pytest.raises(ValueError, match="3 agents"):
        mixer(torch.zeros(2, 5, 4), torch.zeros(2, 5, 4))
    with pytest.raises(ValueError, match="state_dim 4"):
        mixer(torch.zeros(2, 5, 3), torch.zeros(2, 5, 7))
    with pytest.raises(ValueError, match="disagree"):
        mixer(torch.zeros(2, 5, 3), torch.zeros(2, 6, 4))
