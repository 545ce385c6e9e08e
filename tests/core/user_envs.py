"""Source text of a tiny user environment file, for CLI tests that load ``--env file.py:make``."""

CORRIDOR = '''
import numpy as np


class Corridor:
    """Two agents; the team scores when both pick action 1."""

    n_agents, n_actions, obs_dim, state_dim, max_steps = 2, 2, 1, 1, 2

    def reset(self, seed=None):
        self.t = 0
        return self.observe()

    def observe(self):
        return {
            "obs": np.full((2, 1), self.t, dtype=np.float32),
            "state": np.full(1, self.t, dtype=np.float32),
            "adj": np.array([[0, 1], [0, 0]]),
            "avail": np.ones((2, 2), dtype=bool),
        }

    def step(self, actions):
        self.t += 1
        return self.observe(), float(all(a == 1 for a in actions)), self.t >= 2, {}

'''
"""Two agents; the team scores when both pick action 1 (the protocol of docs/environment.md)."""

MAKE = """

def make():
    return Corridor()
"""
