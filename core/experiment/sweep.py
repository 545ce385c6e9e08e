"""The token/accuracy sweep: one learned policy per (token weight, seed), trained on Ray.

Each trial is a Ray task (:data:`train_trial_task`, one CPU) that trains with nothing
logged, then plays the greedy policy on the sweep's ``K`` held-out tasks (eval seed
``E``); each fixed topology plays the very same tasks in a task of its own
(:data:`evaluate_fixed_task`). With ``--backend local`` every task plays on one llama.cpp
server the driver starts (:func:`shared_local_server`), one task at a time. Trials never
open the episode store and need no filesystem shared with the driver: their episodes, metric rows and checkpoint come back
as the task's return value (episodes in packed batches, :func:`pack_episodes`,
the checkpoint as bytes). The driver (:func:`run_sweep`) is the store's only writer: it
writes each checkpoint under ``--out`` and logs each trial as one ``train`` run and one
``eval`` run, and each fixed topology as one ``eval`` run. Every run of a sweep stores

    config["sweep"] = {"id": SWEEP_ID, "token_weight": w, "seed": s, "method": m, "knob": k,
                       "pass_through": rule}

(``token_weight`` and ``seed`` are null for the fixed topologies; ``method`` is ``qmix`` or
a learned-topology method of :mod:`core.baselines` (``--methods``), ``knob`` that method's
swept setting, e.g. ``{"prune_ratio": 0.3}`` (``--knob``), empty for qmix and the fixed
topologies; ``pass_through`` the decision rule the point was played under), besides the
usual ``config["team"]`` (its ``token_weight`` and ``token_penalty`` are the trial's reward,
its ``pass_through`` the same rule).

The decision rule is an axis of the grid like the token weight (``--pass-through
off,unanimous``): every trial, and every fixed topology it is compared with, is played once
under each rule, and each rule has its own front — the consensus pass-through changes what
every point costs, so its points and the paper's are two trade-offs, not one.

The result is every point's accuracy, mean tokens and mean reward on the held-out tasks,
each with a 95% interval (accuracy: Wilson score interval; tokens and reward: normal
interval of the mean, ``mean ± 1.96·sd/√n``), and the front: the points no other point
beats on both accuracy (higher) and mean tokens (lower).
"""

from __future__ import annotations

import json
import math
import os
import pickle
import secrets
import signal
import socket
import tempfile
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import RayError

from core.backends.local_server import LocalServer
from core.baselines.names import METHOD_NAMES
from core.baselines.training import BaselineTrainConfig
from core.errors import UserError
from core.experiment.evaluate import log_run, run_policy
from core.experiment.options import make_team_env
from core.experiment.policies import (  # noqa: F401 - the statistics' old home re-exports them
    Z95,
    PolicyInfo,
    mean_interval,
    pareto_front,
    point_stats,
    wilson_interval,
)
from core.experiment.train import StoreHooks, save_training_checkpoint
from core.paths import check_folder, check_not_special, check_output_dir, write_file
from core.qmix.policy import QMixPolicy
from core.qmix.training import TrainConfig, train
from core.records import EpisodeRecord
from core.store.engine import resolve_db, sweep_status_dir
from core.team.options import TeamOptions
from core.team.recipes import TEAM_RECIPE
from core.team.runtime import PASS_THROUGH_RULES, reward
from core.team.topologies import FIXED_TOPOLOGIES, make_policy

SWEEP_METHODS = ("qmix", *METHOD_NAMES)
"""What a sweep's trials can train (``--methods``)."""
EPISODE_BATCH = 512
"""Episodes per list a trial sends back (and the driver logs with one write)."""
CONNECT_TIMEOUT_S = 5.0
"""How long to try to reach ``--ray-address`` before saying it cannot be reached."""
POLL_S = 0.5
"""How often the driver looks up from waiting (to update the progress bar, notice Ctrl-C)."""


# --------------------------------------------------------------------------- configuration


