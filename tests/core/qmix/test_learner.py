"""The learner: the TD loss it computes, that it lowers it, and its target updates."""

from __future__ import annotations

import pytest
import torch

from benchmarks.learner import random_batch
from core.qmix.encoders import AgentNetConfig, AgentNetwork
from core.qmix.learner import (
    LearnerConfig,
    QLearner,
    batch_aggregator,
    lambda_targets,
    last_actions,
    lr_at,
    unroll,
)
from core.qmix.mixers import MixerConfig, make_mixer
from tests.core.torch_threads import one_torch_thread  # noqa: F401

N, OBS, S, A, B, T = 3, 6, 10, 4, 8, 3


def make_learner(kind: str = "qmix", seed: int = 0, **cfg) -> QLearner:
    torch.manual_seed(seed)
    agent = AgentNetwork(OBS, N, A, AgentNetConfig(gnn_hidden=32, gru_hidden=32, q_hidden=32))
    mixer = make_mixer(N, S, MixerConfig(kind=kind, embed=32, hypernet_hidden=32))
    return QLearner(agent, mixer, LearnerConfig(**{"lr": 1e-3, **cfg}))


def fixed_batch(seed: int = 0):
    torch.manual_seed(seed)
    batch = random_batch(B, T, N, OBS, S, A, density=0.5)
    # Some episodes end early, and some actions are unavailable, as in real data.
    batch.filled[:3, 2] = 0
    batch.terminated[:3, 1] = 1
    batch.terminated[:3, 2] = 0
    batch.avail[:, :, 0, 1] = False
    return batch


def perturb_targets(learner: QLearner) -> None:
    """Make the target networks differ from the online ones, so double-Q matters."""
    with torch.no_grad():
        for p in list(learner.target_agent.parameters()) + list(learner.target_mixer.parameters()):
            p.add_(torch.randn_like(p) * 0.3)


def reference_loss(learner: QLearner, batch, double_q: bool) -> torch.Tensor:
    """The masked TD(λ) loss written out step by step, independently of QLearner.loss."""
    gamma, lam = learner.config.gamma, learner.config.td_lambda
    with torch.no_grad():
        q = unroll(learner.agent, batch)
        tq = unroll(learner.target_agent, batch)
        q_tots, boots = torch.zeros(B, T), torch.zeros(B, T)
        for b in range(B):
            for t in range(T):
                chosen = q[b, t].gather(-1, batch.actions[b, t].unsqueeze(-1)).squeeze(-1)
                avail = batch.avail[b, t + 1]
                nxt = torch.empty(N)
                for i in range(N):
                    ok = avail[i].nonzero().squeeze(-1)
                    if double_q:
                        best = ok[q[b, t + 1, i, ok].argmax()]
                        nxt[i] = tq[b, t + 1, i, best]
                    else:
                        nxt[i] = tq[b, t + 1, i, ok].max()
                state, next_state = (
                    batch.state[b, t].view(1, 1, S),
                    batch.state[b, t + 1].view(1, 1, S),
                )
                q_tots[b, t] = learner.mixer(chosen.view(1, 1, N), state).squeeze()
                boots[b, t] = learner.target_mixer(nxt.view(1, 1, N), next_state).squeeze()
        y = reference_lambda_targets(batch.reward, batch.terminated, boots, gamma, lam)
        filled = batch.filled.bool()
        return ((q_tots - y)[filled] ** 2).mean()


@pytest.mark.parametrize("kind", ["qmix", "vdn"])
@pytest.mark.parametrize("double_q", [True, False])
@pytest.mark.parametrize("lam", [0.0, 0.8])
def test_loss_matches_the_td_error_written_out(kind, double_q, lam):
    learner = make_learner(kind, double_q=double_q, td_lambda=lam)
    perturb_targets(learner)
    batch = fixed_batch()
    loss, stats = learner.loss(batch)
    torch.testing.assert_close(
        loss.detach(), reference_loss(learner, batch, double_q), rtol=1e-4, atol=1e-5
    )
    assert stats["loss"] == pytest.approx(float(loss))


