"""Lab benchmark: page render times and round-slider latency on a 100,000-episode store.

    agentqmix bench lab [--episodes 100000] [--db PATH] --json

The goal: with 100,000 episodes every page renders in under 2 s and moving the
Replay round slider updates every panel in under 300 ms. Pages run headless under
``streamlit.testing.v1.AppTest`` (the whole script, widgets serialised, no browser), so the
figures are the server's share of a page view. A *first* render starts with every
Streamlit cache empty (as after the 3 s query TTL ran out); a *warm* rerender reruns the
same session at once. Episodes are synthetic (``core.store.synthetic``), written in bulk.
"""

from __future__ import annotations

import contextlib
import io
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import streamlit as st
from streamlit.logger import set_log_level
from streamlit.runtime.scriptrunner.script_cache import ScriptCache
from streamlit.testing.v1 import AppTest, app_test

from benchmarks.common import Parser, int_in, run_main, user_errors
from benchmarks.store import fill
from core.store.db import read_session
from core.store.synthetic import synthetic_episode
from core.store.writer import LoggerConfig, RunLogger

APP = Path(__file__).resolve().parents[1] / "app.py"

PAGES = (
    "views/home.py",
    "views/replay.py",
    "views/train.py",
    "views/failure_lab.py",
    "views/compare.py",
    "views/ctde.py",
    "views/runs.py",
)
"""Every page of the lab, as ``AppTest.switch_page`` names them."""

PAGE_BUDGET_S = 2.0
SLIDER_BUDGET_MS = 300.0


@dataclass
class LabBenchConfig:
    """What store the lab benchmark builds and how often it measures."""

    episodes: int = 100_000
    """Episodes in the store (all runs together)."""
    n_agents: int = 4
    """Agents per episode (each logs one agent-step row per round, plus the decision agent)."""
    n_rounds: int = 3
    """Rounds per episode: the Replay slider's range."""
    train_share: float = 0.4
    """Fraction of the episodes in one training run (with one metrics row per episode)."""
    eval_policies: tuple[str, ...] = ("qmix", "full", "star", "single")
    """Evaluation runs of 10 % of the episodes each; the rest is one ``chain`` run (bulk fill)."""
    page_repeats: int = 3
    """First renders (and warm rerenders) per page."""
    slider_moves: int = 30
    """Round-slider moves timed on the Replay page."""

    def validate(self) -> None:
        if self.episodes < 100:
            raise ValueError(f"episodes must be >= 100, got {self.episodes}")
        if self.n_agents < 1 or self.n_rounds < 2:
            raise ValueError(
                f"need n_agents >= 1 and n_rounds >= 2 (a slider), got "
                f"{self.n_agents} and {self.n_rounds}"
            )
        if not 0 < self.train_share < 1 - 0.1 * len(self.eval_policies):
            raise ValueError(
                f"train_share must leave room for the eval runs, got {self.train_share}"
            )
        if self.page_repeats < 1 or self.slider_moves < 1:
            raise ValueError(
                f"page_repeats and slider_moves must be >= 1, got "
                f"{self.page_repeats} and {self.slider_moves}"
            )


# ------------------------------------------------------------------ the store


def _log_run(
    db: Path, kind: str, policy: str, episodes: int, cfg: LabBenchConfig, seed0: int
) -> str:
    """One run of ``episodes`` synthetic episodes written in batches (metrics if training)."""
    pool = [
        synthetic_episode(seed0 + i, cfg.n_agents, cfg.n_rounds, policy=policy) for i in range(500)
    ]
    roles = list(pool[0].roles)
    config = {"team": {"benchmark": "mixed", "roles": roles, "rounds": cfg.n_rounds}}
    settings = LoggerConfig(ingest_every_s=0.0)
    with RunLogger(
        db, kind, config, policy=policy, benchmark="mixed", seed=seed0, settings=settings
    ) as log:
        for start in range(0, episodes, 2000):
            n = min(2000, episodes - start)
            log.log_episodes(pool[(start + k) % len(pool)] for k in range(n))
            if kind == "train":
                log.log_metrics(
                    {
                        "step": k,
                        "episode": k,
                        "loss": 1.0 / (1 + k / 100),
                        "td_error": 0.5 / (1 + k / 100),
                        "q_tot_mean": k / episodes,
                        "epsilon": max(0.05, 1.0 - k / (0.5 * episodes)),
                    }
                    for k in range(start, start + n)
                )
        if kind == "train":
            # A checkpoint that exists, so the Failure lab offers the learned policy.
            ckpt = db.with_name(db.name + ".ckpt.pt")
            ckpt.write_bytes(b"")
            log.set_checkpoint(ckpt, episodes - 1)
        return log.run_id