@dataclass
class SweepConfig:
    """What a sweep trains and where it runs (the team and the learner come separately)."""

    token_weights: tuple[float, ...]
    """w_tok of each trial's reward."""
    seeds: tuple[int, ...]
    """Training seeds; one trial per (token weight, seed)."""
    out: Path
    """Folder for the checkpoints and ``sweep.json``."""
    eval_episodes: int = 100
    """K: held-out tasks every trial and every fixed topology plays."""
    eval_seed: int = 0
    """E: the held-out stream the K tasks come from."""
    ray_address: str | None = None
    """An existing Ray cluster (``HOST:PORT``, ``ray://HOST:PORT`` or ``auto``); None = start
    a local Ray with this machine's cores."""
    max_parallel: int | None = None
    """Trials in flight at once; None = the cluster's CPUs. On a shared local server: tasks
    of any kind in flight; None = 1 (it decodes one call at a time)."""
    topologies: tuple[str, ...] = tuple(FIXED_TOPOLOGIES)
    """Fixed topologies evaluated beside the trials."""
    methods: tuple[str, ...] = ("qmix",)
    """What each trial trains: Agent Q-Mix and/or learned-topology methods (docs/baselines.md)."""
    knobs: dict[str, tuple[str, tuple[float, ...]]] = field(default_factory=dict)
    """Per learned-topology method, the setting swept besides the token weight and its values
    (``--knob agentprune=0.3,0.5``); a method without one trains at its defaults."""
    resume: str | None = None
    """The id of a sweep to continue (``--resume``): only what the store lacks of it runs."""
    pass_through: tuple[str, ...] | None = None
    """Decision rules (``--pass-through off,unanimous``): every trial and every fixed
    topology is played once under each; None = the team options' own rule."""

    def rules(self, team: TeamOptions) -> tuple[str, ...]:
        """The decision rules this sweep plays, in order (``team``'s when none are given)."""
        return self.pass_through if self.pass_through is not None else (team.pass_through,)

    def counts(self) -> tuple[int, int]:
        """(trials, fixed-topology evaluations) the plan holds."""
        rules = 1 if self.pass_through is None else len(self.pass_through)
        per_rule = sum(len(self.knobs[m][1]) if m in self.knobs else 1 for m in self.methods)
        per_rule *= len(self.token_weights) * len(self.seeds)
        return per_rule * rules, len(self.topologies) * rules

    def validate(self) -> None:
        if not self.methods:
            raise UserError("--methods needs at least one method.")
        unknown = [m for m in self.methods if m not in SWEEP_METHODS]
        if unknown:
            raise UserError(f"--methods takes {', '.join(SWEEP_METHODS)}, not {unknown[0]!r}.")
        for method in self.knobs:
            if method not in self.methods:
                raise UserError(f"--knob {method}=... names a method that --methods leaves out.")
        if not self.token_weights:
            raise UserError("--token-weights needs at least one weight.")
        if not self.seeds:
            raise UserError("--seeds needs at least one seed.")
        if self.eval_episodes < 1:
            raise UserError(f"--eval-episodes must be >= 1, not {self.eval_episodes}.")
        if self.max_parallel is not None and self.max_parallel < 1:
            raise UserError(f"--max-parallel must be >= 1, not {self.max_parallel}.")
        unknown = [t for t in self.topologies if t not in FIXED_TOPOLOGIES]
        if unknown:
            raise UserError(f"no fixed topology {unknown[0]!r}.")
        if self.pass_through is not None:
            _check_rules(self.pass_through)
        check_folder(self.out, "--out")
        names = [
            checkpoint_name(w, s, pass_through=rule)
            for rule in self.pass_through or (TeamOptions.pass_through,)
            for w in self.token_weights
            for s in self.seeds
        ]
        for name in ("sweep.json", *names):
            check_not_special(self.out / name, "--out")
        held = held_sweep_id(self.out / "sweep.json")
        if held is None or held == self.resume:
            return
        if self.resume is None and not held:
            raise UserError(f"--out {self.out} already holds a sweep.json; choose another folder.")
        if self.resume is None:
            raise UserError(
                f"--out {self.out} already holds sweep {held} (sweep.json); continue it with "
                f"--resume {held} or choose another folder."
            )
        raise UserError(
            f"--out {self.out} holds the sweep.json of {held or 'another sweep'}, not of "
            f"{self.resume}; give the folder {self.resume} wrote to, or another."
        )


def held_sweep_id(path: Path) -> str | None:
    """The id of the sweep whose ``sweep.json`` is at ``path`` ("" when the file is not a
    sweep's); None when there is no file."""
    if not path.exists():
        return None
    try:
        held = json.loads(path.read_text()).get("sweep_id")
    except (OSError, ValueError, AttributeError):
        return ""
    return held if isinstance(held, str) else ""


def parse_token_weights(text: str) -> tuple[float, ...]:
    """``"0.1,0.3,1.0"`` -> ``(0.1, 0.3, 1.0)``; one sentence on bad input."""
    return _parse_list(
        text, "--token-weights", "weight", float, lambda w: math.isfinite(w) and w >= 0,
        "comma-separated numbers >= 0 such as 0.1,0.3,1.0",
    )  # fmt: skip


def parse_seeds(text: str) -> tuple[int, ...]:
    """``"0,1,2"`` -> ``(0, 1, 2)``; one sentence on bad input."""
    return _parse_list(
        text, "--seeds", "seed", int, lambda s: 0 <= s < 2**63,
        "comma-separated whole numbers >= 0 such as 0,1,2",
    )  # fmt: skip


def _parse_list(
    text: str,
    flag: str,
    noun: str,
    convert: Callable[[str], Any],
    valid: Callable[[Any], bool],
    takes: str,
) -> tuple[Any, ...]:
    """A comma-separated list for ``flag``: each item converted and checked, no repeats."""
    example = f"{flag} takes {takes}"
    items = _items(text, flag, noun)
    try:
        values = tuple(convert(t) for t in items)
    except ValueError:
        raise UserError(f"{example}, not {text!r}.") from None
    if not all(valid(v) for v in values):
        raise UserError(f"{example}, not {text!r}.")
    return _distinct(values, flag)


def _items(text: str, flag: str, what: str) -> list[str]:
    items = [t.strip() for t in text.split(",")]
    if not any(items):
        raise UserError(f"{flag} needs at least one {what}.")
    if not all(items):
        raise UserError(f"{flag} has an empty item in {text!r}.")
    return items


def _distinct(values: tuple[Any, ...], flag: str) -> tuple[Any, ...]:
    repeated = [v for i, v in enumerate(values) if v in values[:i]]
    if repeated:
        shown = repeated[0] if isinstance(repeated[0], str) else f"{repeated[0]:g}"
        raise UserError(f"{flag} repeats {shown}.")
    return values


def parse_pass_through(text: str) -> tuple[str, ...]:
    """``"off,unanimous"`` -> ``("off", "unanimous")``: the decision rules a sweep plays
    every trial and fixed topology under; one sentence on bad input."""
    return _check_rules(_distinct(tuple(_items(text, "--pass-through", "rule")), "--pass-through"))