def test_double_q_changes_the_target():
    on, off = make_learner(double_q=True), make_learner(double_q=False)
    perturb_targets(on)
    off.target_agent.load_state_dict(on.target_agent.state_dict())
    off.target_mixer.load_state_dict(on.target_mixer.state_dict())
    batch = fixed_batch()
    # Online argmax and target argmax disagree once the targets differ: different bootstraps.
    assert float(off.loss(batch)[0]) != pytest.approx(float(on.loss(batch)[0]), rel=1e-4)


def test_padded_steps_do_not_count():
    learner = make_learner()
    batch = fixed_batch()
    before = float(learner.loss(batch)[0])
    batch.reward[:3, 2] = 1e3  # rewards behind the end of the short episodes
    batch.actions[:3, 2] = (batch.actions[:3, 2] + 1) % A
    assert float(learner.loss(batch)[0]) == pytest.approx(before, rel=1e-6)


@pytest.mark.parametrize(
    ("kind", "double_q", "tau"),
    [("qmix", True, 0.0), ("qmix", False, 0.01), ("vdn", True, 0.01), ("vdn", False, 0.0)],
)
def test_learner_lowers_td_error_on_a_fixed_batch(kind, double_q, tau):
    """200 updates on one batch: hard targets held fixed (interval never reached), or soft."""
    learner = make_learner(kind, double_q=double_q, tau=tau, target_update_interval=10_000)
    batch = fixed_batch()
    first = float(learner.loss(batch)[0])
    for _ in range(200):
        stats = learner.train(batch)
    assert stats["grad_norm"] >= 0 and learner.updates == 200
    last = float(learner.loss(batch)[0])
    assert last < first / 20, f"{kind} double_q={double_q} tau={tau}: {first:.4f} -> {last:.4f}"


def params(module: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in module.parameters()]


def test_hard_target_update_copies_on_the_interval_only():
    learner = make_learner(target_update_interval=3)
    batch = fixed_batch()
    start = params(learner.target_agent) + params(learner.target_mixer)
    for _ in range(2):
        learner.train(batch)
    now = params(learner.target_agent) + params(learner.target_mixer)
    assert all(torch.equal(a, b) for a, b in zip(start, now, strict=True))
    online = params(learner.agent) + params(learner.mixer)
    assert not all(torch.equal(a, b) for a, b in zip(online, now, strict=True))
    learner.train(batch)  # third update: copy
    online = params(learner.agent) + params(learner.mixer)
    now = params(learner.target_agent) + params(learner.target_mixer)
    assert all(torch.equal(a, b) for a, b in zip(online, now, strict=True))


def test_soft_target_update_is_polyak_averaging():
    tau = 0.1
    learner = make_learner(tau=tau, target_update_interval=1)
    batch = fixed_batch()
    old_target = params(learner.target_agent) + params(learner.target_mixer)
    learner.train(batch)
    online = params(learner.agent) + params(learner.mixer)
    target = params(learner.target_agent) + params(learner.target_mixer)
    for o, t0, t1 in zip(online, old_target, target, strict=True):
        torch.testing.assert_close(t1, (1 - tau) * t0 + tau * o)
    # With tau > 0 the interval is ignored: the target is not a copy of the online net.
    assert not all(torch.equal(a, b) for a, b in zip(online, target, strict=True))


