"""The environment protocol: checks, ``--env`` loading, and the relay coordination game."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from core.errors import UserError
from core.qmix.env import EnvShapes, SerialVecEnv, check_env, check_obs, load_env
from core.qmix.games import RelayGame, relay_game

TINY_ENV = '''
from pathlib import Path

import numpy as np


class Corridor:
    """Two agents; the team scores when both pick action 1."""

    n_agents, n_actions, obs_dim, state_dim, max_steps = 2, 2, 1, 1, 2

    def reset(self, seed=None):
        self.t = 0
        return self._obs()

    def _obs(self):
        return {
            "obs": np.zeros((2, 1)),
            "state": np.zeros(1),
            "adj": np.zeros((2, 2)),
            "avail": np.ones((2, 2), dtype=bool),
        }

    def step(self, actions):
        self.t += 1
        return self._obs(), float(all(a == 1 for a in actions)), self.t >= 2, {}


def make():
    return Corridor()


not_callable = 3


def broken():
    return object()
'''


@pytest.fixture
def env_file(tmp_path):
    path = tmp_path / "tiny_env.py"
    path.write_text(TINY_ENV)
    return path


def test_load_env_from_a_module_spec():
    env = load_env("core.qmix.games:relay_game")
    assert isinstance(env, RelayGame)
    assert EnvShapes.of(env) == EnvShapes(3, 3, 4, 4, 3)


def test_load_env_from_a_file_spec(env_file):
    env = load_env(f"{env_file}:make")
    assert type(env).__name__ == "Corridor"
    obs = check_obs(env.reset(seed=1), check_env(env))
    assert obs["obs"].dtype == np.float32 and obs["avail"].dtype == bool
    _, reward, done, _ = env.step([1, 1])
    assert reward == 1.0 and not done


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("core.qmix.games", "must look like"),
        ("core.qmix.games.relay_game", "must look like"),
        ("no_such_package.mod:make", "cannot be imported"),
        ("core.qmix.games:no_such_factory", "is not a callable"),
        ("core.qmix.games:", "is not a callable"),
        ("missing/dir/env.py:make", "does not exist"),
    ],
)
def test_bad_specs_are_user_errors(spec, message):
    with pytest.raises(UserError, match=message):
        load_env(spec)


def test_bad_factories_in_a_file_are_user_errors(env_file):
    with pytest.raises(UserError, match="is not a callable"):
        load_env(f"{env_file}:not_callable")
    with pytest.raises(UserError, match="does not follow the environment protocol"):
        load_env(f"{env_file}:broken")


class Bare:
    n_agents, n_actions, obs_dim, state_dim, max_steps = 2, 3, 4, 5, 6

    def reset(self, seed=None):
        return {}

    def step(self, actions):
        return {}, 0.0, True, {}


def test_check_env_lists_what_is_missing():
    assert check_env(Bare()) == EnvShapes(2, 3, 4, 5, 6)
    env = Bare()
    env.obs_dim = 2.5  # not an integer
    env.reset = None
    with pytest.raises(UserError, match="missing obs_dim, reset"):
        check_env(env)
    env = Bare()
    env.max_steps = 0
    with pytest.raises(UserError, match="non-positive max_steps"):
        check_env(env)
    env = Bare()
    env.n_agents = np.int64(2)  # numpy integers are integers too
    assert check_env(env).n_agents == 2


def good_obs() -> dict:
    return {
        "obs": np.zeros((2, 4)),
        "state": [0.0] * 5,
        "adj": np.eye(2, dtype=int),
        "avail": np.ones((2, 3), dtype=int),
    }


def test_check_obs_coerces_dtypes_and_checks_shapes():
    shapes = check_env(Bare())
    out = check_obs(good_obs(), shapes)
    assert out["obs"].dtype == np.float32 and out["state"].dtype == np.float32
    assert out["adj"].dtype == np.float32 and out["avail"].dtype == bool
    bad = good_obs()
    bad["adj"] = np.zeros((3, 3))
    with pytest.raises(UserError, match=r"adj of shape \(3, 3\), expected \(2, 2\)"):
        check_obs(bad, shapes)
    bad = good_obs()
    del bad["state"]
    with pytest.raises(UserError, match="without the keys"):
        check_obs(bad, shapes)
    bad = good_obs()
    bad["avail"][1] = 0
    with pytest.raises(UserError, match="no available action"):
        check_obs(bad, shapes)


class Broken(Bare):
    """Follows the protocol on paper; its step fails or returns nonsense on request."""

    def __init__(self, result=None):
        self.result = result

    def reset(self, seed=None):
        return good_obs()

    def step(self, actions):
        if self.result is None:
            return {}["missing"]
        return self.result


def test_serial_vec_env_names_a_user_env_but_lets_our_own_bugs_raise():
    actions = np.zeros((1, 2), dtype=np.int64)
    user = SerialVecEnv([Broken()], where="--env mine:make")
    user.reset([0])
    with pytest.raises(UserError, match=r"--env mine:make: step raised KeyError: 'missing'"):
        user.step([0], actions)
    ours = SerialVecEnv([Broken()])  # no ``where``: the project's own environment
    ours.reset([0])
    with pytest.raises(KeyError):
        ours.step([0], actions)
    for result, message in [
        ((good_obs(), 1.0), "a 2-tuple"),
        ((good_obs(), "1.0", False, {}), "reward of type str"),
        ((good_obs(), True, False, {}), "reward of type bool"),
        ((good_obs(), float("nan"), False, {}), "non-finite reward"),
        ((good_obs(), 1.0, False, "info"), "info of type str"),
        (({**good_obs(), "obs": "zeros"}, 1.0, False, {}), "obs as str"),
    ]:
        venv = SerialVecEnv([Broken(result)])
        venv.reset([0])
        with pytest.raises(UserError, match=message):
            venv.step([0], actions)
    obs, reward, done, info = SerialVecEnv([Broken((good_obs(), 2, 1, None))]).step([0], actions)[0]
    assert (reward, done, info) == (2.0, True, {}) and obs["obs"].dtype == np.float32


def test_check_env_refuses_bool_and_absurd_sizes():
    env = Bare()
    env.n_agents = True
    with pytest.raises(UserError, match="missing n_agents"):
        check_env(env)
    env = Bare()
    env.obs_dim = 10**9
    with pytest.raises(UserError, match=r"sizes too large: obs_dim 1000000000 \(at most"):
        check_env(env)


def test_relay_game_rewards_only_the_relayed_signal():
    env = RelayGame(n_agents=3, n_actions=4, max_steps=5)
    obs = env.reset(seed=3)
    shapes = check_env(env)
    total = 0.0
    for t in range(5):
        o = check_obs(obs, shapes)
        signal = int(np.argmax(o["obs"][0, :4]))
        assert o["obs"][1:, :4].sum() == 0, "only agent 0 sees the signal"
        assert o["state"][signal] == 1.0
        assert o["adj"].tolist() == [[0, 1, 1], [0, 0, 0], [0, 0, 0]]
        wrong = [signal, signal, (signal + 1) % 4]
        obs, reward, done, info = env.step([signal] * 3 if t % 2 == 0 else wrong)
        assert reward == float(t % 2 == 0) and info["won"] == (reward == 1.0)
        assert done == (t == 4)
        total += reward
    assert total == 3.0


def test_relay_game_is_seeded():
    a, b = relay_game(), relay_game()
    signals = []
    for env in (a, b):
        obs, seq = env.reset(seed=42), []
        for _ in range(3):
            seq.append(int(np.argmax(obs["obs"][0, :3])))
            obs, *_ = env.step([0, 0, 0])
        signals.append(seq)
    assert signals[0] == signals[1]
    with pytest.raises(ValueError, match="n_agents"):
        RelayGame(n_agents=1)


def test_the_documented_example_env_follows_the_protocol(tmp_path):
    doc = (Path(__file__).resolve().parents[3] / "docs" / "environment.md").read_text()
    code = doc.split("```python\n", 1)[1].split("```", 1)[0]
    (tmp_path / "meet.py").write_text(code)
    env = load_env(f"{tmp_path / 'meet.py'}:make")
    shapes = check_env(env)
    obs = check_obs(env.reset(seed=0), shapes)
    total = 0.0
    for t in range(shapes.max_steps):
        target = int(np.argmax(obs["obs"][0]))
        nxt, reward, done, _ = env.step([target, target])
        obs = check_obs(nxt, shapes)
        total += reward
        assert done == (t == shapes.max_steps - 1)
    assert total == shapes.max_steps