def _check_rules(rules: tuple[str, ...]) -> tuple[str, ...]:
    if not rules:
        raise UserError("--pass-through needs at least one rule.")
    unknown = [r for r in rules if r not in PASS_THROUGH_RULES]
    if unknown:
        raise UserError(
            f"--pass-through takes {', '.join(PASS_THROUGH_RULES)} (comma-separated), "
            f"not {unknown[0]!r}."
        )
    return rules


def rule_text(pass_through: str) -> str:
    """``, pass-through unanimous`` for a point played under the consensus pass-through; ""
    under the paper's rule (the default), so that a sweep without it reads as before."""
    return "" if pass_through == TeamOptions.pass_through else f", pass-through {pass_through}"


def parse_topologies(text: str) -> tuple[str, ...]:
    """``"single,star"`` -> ``("single", "star")``; one sentence on bad input."""
    names = tuple(_items(text, "--topologies", "topology"))
    unknown = [t for t in names if t not in FIXED_TOPOLOGIES]
    if unknown:
        raise UserError(f"--topologies takes {', '.join(FIXED_TOPOLOGIES)}, not {unknown[0]!r}.")
    return _distinct(names, "--topologies")


def parse_methods(text: str) -> tuple[str, ...]:
    """``"qmix,agentprune"`` -> ``("qmix", "agentprune")``; one sentence on bad input."""
    methods = tuple(_items(text, "--methods", "method"))
    unknown = [m for m in methods if m not in SWEEP_METHODS]
    if unknown:
        raise UserError(f"--methods takes {', '.join(SWEEP_METHODS)}, not {unknown[0]!r}.")
    return _distinct(methods, "--methods")


def parse_knobs(specs: Sequence[str]) -> dict[str, tuple[str, tuple[float, ...]]]:
    """``["agentprune=0.3,0.5", "agentdropout.node_dropout=0.25,0.5"]`` -> per method, the
    setting (its registry knob unless ``.FIELD`` names another) and its values."""
    from core.baselines.registry import config_fields, method_class

    knobs: dict[str, tuple[str, tuple[float, ...]]] = {}
    for spec in specs:
        target, sep, values = spec.partition("=")
        method, _, setting = target.strip().partition(".")
        if not sep or not method:
            raise UserError(
                f"--knob takes METHOD[.SETTING]=V1,V2 such as agentprune=0.3,0.5, not {spec!r}."
            )
        if method not in METHOD_NAMES:
            raise UserError(f"--knob names {method!r}; knobs belong to {', '.join(METHOD_NAMES)}.")
        setting = setting or method_class(method).knob
        if setting is None:
            raise UserError(f"{method} has no knob of its own; give --knob {method}.SETTING=....")
        default = config_fields(method).get(setting)
        if isinstance(default, bool) or not isinstance(default, int | float):
            raise UserError(f"{method} has no numeric setting {setting!r} to sweep.")
        if method in knobs:
            raise UserError(f"--knob gives {method} twice.")
        knobs[method] = (setting, _parse_list(
            values, f"--knob {target}", "value", float, math.isfinite,
            "comma-separated numbers such as 0.3,0.5",
        ))  # fmt: skip
    return knobs


def new_sweep_id() -> str:
    """``sweep-YYYYmmdd-HHMMSS-xxxx``, like a run id."""
    return f"sweep-{datetime.now():%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


def checkpoint_name(
    token_weight: float,
    seed: int,
    method: str = "qmix",
    knob: dict[str, float] | None = None,
    pass_through: str = TeamOptions.pass_through,
) -> str:
    """``tw0.1-seed0.pt`` for Agent Q-Mix; ``agentprune-prune_ratio0.3-tw0.1-seed0.pt``;
    ``tw0.1-seed0-pass-through-unanimous.pt`` under the consensus pass-through."""
    rule = "" if pass_through == TeamOptions.pass_through else f"-pass-through-{pass_through}"
    if method == "qmix":
        return f"tw{token_weight:g}-seed{seed}{rule}.pt"
    knobs = "".join(f"-{k}{v:g}" for k, v in (knob or {}).items())
    return f"{method}{knobs}-tw{token_weight:g}-seed{seed}{rule}.pt"


# --------------------------------------------------------------------------- the Ray tasks


@dataclass
class TrialSpec:
    """One trial: the team at one token weight, trained from one seed."""

    sweep_id: str
    token_weight: float
    seed: int
    team: TeamOptions
    """The team with this trial's token weight, seed and decision rule."""
    train: TrainConfig
    """The learner with this trial's seed (Agent Q-Mix)."""
    eval_episodes: int
    eval_seed: int
    method: str = "qmix"
    """``qmix`` or a learned-topology method."""
    knob: dict[str, float] = field(default_factory=dict)
    """The method's swept setting and its value in this trial (empty: its defaults)."""
    baseline_train: BaselineTrainConfig | None = None
    """The budget of a learned-topology method (None for qmix)."""

    @property
    def pass_through(self) -> str:
        """The decision rule this trial trains and is evaluated under."""
        return self.team.pass_through

    @property
    def key(self) -> dict[str, Any]:
        """What every run of this trial stores as ``config["sweep"]``."""
        return {
            "id": self.sweep_id,
            "token_weight": self.token_weight,
            "seed": self.seed,
            "method": self.method,
            "knob": self.knob,
            "pass_through": self.pass_through,
        }

    @property
    def label(self) -> str:
        knob = "".join(f", {k} {v:g}" for k, v in self.knob.items())
        return (
            f"{self.method}{knob}, token weight {self.token_weight:g}, seed {self.seed}"
            f"{rule_text(self.pass_through)}"
        )