def test_averaged_policy_moves_by_its_rate_toward_the_online_weights():
    rate = 0.1
    learner = make_learner(policy_ema=rate)
    assert learner.policy_agent is not learner.agent and learner.policy_mixer is not learner.mixer
    with torch.no_grad():  # an average that differs from the online weights before the update
        for p in list(learner.policy_agent.parameters()) + list(learner.policy_mixer.parameters()):
            p.add_(torch.randn_like(p))
    learner.updates = 100  # past the warm-up (1 / rate updates): the rate itself
    before = params(learner.policy_agent) + params(learner.policy_mixer)
    learner.train(fixed_batch())
    online = params(learner.agent) + params(learner.mixer)
    after = params(learner.policy_agent) + params(learner.policy_mixer)
    for o, p0, p1 in zip(online, before, after, strict=True):
        torch.testing.assert_close(p1, (1 - rate) * p0 + rate * o)
    # In the warm-up it is the plain mean of the updates' weights: the first is a copy, the
    # second halves the way.
    fresh = make_learner(policy_ema=rate)
    seen = []
    for _ in range(2):
        fresh.train(fixed_batch())
        seen.append(params(fresh.agent))
    for p, w1, w2 in zip(params(fresh.policy_agent), *seen, strict=True):
        torch.testing.assert_close(p, (w1 + w2) / 2)
    assert all(not p.requires_grad for p in learner.policy_agent.parameters())
    # Off (the default): the greedy policy is the online network itself.
    plain = make_learner()
    assert plain.policy_agent is plain.agent and plain.policy_mixer is plain.mixer


def test_learning_rate_falls_linearly_to_its_floor_then_stays():
    cfg = LearnerConfig(lr=1e-3, lr_decay_to=0.1, lr_decay_fraction=0.5)
    got = [lr_at(cfg, u, 100) for u in (0, 25, 50, 99)]
    torch.testing.assert_close(torch.tensor(got), torch.tensor([1e-3, 5.5e-4, 1e-4, 1e-4]))
    assert lr_at(LearnerConfig(lr=1e-3), 99, 100) == 1e-3  # no decay by default
    assert lr_at(cfg, 99, 0) == 1e-3  # a run whose length is unknown keeps its rate
    learner = make_learner(lr_decay_to=0.1, lr_decay_fraction=0.5)
    learner.total_updates = 4
    rates = [learner.train(fixed_batch())["lr"] for _ in range(3)]
    torch.testing.assert_close(torch.tensor(rates), torch.tensor([1e-3, 5.5e-4, 1e-4]))
    assert learner.optimiser.param_groups[0]["lr"] == rates[-1]


def test_targets_never_get_gradients():
    learner = make_learner()
    learner.train(fixed_batch())
    targets = list(learner.target_agent.parameters()) + list(learner.target_mixer.parameters())
    assert all(p.grad is None and not p.requires_grad for p in targets)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("lr", 0.0),
        ("gamma", 1.5),
        ("batch_size", 0),
        ("target_update_interval", 0),
        ("tau", -0.1),
        ("policy_ema", 1.5),
        ("lr_decay_to", 0.0),
        ("lr_decay_fraction", 0.0),
        ("precision", "fp16"),
    ],
)
def test_config_validation_names_the_value(field, value):
    with pytest.raises(ValueError, match=field):
        LearnerConfig(**{field: value}).validate()


def reference_lambda_targets(reward, terminated, target_next, gamma, lam):
    """TD(λ) written out as the weighted sum of n-step returns, episode by episode."""
    b, t_max = reward.shape
    out = torch.zeros(b, t_max)
    for e in range(b):
        for t in range(t_max):
            total, weight_left = 0.0, 1.0
            for n in range(1, t_max - t + 1):
                # n-step return from t: rewards t..t+n-1, then bootstrap from Q'(s_{t+n}).
                ret, disc, ended = 0.0, 1.0, False
                for k in range(t, t + n):
                    ret += disc * float(reward[e, k])
                    if terminated[e, k]:
                        ended = True
                        break
                    disc *= gamma
                if not ended:
                    ret += disc * float(target_next[e, t + n - 1])
                w = weight_left if (n == t_max - t or ended) else (1 - lam) * lam ** (n - 1)
                total += w * ret
                weight_left -= w
                if ended or n == t_max - t:
                    break
            out[e, t] = total
    return out