def build_store(db: Path, cfg: LabBenchConfig) -> dict[str, Any]:
    """A training run with metrics, one eval run per policy, and a bulk-filled chain run."""
    cfg.validate()
    t0 = time.perf_counter()
    n_train = int(cfg.train_share * cfg.episodes)
    _log_run(db, "train", "qmix", n_train, cfg, 0)
    n_eval = cfg.episodes // 10
    for p, policy in enumerate(cfg.eval_policies):
        _log_run(db, "eval", policy, n_eval, cfg, 10_000 * (p + 1))
    per = cfg.n_agents * cfg.n_rounds + 1
    fill(db, cfg.episodes * per, cfg.n_agents, cfg.n_rounds)
    with read_session(db) as cur:
        n_episodes, n_runs = cur.execute(
            "SELECT count(*), count(DISTINCT run_id) FROM episodes"
        ).fetchone()
        n_steps = cur.execute("SELECT count(*) FROM agent_steps").fetchone()[0]
        n_metrics = cur.execute("SELECT count(*) FROM train_metrics").fetchone()[0]
    return {
        "episodes": n_episodes,
        "runs": n_runs,
        "agent_step_rows": n_steps,
        "train_metric_rows": n_metrics,
        "build_seconds": round(time.perf_counter() - t0, 1),
        "db_mb": round(db.stat().st_size / 2**20, 1),
    }


# ------------------------------------------------------------------ timing


@contextmanager
def _lab_env(db: Path) -> Iterator[None]:
    """The lab pointed at ``db`` (demo off), with one script cache like a server's.

    A Streamlit server compiles each script once (its Runtime keeps one ScriptCache);
    AppTest makes a new ScriptCache per run, so every run would re-parse and compile
    app.py and the page (~50-100 ms here), which no real page view pays.
    """
    saved = {k: os.environ.get(k) for k in ("AGENTQMIX_DB", "AGENTQMIX_LAB_DEMO")}
    os.environ["AGENTQMIX_DB"] = str(db)
    os.environ["AGENTQMIX_LAB_DEMO"] = "0"
    shared = ScriptCache()
    make_cache = app_test.ScriptCache
    app_test.ScriptCache = lambda: shared
    try:
        yield
    finally:
        app_test.ScriptCache = make_cache
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _clear_caches() -> None:
    st.cache_data.clear()
    st.cache_resource.clear()


def _run(at: AppTest) -> float:
    """Seconds one ``at.run()`` takes; raises if the page raised."""
    t0 = time.perf_counter()
    at.run()
    dt = time.perf_counter() - t0
    if at.exception:
        raise RuntimeError(f"the page raised: {[e.message for e in at.exception]}")
    return dt


def _open(page: str) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=120)
    at.switch_page(page)
    return at


def _stats(values: list[float], scale: float = 1.0, digits: int = 3) -> dict[str, float]:
    return {
        "median": round(statistics.median(values) * scale, digits),
        "max": round(max(values) * scale, digits),
    }


def _wait_for_prebuild() -> None:
    # Imported here, after main() quietened Streamlit: importing the lab's cached data layer
    # outside a server logs a "No runtime found" warning per cached function.
    from lab import data

    for thread in threading.enumerate():
        if thread.name == data.PREBUILD_THREAD:
            thread.join()