@dataclass
class FixedSpec:
    """One fixed topology's evaluation: played under one decision rule (the rule of the
    trials it is compared with) at the sweep's first token weight; its reward is re-scored
    at every weight."""

    sweep_id: str
    name: str
    team: TeamOptions
    """The team it plays: the first swept weight, this evaluation's decision rule."""

    @property
    def pass_through(self) -> str:
        return self.team.pass_through

    @property
    def key(self) -> dict[str, Any]:
        """What its eval run stores as ``config["sweep"]``."""
        return fixed_key(self.sweep_id, self.name, self.pass_through)

    @property
    def label(self) -> str:
        return f"fixed topology {self.name}{rule_text(self.pass_through)}"


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
    team = make_team_env(spec.team, "train")
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
    policy = QMixPolicy(state.agent, state.mixer, state.device, epsilon=0.0, label="qmix")
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


# --------------------------------------------------------------------------- Ray


def check_reachable(address: str, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """A UserError unless something listens at ``address`` (``ray.init`` itself would wait
    for minutes on an address where nothing answers)."""
    if address == "auto":
        return
    hostport = address.removeprefix("ray://")
    host, sep, port = hostport.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise UserError(
            f"--ray-address must be HOST:PORT, ray://HOST:PORT or auto, not {address!r}."
        )
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise UserError(
            f"cannot reach a Ray cluster at {address} ({reason}); start one with "
            "`ray start --head` or leave out --ray-address to run on this machine."
        ) from None


@contextmanager
def ray_session(address: str | None) -> Iterator[None]:
    """Ray for the sweep: a local Ray with this machine's cores, or the cluster at
    ``address`` (this package's ``core`` travels to its workers, so they run the driver's
    code). Reuses a Ray the caller already started; otherwise shuts it down after."""
    if ray.is_initialized():
        yield
        return
    quiet = {"include_dashboard": False, "log_to_driver": False, "logging_level": "ERROR"}
    if address is None:
        with _local_ray(quiet):
            yield
        return
    check_reachable(address)
    core_dir = str(Path(__file__).resolve().parent.parent)
    env = {"py_modules": [core_dir], "excludes": ["__pycache__"]}
    try:
        ray.init(address=address, runtime_env=env, **quiet)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise UserError(
            f"could not join the Ray cluster at {address} ({_one_line(exc)})."
        ) from None
    try:
        yield
    finally:
        ray.shutdown()


@contextmanager
def _local_ray(quiet: dict[str, Any]) -> Iterator[None]:
    """A local Ray in a temporary folder of its own, shut down and removed on every exit:
    normal, exception, Ctrl-C, SIGTERM (turned into SystemExit here), and — through the
    watcher of :mod:`core.experiment.ray_reaper` — the driver's own death by SIGKILL."""
    import subprocess
    import sys

    from core.experiment.ray_reaper import DONE, MARK, reap, snapshot

    # Short, under /tmp: Ray's socket paths must stay within 107 bytes.
    temp_dir = tempfile.mkdtemp(prefix="aqmix-ray-", dir="/tmp")
    watcher = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("ray_reaper.py")), temp_dir],
        stdin=subprocess.PIPE,
        start_new_session=True,
        cwd=str(Path(__file__).resolve().parents[2]),
    )
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        os.environ[MARK] = temp_dir  # inherited by every process Ray starts
        try:
            ray.init(num_cpus=os.cpu_count(), _temp_dir=temp_dir, **quiet)
        finally:
            os.environ.pop(MARK, None)
        yield
    finally:
        seen = snapshot(temp_dir)  # before shutdown orphans the workers
        try:
            ray.shutdown()
        finally:
            reap(temp_dir, seen)  # what shutdown left (it leaves the folder, at least)
            assert watcher.stdin is not None
            watcher.stdin.write(DONE)
            watcher.stdin.close()
            watcher.wait()
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


@contextmanager
def interrupt_requests() -> Iterator[threading.Event]:
    """Ctrl-C sets the event (the driver then cancels what runs and keeps what finished);
    a second Ctrl-C interrupts at once."""
    requested = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield requested
        return

    def on_sigint(signum: int, frame: Any) -> None:
        if requested.is_set():
            raise KeyboardInterrupt
        requested.set()

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield requested
    finally:
        signal.signal(signal.SIGINT, previous)


def _trial_id(spec: TrialSpec) -> dict[str, Any]:
    return {
        "method": spec.method,
        "knob": spec.knob,
        "token_weight": spec.token_weight,
        "seed": spec.seed,
        "pass_through": spec.pass_through,
    }


def _one_line(exc: BaseException) -> str:
    cause = getattr(exc, "cause", None)  # a RayTaskError carries the task's own exception
    if isinstance(cause, BaseException):
        exc = cause
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


# --------------------------------------------------------------------------- the driver


@dataclass
class SweepStatus:
    """What the progress bar shows."""

    total: int
    """Trials planned (``done``, ``running``, ``failed`` count trials too)."""
    done: int = 0
    running: int = 0
    failed: int = 0
    fixed_total: int = 0
    """Fixed topologies planned; each is a task of its own."""
    fixed_done: int = 0
    """Fixed topologies played (or failed)."""
    fixed_running: int = 0