@pytest.mark.parametrize("lam", [0.0, 0.6, 1.0])
def test_lambda_targets_match_the_weighted_n_step_returns(lam):
    from core.qmix.learner import lambda_targets

    g = torch.Generator().manual_seed(3)
    reward = torch.randn(5, 4, generator=g)
    terminated = torch.zeros(5, 4)
    terminated[:, 3] = 1.0
    terminated[1, 1] = 1.0  # an episode that ends early
    target_next = torch.randn(5, 4, generator=g)
    got = lambda_targets(reward, terminated, target_next, 0.9, lam)
    want = reference_lambda_targets(reward, terminated, target_next, 0.9, lam)
    assert torch.allclose(got[[0, 2, 3, 4]], want[[0, 2, 3, 4]], atol=1e-5)
    assert torch.allclose(got[1, :2], want[1, :2], atol=1e-5)
    if lam == 0.0:
        one_step = reward + 0.9 * (1 - terminated) * target_next
        assert torch.allclose(got, one_step)


def grads(module: torch.nn.Module) -> list[torch.Tensor]:
    return [p.grad.detach().clone() for p in module.parameters()]


def test_aggregator_built_once_per_batch_gives_identical_q_and_grads():
    """The learner shares one aggregator (and one last-action tensor) between the online
    and the target network; building them inside each call gives bit-identical results."""
    learner = make_learner()
    batch = fixed_batch()
    shared = unroll(learner.agent, batch, last_actions(batch), batch_aggregator(batch))
    shared.square().sum().backward()
    shared_grads = grads(learner.agent)
    learner.agent.zero_grad(set_to_none=True)
    per_call = unroll(learner.agent, batch)
    per_call.square().sum().backward()
    assert torch.equal(shared, per_call)
    assert all(torch.equal(a, b) for a, b in zip(shared_grads, grads(learner.agent), strict=True))


def plain_loss(learner: QLearner, batch) -> torch.Tensor:
    """The double-Q TD loss with every round of the online network on the autograd tape and
    each network building its own graph operator: what QLearner.loss computes, written plainly."""
    q = learner.agent.forward_sequence(batch.obs, batch.adj, last_actions(batch))
    chosen = q[:, :-1].gather(-1, batch.actions.unsqueeze(-1)).squeeze(-1)
    with torch.no_grad():
        tq = learner.target_agent.forward_sequence(batch.obs, batch.adj, last_actions(batch))
        best = q[:, 1:].masked_fill(~batch.avail[:, 1:], float("-inf")).argmax(-1, keepdim=True)
        boot = learner.target_mixer(tq[:, 1:].gather(-1, best).squeeze(-1), batch.state[:, 1:])
        cfg = learner.config
        y = lambda_targets(
            batch.reward, batch.terminated, boot.squeeze(-1), cfg.gamma, cfg.td_lambda
        )
    td = (learner.mixer(chosen, batch.state[:, :-1]).squeeze(-1) - y) * batch.filled
    return td.pow(2).sum() / batch.filled.sum()


def test_loss_and_grads_equal_the_plain_unroll():
    """Skipping the backward of the online network's last round changes no gradient."""
    learner = make_learner()
    perturb_targets(learner)
    batch = fixed_batch()
    loss, _ = learner.loss(batch)
    loss.backward()
    fast = grads(learner.agent) + grads(learner.mixer)
    learner.agent.zero_grad(set_to_none=True)
    learner.mixer.zero_grad(set_to_none=True)
    plain = plain_loss(learner, batch)
    plain.backward()
    torch.testing.assert_close(loss.detach(), plain.detach(), rtol=1e-6, atol=1e-7)
    slow = grads(learner.agent) + grads(learner.mixer)
    for a, b in zip(fast, slow, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
    assert any(float(g.abs().sum()) > 0 for g in fast)


def test_bf16_precision_is_close_to_fp32_and_still_learns():
    fp32, bf16 = make_learner(), make_learner(precision="bf16")
    batch = fixed_batch()
    exact, rounded = float(fp32.loss(batch)[0]), float(bf16.loss(batch)[0])
    assert rounded != exact, "bf16 autocast must actually change the arithmetic"
    assert rounded == pytest.approx(exact, rel=0.05)
    loss, _ = bf16.loss(batch)
    assert loss.dtype == torch.float32  # the TD arithmetic stays in fp32
    for _ in range(150):
        bf16.train(batch)
    assert float(bf16.loss(batch)[0]) < rounded / 10
    assert all(p.dtype == torch.float32 for p in bf16.params)
