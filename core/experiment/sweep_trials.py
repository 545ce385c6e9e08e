"""What a sweep's Ray workers run: a trial (:func:`train_trial`, Agent Q-Mix or a
learned-topology method) and the fixed topologies' evaluation (:func:`evaluate_fixed`), as
the remote functions :data:`train_trial_task` and :data:`evaluate_fixed_task`.

A trial never opens the episode store: its episodes (packed in batches,
:func:`pack_episodes`), metric rows and checkpoint come back as its :class:`TrialResult`,
for the driver (:mod:`core.experiment.sweep`), the store's only writer, to log.
"""

from __future__ import annotations

import pickle
import socket
import tempfile
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import ray

from core.baselines.training import BaselineTrainConfig
from core.experiment.evaluate import run_policy
from core.experiment.sweep_plan import TrialSpec
from core.experiment.train import StoreHooks, save_training_checkpoint
from core.qmix.training import train
from core.records import EpisodeRecord
from core.team.env import TeamEnv
from core.team.options import TeamOptions
from core.team.topologies import make_policy

EPISODE_BATCH = 512
"""Episodes per list a trial sends back (and the driver logs with one write)."""


@dataclass
class TrialResult:
    """What a trial sends back to the driver (plain data: it crosses machines)."""

    episodes: list[bytes]
    """Training episodes 0..E-1 in batches of :data:`EPISODE_BATCH`, each batch packed by
    :func:`pack_episodes` (~0.9 KB an episode instead of ~27 KB as Python dicts, so
    neither the trial nor the driver holds a whole run's records at once)."""
    train_episodes: int
    """How many training episodes the batches hold."""
    metrics: list[dict[str, Any]]
    """One row per learner update (the ``train_metrics`` table)."""
    checkpoint: bytes
    """The checkpoint file (evaluates and resumes), as ``agentqmix train`` writes it."""
    evaluation: list[dict[str, Any]]
    """The greedy policy's held-out episodes."""
    updates: int
    seconds: float
    node: str = field(default_factory=socket.gethostname)


def pack_episodes(records: Sequence[EpisodeRecord]) -> bytes:
    """One batch of episodes as compact bytes: ``EpisodeRecord.to_dict()``s, pickled and
    zlib-compressed (level 1: ~0.1 ms an episode). Trial and driver run the same code."""
    return zlib.compress(pickle.dumps([r.to_dict() for r in records], protocol=5), 1)


def unpack_episodes(blob: bytes) -> list[EpisodeRecord]:
    """The episodes :func:`pack_episodes` packed."""
    return [EpisodeRecord.from_dict(d) for d in pickle.loads(zlib.decompress(blob))]


class EpisodeSink:
    """Where :class:`StoreHooks` expects a run logger, in a trial: keeps the episodes
    (packed in batches of :data:`EPISODE_BATCH`) and metric rows in memory so that they
    travel back to the driver, the store's only writer."""

    def __init__(self) -> None:
        self.packed: list[bytes] = []
        self.pending: list[EpisodeRecord] = []
        self.count = 0
        self.metrics: list[dict[str, Any]] = []

    @property
    def next_episode(self) -> int:
        """The number the next episode gets (as :class:`RunLogger` numbers them)."""
        return self.count

    def log_episodes(self, records: Sequence[EpisodeRecord]) -> None:
        self.pending += records
        self.count += len(records)
        while len(self.pending) >= EPISODE_BATCH:
            self.packed.append(pack_episodes(self.pending[:EPISODE_BATCH]))
            del self.pending[:EPISODE_BATCH]

    def log_metrics(self, rows: Sequence[dict[str, Any]]) -> None:
        self.metrics += rows

    def set_checkpoint(self, path: Path, episode: int) -> None:
        """Trials write no checkpoints on the way (the driver writes the final one)."""

    def batches(self) -> list[bytes]:
        """Every batch, packed (the last one may be short)."""
        if self.pending:
            self.packed.append(pack_episodes(self.pending))
            self.pending = []
        return self.packed


def train_trial(spec: TrialSpec) -> TrialResult:
    """Train one trial (nothing logged, explain on as for a logged run) and evaluate its
    greedy policy on the sweep's held-out tasks."""
    if spec.method != "qmix":
        return train_baseline_trial(spec)
    started = time.perf_counter()
    config = replace(spec.train, explain=True)
    sink = EpisodeSink()
    # A checkpoint interval past the end: the one checkpoint is written below, as bytes.
    hooks = StoreHooks(sink, Path("unused"), config.episodes + 1, save=lambda state: None)
    team = TeamEnv(spec.team, "train")
    try:
        state = train(team.vectorized, config, hooks=hooks)
        hooks.flush()
    finally:
        team.close()
    with tempfile.TemporaryDirectory() as tmp:
        path = save_training_checkpoint(
            Path(tmp) / "trial.pt", state, spec.train, spec.team, None, {"sweep": spec.key}
        )
        blob = path.read_bytes()
    policy = state.greedy_policy()
    held_out = run_policy(spec.team, policy, spec.eval_episodes, spec.eval_seed)
    return _trial_result(sink, blob, held_out, state.learner.updates, started)


def train_baseline_trial(spec: TrialSpec) -> TrialResult:
    """A learned-topology method's trial: trained with its episodes and update rows kept in
    memory (as a qmix trial's), its checkpoint as bytes, its decoded graphs held out."""
    from core.baselines.registry import method_config
    from core.experiment.methods import BaselineStoreHooks, train_baseline
    from core.experiment.policies import baseline_policy

    started = time.perf_counter()
    sink = EpisodeSink()
    config = method_config(spec.method, spec.knob)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trial.pt"
        outcome = train_baseline(
            spec.team, spec.method, config, spec.baseline_train or BaselineTrainConfig(),
            path, log=False, eval_episodes=0, hooks=BaselineStoreHooks(sink),
        )  # fmt: skip
        blob = path.read_bytes()
        policy = baseline_policy(path, replace(spec.team, seed=spec.eval_seed))
        held_out = run_policy(spec.team, policy, spec.eval_episodes, spec.eval_seed)
    return _trial_result(sink, blob, held_out, outcome.state.updates, started)


def _trial_result(
    sink: EpisodeSink, blob: bytes, held_out: list, updates: int, started: float
) -> TrialResult:
    """What a trial of any family sends back: its training episodes and metrics (kept in
    ``sink``), its checkpoint's bytes, its held-out episodes, updates and seconds."""
    return TrialResult(
        episodes=sink.batches(),
        train_episodes=sink.count,
        metrics=sink.metrics,
        checkpoint=blob,
        evaluation=[r.to_dict() for r in held_out],
        updates=updates,
        seconds=time.perf_counter() - started,
    )


def evaluate_fixed(
    team: TeamOptions, names: Sequence[str], episodes: int, seed: int
) -> dict[str, list[dict[str, Any]]]:
    """Each fixed topology on held-out episodes ``0..episodes-1`` of stream ``seed``."""
    return {
        name: [r.to_dict() for r in run_policy(team, make_policy(name), episodes, seed)]
        for name in names
    }


train_trial_task = ray.remote(num_cpus=1)(train_trial)
evaluate_fixed_task = ray.remote(num_cpus=1)(evaluate_fixed)