class _LiveStatus:
    """Writes the sweep's :class:`SweepStatus` and plan to
    :func:`core.store.engine.sweep_status_dir` when it
    changes (``state``: ``running``, then ``finished``, ``interrupted`` or ``failed``)."""

    def __init__(self, path: Path, plan: dict[str, Any]):
        self.path, self.plan, self.last = path, plan, None
        path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, status: SweepStatus, state: str = "running", error: str = "") -> None:
        now = (state, status.done, status.running, status.failed)
        if now == self.last:
            return
        self.last = now
        body = {**self.plan, **asdict(status), "state": state, "error": error,
                "pid": os.getpid(), "updated_at": time.time()}  # fmt: skip
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(body))
        os.replace(tmp, self.path)  # a reader never sees half a file


def _knob_values(sweep: SweepConfig, method: str) -> list[dict[str, float]]:
    """The knob settings ``method``'s trials take: one per swept value, else its defaults."""
    if method not in sweep.knobs:
        return [{}]
    setting, values = sweep.knobs[method]
    return [{setting: v} for v in values]


def plan_trials(
    sweep_id: str,
    opts: TeamOptions,
    sweep: SweepConfig,
    train_config: TrainConfig,
    baseline_config: BaselineTrainConfig,
) -> list[TrialSpec]:
    """Every trial of the grid: per method, knob value, decision rule, token weight and seed."""
    return [
        TrialSpec(
            sweep_id,
            w,
            s,
            replace(opts, token_weight=w, seed=s, pass_through=rule),
            replace(train_config, seed=s),
            sweep.eval_episodes,
            sweep.eval_seed,
            method,
            knob,
            None if method == "qmix" else replace(baseline_config, seed=s),
        )
        for method in sweep.methods
        for knob in _knob_values(sweep, method)
        for rule in sweep.rules(opts)
        for w in sweep.token_weights
        for s in sweep.seeds
    ]


def plan_fixed(sweep_id: str, opts: TeamOptions, sweep: SweepConfig) -> list[FixedSpec]:
    """Every fixed topology under every decision rule: a point is compared only with points
    played under the same rule. They do not learn: the token weight changes their reward,
    not their play, so each plays once (at the first weight) and is re-scored at every weight."""
    first = sweep.token_weights[0]
    return [
        FixedSpec(sweep_id, name, replace(opts, token_weight=first, pass_through=rule))
        for name in sweep.topologies
        for rule in sweep.rules(opts)
    ]


