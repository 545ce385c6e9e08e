"""Who plays the training episodes: this process, or a child process one iteration ahead.

Training alternates *collect* (play ``n_envs`` episodes, pure Python for the synthetic
society) and *optimise* (learner updates, torch). On a machine with two cores, a child
process can play the next episodes while this one trains on the last ones, so an iteration
costs about the larger of the two instead of their sum. The child acts with the weights of
the moment the episodes were asked for, one iteration before the updates that follow:
a fixed lag, so the same seed still gives the same run.

``ask(episodes, epsilon)`` then ``take() -> results``, once per iteration:

* :class:`InlineCollector` plays at ``take`` with the weights of that moment: exactly the
  sequential loop (and the only choice for environments that wait on a server).
* :class:`ChildCollector` sends the request with a copy of the weights at ``ask``; a forked
  child plays it while the caller optimises; ``take`` waits for the results.
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import multiprocessing
import os
import pickle
import signal
import sys
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
import torch

from core.qmix.env import VecEnv
from core.qmix.policy import QMixPolicy
from core.qmix.runner import EpisodeResult, rollout


class InlineCollector:
    """Plays each asked batch here, at ``take``, with the weights of that moment."""

    def __init__(self, venv: VecEnv, policy: QMixPolicy, explain: bool):
        self.venv, self.policy, self.explain = venv, policy, explain
        self.asked: tuple[list[int], float] | None = None

    def ask(self, episodes: list[int], epsilon: float) -> None:
        self.asked = (episodes, epsilon)

    def take(self) -> list[EpisodeResult]:
        episodes, self.policy.epsilon = self.asked
        self.asked = None
        return rollout(self.venv, self.policy, episodes, explain=self.explain)

    def close(self) -> None:
        """Nothing runs elsewhere."""


def weights_of(*modules: torch.nn.Module) -> list[dict[str, np.ndarray]]:
    """The modules' parameters and buffers as CPU arrays (what crosses to the child)."""
    return [
        {k: v.detach().cpu().numpy().copy() for k, v in m.state_dict().items()} for m in modules
    ]


class ChildCollector:
    """Plays each asked batch in a forked child process while the caller optimises.

    The child inherits the environment and CPU copies of the networks at the fork; each
    request carries the weights of the moment it was made. Needs the ``fork`` start method
    (Linux, macOS): the environment is never pickled.
    """

    def __init__(
        self,
        venv: VecEnv,
        agent: torch.nn.Module,
        mixer: torch.nn.Module,
        explain: bool,
        generator: torch.Generator,
    ):
        self.agent, self.mixer = agent, mixer
        # CPU copies made before the fork: a forked child must not touch CUDA.
        cpu_agent, cpu_mixer = copy.deepcopy(agent).cpu(), copy.deepcopy(mixer).cpu()
        context = multiprocessing.get_context("fork")
        self.conn, child_end = context.Pipe()
        self.process = context.Process(
            target=_serve,
            args=(
                child_end,
                self.conn,
                os.getpid(),
                venv,
                cpu_agent,
                cpu_mixer,
                explain,
                generator,
            ),
            name="qmix-collector",
            daemon=True,
        )
        self.process.start()
        child_end.close()
        self.waiting = False

    def ask(self, episodes: list[int], epsilon: float) -> None:
        self.conn.send((episodes, epsilon, weights_of(self.agent, self.mixer)))
        self.waiting = True

    def take(self) -> list[EpisodeResult]:
        kind, payload = self.conn.recv()
        self.waiting = False
        if kind == "error":
            raise payload
        return payload

    def close(self) -> None:
        """Stop the child: at once when it is playing a batch nobody will take (a stopped
        run), else after it has read the end of the requests."""
        if self.process.is_alive():
            if self.waiting:
                self.process.terminate()
            else:
                with contextlib.suppress(OSError):  # it may have just ended (after an error)
                    self.conn.send(None)
            self.process.join(timeout=30)
            if self.process.is_alive():
                self.process.kill()
                self.process.join()
        self.conn.close()


def _die_with(parent_pid: int) -> None:
    """End this child when its parent dies, even by SIGKILL: an orphaned collector would keep
    the run's inherited spool lock, and ``train --resume`` would see the run as still running."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent_pid:  # the parent died before the line above took effect
        os._exit(0)


def _serve(
    conn: Connection,
    parent_end: Connection,
    parent_pid: int,
    venv: VecEnv,
    agent: torch.nn.Module,
    mixer: torch.nn.Module,
    explain: bool,
    generator: torch.Generator,
) -> None:
    """The child's loop: play each request, send its results (or its error) back."""
    _die_with(parent_pid)
    # The parent's end stays open in this process unless closed here: then a dead parent
    # is an end of file, not a wait for ever.
    parent_end.close()
    # Ctrl-C is the parent's to handle; it ends the child when it stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(1)
    policy = QMixPolicy(agent, mixer, torch.device("cpu"), generator=generator)
    while (request := _receive(conn)) is not None:
        episodes, epsilon, weights = request
        for module, state in zip((agent, mixer), weights, strict=True):
            module.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
        policy.epsilon = epsilon
        try:
            reply: tuple[str, Any] = ("ok", rollout(venv, policy, episodes, explain=explain))
        except Exception as exc:  # the parent raises it; the child has nothing left to do
            reply = ("error", exc if _picklable(exc) else RuntimeError(repr(exc)))
        conn.send(reply)
        if reply[0] == "error":
            break
    conn.close()


def _receive(conn: Connection) -> Any:
    try:
        return conn.recv()
    except EOFError:  # the parent is gone
        return None


def _picklable(obj: Any) -> bool:
    try:
        pickle.dumps(obj)
    except Exception:
        return False
    return True