def time_pages(cfg: LabBenchConfig) -> dict[str, dict[str, Any]]:
    """Per page: first render (empty caches) and warm rerender, in seconds."""
    out = {}
    for page in PAGES:
        first, warm = [], []
        for _ in range(cfg.page_repeats):
            # The Replay page's background figure builds must not overlap the next timing.
            _wait_for_prebuild()
            _clear_caches()
            at = _open(page)
            first.append(_run(at))
            _wait_for_prebuild()
            warm.append(_run(at))
        out[page] = {"first_s": _stats(first), "warm_s": _stats(warm)}
    return out


def time_slider(cfg: LabBenchConfig) -> dict[str, Any]:
    """Milliseconds from setting the Replay round slider to every panel rendered.

    The first move comes at once after the episode opened, while the page still builds
    the other rounds' figures in the background; the timed moves after that come once
    the build is done (a reader looks at a round for longer than that).
    """
    _wait_for_prebuild()
    _clear_caches()
    at = _open("views/replay.py")
    _run(at)
    at.slider(key="replay_round").set_value(2)  # rounds count from 1 on the page
    immediate = _run(at)
    _wait_for_prebuild()
    n = cfg.n_rounds
    path = list(range(1, n + 1)) + list(range(n - 1, 1, -1))  # 1, 2, …, n, …, 2
    times = []
    for k in range(cfg.slider_moves):
        r = path[(k + 2) % len(path)]
        at.slider(key="replay_round").set_value(r)
        times.append(_run(at))
        if not any(f"Round {r} of {n}" in m.value for m in at.markdown):
            raise RuntimeError(f"the Replay page did not move to round {r}")
    return {
        "moves": len(times),
        "ms": _stats(times, 1000, 1),
        "first_move_right_after_opening_ms": round(immediate * 1000, 1),
    }


FAILURE_LAB_BUDGET_S = {"side_by_side": 2.0, "robustness": 5.0}
"""Goals: a side-by-side fork (policy loaded) and a 200-episode robustness measurement."""


def time_failure_lab(
    workdir: str | os.PathLike[str] | None = None, repeats: int = 5, robust_episodes: int = 200
) -> dict[str, Any]:
    """The Failure lab's in-process work, timed with the functions its page calls
    (:mod:`lab.forks`) on the embedded default (``sim``, ``mixed``, four agents).

    A small store gets a learned checkpoint (``agentqmix train``, 16 episodes) and a logged
    evaluation of ``full``; then: loading the learned policy (what the page caches per
    checkpoint), a side-by-side fork of a logged episode (both episodes played and logged
    as one run) for the learned policy and for ``full``, ``repeats`` times each, and one
    robustness measurement (the learned policy and the page's default fixed topologies,
    0..2 crashed agents, ``robust_episodes`` episodes per point, logged).
    """
    from core.cli import main as cli_main
    from core.experiment.evaluate import evaluate_team
    from core.store.queries import get_run, list_runs
    from core.team.failures import FailureSpec
    from core.team.options import TeamOptions
    from lab import forks

    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        db, ckpt = str(Path(tmp) / "fail.duckdb"), str(Path(tmp) / "fail.pt")
        t0 = time.perf_counter()
        argv = ["train", "--benchmark", "mixed", "--episodes", "16", "--hidden", "64",
                "--eval-episodes", "0", "--out", ckpt, "--db", db, "--json"]  # fmt: skip
        with contextlib.redirect_stdout(io.StringIO()):
            cli_main(argv)
        opts = TeamOptions()
        evaluate_team(opts, forks.load_policy(forks.PolicyChoice("topology", "full"), opts),
                             24, 0, db=db)  # fmt: skip
        setup = time.perf_counter() - t0
        base = get_run(db, list_runs(db, kind="eval").iloc[0]["id"])
        team = base.config["team"]
        fopts = forks.fork_options(team)
        t = time.perf_counter()
        learned = forks.load_policy(forks.PolicyChoice("checkpoint", ckpt), fopts)
        load_s = time.perf_counter() - t
        fixed = forks.load_policy(forks.PolicyChoice("topology", "full"), fopts)
        sides: dict[str, list[float]] = {"learned": [], "full": []}
        for k in range(repeats):
            for name, policy in (("learned", learned), ("full", fixed)):
                fails = [FailureSpec(1 + k % 3, ("crash", "byzantine", "garbled")[k % 3], 1)]
                t = time.perf_counter()
                forks.fork_episode(db, team, base.id, k, base.seed, policy, name, fails)
                sides[name].append(time.perf_counter() - t)
        policies = [learned] + [
            forks.load_policy(forks.PolicyChoice("topology", n), fopts)
            for n in ("single", "chain", "full")
        ]
        t = time.perf_counter()
        rows = forks.measure_robustness(db, fopts, policies, robust_episodes, 0, 2)
        robust_s = time.perf_counter() - t
        n_robust = sum(r["episodes"] for r in rows)
    worst_side = max(max(v) for v in sides.values())
    return {
        "setup_s": round(setup, 1),
        "load_learned_policy_s": round(load_s, 3),
        "side_by_side_s": {name: _stats(v) for name, v in sides.items()},
        "robustness": {
            "policies": ["qmix", "single", "chain", "full"],
            "episodes_per_point": robust_episodes,
            "max_failed": 2,
            "episodes": n_robust,
            "s": round(robust_s, 3),
        },
        "goals_s": FAILURE_LAB_BUDGET_S,
        "meets_goals": worst_side < FAILURE_LAB_BUDGET_S["side_by_side"]
        and robust_s < FAILURE_LAB_BUDGET_S["robustness"],
    }