def run_sweep(
    opts: TeamOptions,
    sweep: SweepConfig,
    train_config: TrainConfig,
    db: str | None = None,
    log: bool = True,
    progress: Callable[[SweepStatus], None] | None = None,
    report: Callable[[str], None] | None = None,
    trial_task: Any = None,
    baseline_config: BaselineTrainConfig | None = None,
    notice: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run the sweep on Ray; log every run from here; return the result (also written to
    ``out/sweep.json``). ``report`` gets one line per failed trial; ``trial_task`` is the
    remote function that trains a trial (default :data:`train_trial_task`);
    ``baseline_config`` is the budget of the learned-topology methods' trials; ``notice``
    gets the lines that say what a resumed sweep (``sweep.resume``) skips and runs again,
    which local model server plays, and one line per finished trial or topology."""
    baseline_config = baseline_config or BaselineTrainConfig()
    import json

    from core.store import open_store

    if sweep.resume is not None and not log:
        raise UserError("--resume reads what the sweep stored, so it cannot go with --no-log.")
    opts.validate()
    rules = sweep.rules(opts)
    sweep = replace(sweep, pass_through=rules)
    sweep.validate()
    train_config.validate()
    if sweep.ray_address is not None:
        check_reachable(sweep.ray_address)  # before anything is created
    if sweep.resume is not None and not resolve_db(db).exists():
        raise UserError(
            f"No episode store at {resolve_db(db)}; --resume needs the --db the sweep logged to."
        )
    if opts.backend == "local":  # a bad model file or install: one sentence, nothing made
        from core.backends.local_server import check_installed, resolve
        from core.backends.registry import local_model_server

        resolve(local_model_server(opts))
        check_installed()
    if log:
        open_store(db)  # a bad --db is one sentence before any work
    sweep_id = sweep.resume or new_sweep_id()
    specs = plan_trials(sweep_id, opts, sweep, train_config, baseline_config)
    fixed = plan_fixed(sweep_id, opts, sweep)
    stored = StoredSweep(missing=specs, missing_topologies=fixed)
    if sweep.resume is not None:
        from core.experiment.sweep_resume import read_stored_sweep

        # A sweep stopped before it stored anything is known by its live file or sweep.json.
        started = (sweep_status_dir(db) / f"{sweep_id}.json").exists()
        started |= held_sweep_id(sweep.out / "sweep.json") == sweep_id
        stored = read_stored_sweep(db, specs, fixed, sweep, started)
    check_output_dir(sweep.out, "--out")  # once the flags are known to be good
    live = None
    if log:
        path = sweep_status_dir(db) / f"{sweep_id}.json"
        plan = {"sweep_id": sweep_id, "benchmark": opts.benchmark, "started_at": time.time(),
                "token_weights": list(sweep.token_weights), "seeds": list(sweep.seeds),
                "pass_through": list(rules), "topologies": list(sweep.topologies),
                "eval_episodes": sweep.eval_episodes}  # fmt: skip
        if sweep.resume is not None:
            plan |= _resumed_plan(path, len(stored.trials))
        live = _LiveStatus(path, plan)
    if sweep.resume is not None:
        for line in stored.summary(len(specs), len(fixed)):
            (notice or (lambda line: None))(line)
        stored.discard_stale(db)

    def publish(status: SweepStatus) -> None:
        if live is not None:
            live.write(status)
        if progress is not None:
            progress(status)

    say = notice or (lambda line: None)
    driver = _Driver(
        sweep_id, sweep, db, log, publish, report or (lambda line: None), stored,
        total=len(specs), notice=say,
    )  # fmt: skip
    stop = threading.Event()
    try:
        if stored.missing or stored.missing_topologies:  # a finished sweep resumed needs no Ray
            with shared_local_server(opts, sweep) as server:
                if server is not None:
                    say(
                        f"local model {server.model.name} on {server.url} (pid {server.pid}): "
                        "one server for the whole sweep, one task at a time"
                    )
                with ray_session(sweep.ray_address), interrupt_requests() as stop:
                    driver.run(trial_task or train_trial_task, stop, server)
    except BaseException as exc:
        if live is not None:
            live.write(driver.status, "failed", _one_line(exc))
        raise
    if live is not None:
        live.write(driver.status, "interrupted" if stop.is_set() else "finished")
    result = {
        "engine": "ray",
        "sweep_id": sweep_id,
        "benchmark": opts.benchmark,
        "token_penalty": opts.token_penalty,
        "episodes": train_config.episodes,
        "eval_episodes": sweep.eval_episodes,
        "eval_seed": sweep.eval_seed,
        "methods": list(sweep.methods),
        "pass_through": list(rules),
        "trials": sorted(
            driver.trials,
            key=lambda t: (
                sweep.methods.index(t["method"]),
                rules.index(t["pass_through"]),
                t["token_weight"],
                sorted(t["knob"].items()),
                t["seed"],
            ),
        ),  # fmt: skip
        "fixed": sorted(
            driver.fixed,
            key=lambda f: (sweep.topologies.index(f["policy"]), rules.index(f["pass_through"])),
        ),
        "failed": driver.failed,
        "cancelled": driver.cancelled,
        "interrupted": stop.is_set(),
        "skipped": {"trials": len(stored.trials), "fixed": len(stored.fixed)},
    }
    points = [{"kind": "trial", "policy": t["method"], **t} for t in result["trials"]]
    points += [
        {"kind": "fixed", "token_weight": None, "seed": None, "knob": {}, **f}
        for f in result["fixed"]
    ]
    keys = ("kind", "policy", "pass_through", "token_weight", "knob", "seed", "n", "accuracy")
    keys += ("accuracy_ci", "mean_tokens", "mean_tokens_ci")
    # One front per decision rule: the pass-through changes every point's cost, so the
    # two rules' points are two trade-offs (as two back-ends' would be), not one.
    result["front"] = [
        {k: p[k] for k in keys}
        for rule in rules
        for p in pareto_front([p for p in points if p["pass_through"] == rule])
    ]
    write_file(sweep.out / "sweep.json", (json.dumps(result, indent=2) + "\n").encode(), "--out")
    return result


@contextmanager
def shared_local_server(opts: TeamOptions, sweep: SweepConfig) -> Iterator[LocalServer | None]:
    """The llama.cpp server of a ``--backend local`` sweep on this machine's Ray: started
    here, handed to every task (:meth:`LocalServer.attach_env`), stopped when the sweep
    ends. One server, not one per Ray worker: it decodes one completion at a time with
    every idle core, so on a small machine a second server only competes for the same
    cores (measured: no faster quiet, slower under load; docs/sweep.md) and loads the
    model again, and on a large one every worker's server would take every idle core.
    Tasks go one at a time: two clients of one server only queue there and throw away
    each other's cached prefix. None for other back-ends, and on a cluster
    (``--ray-address``: 127.0.0.1 here is not reachable there), where each worker starts
    its own and keeps it for its later tasks."""
    if opts.backend != "local" or sweep.ray_address is not None:
        yield None
        return
    from core.backends.local_server import serving
    from core.backends.registry import local_model_server

    with serving(local_model_server(opts)) as server:
        yield server


@dataclass
class StoredSweep:
    """What the store holds of a sweep being resumed, and what is left to run (a new sweep:
    nothing stored, everything left)."""

    missing: list[TrialSpec]
    """Trials to run: nothing finished of them is stored."""
    missing_topologies: list[FixedSpec]
    """Fixed topologies to evaluate (each under one decision rule)."""
    trials: list[dict[str, Any]] = field(default_factory=list)
    """The finished trials' rows, read back from the store (as :func:`trial_row` builds them)."""
    fixed: list[dict[str, Any]] = field(default_factory=list)
    """The evaluated fixed topologies' rows (as :func:`fixed_row` builds them)."""
    stale: list[str] = field(default_factory=list)
    """Runs of trials or topologies that did not finish (a driver killed while it logged
    them): deleted before these run again, so that each is stored once."""
    redone: list[str] = field(default_factory=list)
    """What runs again although some of it was stored (labels, for the notice)."""

    def summary(self, trials: int, topologies: int) -> list[str]:
        """What resuming skips and what it runs again, one line each."""
        lines = [
            f"resuming: skipping {len(self.trials)} of {trials} trials and {len(self.fixed)} of "
            f"{topologies} fixed topologies (stored); running {_count(len(self.missing), 'trial')} "
            f"and {_count(len(self.missing_topologies), 'fixed topology', 'fixed topologies')}."
        ]
        return lines + [
            f"{what} did not finish storing: its runs are deleted and it runs again."
            for what in self.redone
        ]

    def discard_stale(self, db: str | None) -> None:
        from core.store.commands import delete_run

        for run_id in self.stale:
            delete_run(run_id, db)


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else many or one + 's'}"


def _resumed_plan(path: Path, skipped: int) -> dict[str, Any]:
    """The live file's record of a resumption: when, how many trials it skipped, and the
    sweep's first start. A sweep whose driver still runs is not resumed a second time."""
    try:
        before = json.loads(path.read_text())
    except (OSError, ValueError):
        before = {}
    if not isinstance(before, dict):
        before = {}
    pid = before.get("pid")
    if before.get("state") == "running" and isinstance(pid, int) and _alive(pid):
        raise UserError(
            f"sweep {path.stem} is still running (pid {pid}); stop it before resuming it."
        )
    first = before.get("started_at")
    return {
        "resumed": True,
        "resumed_at": time.time(),
        "skipped": skipped,
        **({"started_at": first} if isinstance(first, int | float) else {}),
    }


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


TRIAL_FACTS = ("updates", "seconds", "node")
"""What a trial's train run keeps in ``config["trial"]`` for a resumed sweep's rows."""


def trial_run_config(spec: TrialSpec) -> dict[str, Any]:
    """What a trial's train run stores as its config (besides ``config["trial"]``)."""
    config = {**spec.team.run_config(), "train": asdict(spec.train), "sweep": spec.key}
    if spec.method == "qmix":
        config["recipe"] = TEAM_RECIPE
        return config
    from core.baselines.registry import method_config
    from core.experiment.methods import config_dict

    config["train"] = asdict(spec.baseline_train or BaselineTrainConfig())
    config["method"] = {
        "name": spec.method,
        "config": config_dict(method_config(spec.method, spec.knob)),
    }
    return config


def trial_row(
    spec: TrialSpec,
    checkpoint: str,
    held_out: Sequence[Any],
    facts: dict[str, Any],
    train_run: str | None,
    eval_run: str | None,
) -> dict[str, Any]:
    """A trial's row of the result. ``held_out``: its held-out episodes (anything with
    ``score``, ``tokens``, ``reward``); ``facts``: ``train_episodes`` and :data:`TRIAL_FACTS`."""
    return {
        **_trial_id(spec),
        "checkpoint": checkpoint,
        **point_stats(held_out),
        "train_episodes": facts.get("train_episodes"),
        **{k: facts.get(k) for k in TRIAL_FACTS},
        "train_run_id": train_run,
        "eval_run_id": eval_run,
    }


def fixed_row(
    name: str,
    held_out: Sequence[Any],
    team: TeamOptions,
    token_weights: Sequence[float],
    run_id: str | None,
) -> dict[str, Any]:
    """A fixed topology's row: its figures as played (at ``team``'s token weight, under its
    decision rule) and its mean reward re-scored at every swept weight."""
    rescored = []
    for w in token_weights:
        config = replace(team, token_weight=w).runtime_config()
        stats = point_stats(held_out, [reward(r.score, r.tokens, config) for r in held_out])
        rescored.append(
            {"token_weight": w, **{k: stats[k] for k in ("mean_reward", "mean_reward_ci")}}
        )
    return {
        "policy": name,
        "pass_through": team.pass_through,
        **point_stats(held_out),
        "reward_token_weight": team.token_weight,
        "rewards": rescored,
        "eval_run_id": run_id,
    }


def fixed_key(sweep_id: str, name: str, pass_through: str) -> dict[str, Any]:
    """What a fixed topology's eval run under decision rule ``pass_through`` stores as
    ``config["sweep"]``."""
    return {
        "id": sweep_id,
        "token_weight": None,
        "seed": None,
        "method": name,
        "knob": {},
        "pass_through": pass_through,
    }