def run_lab_bench(
    episodes: int = 100_000,
    *,
    db: str | os.PathLike[str] | None = None,
    workdir: str | os.PathLike[str] | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Build the store (or reuse ``db`` if it exists), time every page and the slider.

    ``options`` are further :class:`LabBenchConfig` fields. With ``db`` the store is kept
    (and reused on the next call); without, it lives in a temporary folder in ``workdir``.
    """
    cfg = LabBenchConfig(episodes=episodes, **options)
    cfg.validate()
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        path = Path(db).absolute() if db is not None else Path(tmp) / "lab.duckdb"
        if path.exists():
            with read_session(path, create=False):  # UserError unless it is an episode store
                store = {"reused": True}
        else:
            store = build_store(path, cfg)
        load_before = os.getloadavg()
        with _lab_env(path):
            t0 = time.perf_counter()
            for page in PAGES:  # imports (torch, plotly) and the OS file cache, not timed
                _run(_open(page))
            warmup = time.perf_counter() - t0
            pages = time_pages(cfg)
            slider = time_slider(cfg)
        _clear_caches()
    worst_page = max(p["first_s"]["max"] for p in pages.values())
    return {
        "store": store,
        "pages": pages,
        "replay_slider": slider,
        "warmup_s": round(warmup, 1),
        "loadavg_1_5_15": {
            "before": [round(x, 2) for x in load_before],
            "after": [round(x, 2) for x in os.getloadavg()],
        },
        "goals": {"page_s": PAGE_BUDGET_S, "slider_ms": SLIDER_BUDGET_MS},
        "meets_goals": worst_page < PAGE_BUDGET_S and slider["ms"]["max"] < SLIDER_BUDGET_MS,
    }


def main(argv: list[str] | None = None) -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int_in(100, 10_000_000), default=100_000)
    parser.add_argument("--db", default=None, help="keep (and reuse) the benchmark store here")
    parser.add_argument(
        "--failure-lab-only", action="store_true",
        help="time only the Failure lab's forks and robustness (a small store of its own)",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    # Clearing Streamlit's caches outside a script run logs harmless "no ScriptRunContext" lines.
    set_log_level("error")
    if args.failure_lab_only:
        run_main({"failure_lab": time_failure_lab()}, args.json)
        return
    with user_errors():  # a bad --db is one sentence before any work
        result = run_lab_bench(args.episodes, db=args.db)
    run_main({**result, "failure_lab": time_failure_lab()}, args.json)


if __name__ == "__main__":
    main()