class _Driver:
    """Submits the trials and the fixed topologies, a task each (the topologies first: they
    are quick, and each is a point of the front), at most ``max_parallel`` trials at once
    (with a shared local server: at most ``max_parallel`` tasks of any kind, default 1),
    and logs each as it finishes: the only writer of the store. Of a resumed sweep, only
    what ``stored`` lacks; its stored rows join the result."""

    def __init__(
        self,
        sweep_id: str,
        sweep: SweepConfig,
        db: str | None,
        log: bool,
        progress: Callable[[SweepStatus], None] | None,
        report: Callable[[str], None],
        stored: StoredSweep,
        total: int,
        notice: Callable[[str], None] = lambda line: None,
    ):
        self.sweep_id, self.sweep, self.db, self.log = sweep_id, sweep, db, log
        self.progress, self.report = progress, report
        self.specs, self.topologies = stored.missing, stored.missing_topologies
        self.trials: list[dict[str, Any]] = list(stored.trials)
        self.fixed: list[dict[str, Any]] = list(stored.fixed)
        self.failed: list[dict[str, Any]] = []
        self.cancelled: list[dict[str, Any]] = []
        self.notice = notice
        self.status = SweepStatus(
            total=total, done=len(stored.trials),
            fixed_total=len(stored.fixed) + len(stored.missing_topologies),
            fixed_done=len(stored.fixed),
        )  # fmt: skip

    def run(self, trial_task: Any, stop: threading.Event, server: LocalServer | None) -> None:
        sweep = self.sweep
        if server is None:
            limit = sweep.max_parallel or max(1, int(ray.cluster_resources().get("CPU", 1)))
            # The topologies' tasks run beside the trials, as one task did before.
            limit_all = limit + len(self.topologies)
        else:
            limit = limit_all = sweep.max_parallel or 1
        options = {"runtime_env": {"env_vars": server.attach_env()}} if server else {}
        queue: deque[TrialSpec | FixedSpec] = deque([*self.topologies, *self.specs])
        running: dict[Any, tuple[TrialSpec | FixedSpec, float]] = {}
        status = self.status
        gone = None
        while (queue or running) and not stop.is_set():
            while queue and len(running) < limit_all:
                if isinstance(queue[0], TrialSpec) and status.running >= limit:
                    break
                part = queue.popleft()
                if isinstance(part, FixedSpec):
                    ref = evaluate_fixed_task.options(**options).remote(
                        part.team, (part.name,), sweep.eval_episodes, sweep.eval_seed
                    )
                else:
                    ref = trial_task.options(**options).remote(part)
                running[ref] = (part, time.monotonic())
                self._count(running)
            if self.progress:
                self.progress(status)
            ready, _ = ray.wait(list(running), num_returns=1, timeout=POLL_S)
            for ref in ready:
                part, started = running.pop(ref)
                self._finish(part, ref, status, time.monotonic() - started)
            self._count(running)
            gone = server.gone() if server is not None else None
            if gone:
                break
        if stop.is_set() or gone:
            for ref, (part, _) in running.items():
                ray.cancel(ref, force=True)
                if isinstance(part, TrialSpec):
                    self.cancelled.append(_trial_id(part))
            self.cancelled += [_trial_id(s) for s in queue if isinstance(s, TrialSpec)]
        status.running = status.fixed_running = 0
        if self.progress:
            self.progress(status)
        if gone:
            from core.backends.local_server import LocalServerGone

            raise LocalServerGone(f"{gone}; the parts that finished are logged.")

    def _count(self, running: dict[Any, tuple[TrialSpec | FixedSpec, float]]) -> None:
        trials = sum(isinstance(part, TrialSpec) for part, _ in running.values())
        self.status.running, self.status.fixed_running = trials, len(running) - trials

    def _finish(
        self, part: TrialSpec | FixedSpec, ref: Any, status: SweepStatus, seconds: float
    ) -> None:
        what = part.label
        try:
            result = ray.get(ref)
        except RayError as exc:
            if isinstance(part, TrialSpec):
                status.failed += 1
                trial = _trial_id(part)
            else:
                status.fixed_done += 1
                trial = {"token_weight": None, "seed": None, "policy": part.name,
                         "pass_through": part.pass_through}  # fmt: skip
            self.failed.append({**trial, "error": _one_line(exc)})
            self.report(f"{what} failed: {_one_line(exc)}")
            return
        if isinstance(part, FixedSpec):
            self._log_fixed(part, result)
            status.fixed_done += 1
            point = self.fixed[-1]
        else:
            point = self._log_trial(part, result)
            self.trials.append(point)
            status.done += 1
        self.notice(
            f"{what}: accuracy {point['accuracy']:.3f}, {point['mean_tokens']:,.0f} tokens an "
            f"episode on {point['n']} held-out tasks ({seconds:,.0f} s)"
        )

    def _log_trial(self, spec: TrialSpec, result: TrialResult) -> dict[str, Any]:
        from core.store.writer import RunLogger

        name = checkpoint_name(
            spec.token_weight, spec.seed, spec.method, spec.knob, spec.pass_through
        )
        path = (self.sweep.out / name).absolute()
        write_file(path, result.checkpoint, "--out")
        held_out = [EpisodeRecord.from_dict(d) for d in result.evaluation]
        facts = {"updates": result.updates, "seconds": result.seconds, "node": result.node}
        train_run = eval_run = None
        if self.log:
            with RunLogger(
                self.db,
                "train",
                {**trial_run_config(spec), "trial": facts},
                backend=spec.team.backend,
                model=spec.team.model_name(),
                policy=spec.method,
                benchmark=spec.team.benchmark,
                seed=spec.seed,
            ) as logger:
                for blob in result.episodes:
                    logger.log_episodes(unpack_episodes(blob))
                logger.log_metrics(result.metrics)
                logger.set_checkpoint(path, logger.next_episode - 1)
                train_run = logger.run_id
            eval_run = log_run(
                self.db,
                "eval",
                replace(spec.team, seed=spec.eval_seed),
                spec.method,
                spec.eval_seed,
                held_out,
                {
                    "sweep": spec.key,
                    "checkpoint": str(path),
                    "policies": {spec.method: self._info(spec, path)},
                },
            )
        facts["train_episodes"] = result.train_episodes
        return trial_row(spec, str(path), held_out, facts, train_run, eval_run)

    @staticmethod
    def _info(spec: TrialSpec, path: Path) -> dict[str, Any]:
        """The trial's :class:`~core.experiment.policies.PolicyInfo`, as its eval run stores it."""
        return PolicyInfo(
            spec.method, "learned", spec.method, spec.token_weight, spec.knob, str(path)
        ).as_dict()

    def _log_fixed(self, spec: FixedSpec, played: dict[str, list[dict[str, Any]]]) -> None:
        records = [EpisodeRecord.from_dict(d) for d in played[spec.name]]
        run_id = None
        if self.log:
            run_id = log_run(
                self.db,
                "eval",
                replace(spec.team, seed=self.sweep.eval_seed),
                spec.name,
                self.sweep.eval_seed,
                records,
                {"sweep": spec.key},
            )
        self.fixed.append(
            fixed_row(spec.name, records, spec.team, self.sweep.token_weights, run_id)
        )
