"""Is there anything for a graph designed *per query* to gain? Every graph a method of
docs/baselines.md can play on the team — each of the 543 directed acyclic graphs on four
agents (a cyclic graph plays as one of them once the runtime breaks its cycles), played
as G-Designer plays it: the same spatial edges in every round, each agent's action from
what it reads — on two seeded streams of the same benchmark.

On the *selection* stream the best single graph is chosen, and the best graph of every
subset (domain, difficulty, domain × difficulty); on the *evaluation* stream both choices
are played and their rewards compared, paired by episode (95 % bootstrap interval over the
evaluation episodes). A per-subset choice that does not beat the single graph there means
a policy that knew the subset exactly — and G-Designer only sees the task's features —
has nothing to gain from designing a graph per query: collapsing to one graph is then the
right answer. The same comparison in hindsight on the evaluation stream alone (the best
single graph there against the best graph of every subset there) is printed as an
optimistic bound (it selects and judges on the same dice).

The difficulty is hidden from every policy (docs/simulator.md); the domain is in the task
features. So beside the true subsets the choice is also made per *predicted* difficulty —
a ridge regression of the difficulty on the task features every policy observes (the
embedding, text statistics, domain), fitted on the selection stream — the per-difficulty
design a policy reading those features could reach; how well they predict the difficulty
on the evaluation stream is printed (R², share predicted exactly).

``--shortlist K`` plays every graph on only the first ``--pilot`` episodes of the selection
stream and keeps the union of the ``K`` best overall and in every subset (a graph best for
one subset stays in); the comparison then runs on the shortlist. Playing all 543 graphs on
both streams costs ~0.75 ms an episode each, about 7 CPU-minutes at 500 episodes.

    agentqmix bench graph-headroom --episodes 500 --select-seed 300 --seed 5000 \
        [--shortlist 10 --pilot 60] [--embedding minilm] --json
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from benchmarks.common import Parser, float_in, int_in, run_main, user_errors
from core.baselines.plans import EpisodeGraph
from core.tasks.base import DOMAINS
from core.team.embedding import make_embedder, text_stats
from core.team.env import TeamEnv
from core.team.options import TeamOptions

SPLITS = ("domain", "difficulty", "domain×difficulty", "predicted difficulty")
RIDGE = 1.0
"""L2 weight of the difficulty read-out (features are standardised first)."""


def acyclic_graphs(n: int) -> list[np.ndarray]:
    """Every directed acyclic graph on ``n`` labelled nodes as an ``(n, n)`` bool matrix,
    ``[src, dst]`` (543 for n = 4), the empty graph first."""
    pairs = [(i, j) for i in range(n) for j in range(n) if i != j]
    out = []
    for bits in itertools.product((False, True), repeat=len(pairs)):
        adj = np.zeros((n, n), dtype=bool)
        for (i, j), on in zip(pairs, bits, strict=True):
            adj[i, j] = on
        if _acyclic(adj):
            out.append(adj)
    return out


def _acyclic(adj: np.ndarray) -> bool:
    """Kahn's rule: repeatedly remove nodes with no in-edge."""
    left = adj.copy()
    alive = np.ones(len(adj), dtype=bool)
    while alive.any():
        sources = alive & ~left[alive].any(axis=0)
        if not sources.any():
            return False
        alive &= ~sources
        left[sources] = False
    return True


class FixedGraph:
    """One spatial graph, the same in every round of every episode (G-Designer's plan)."""

    def __init__(self, adj: np.ndarray, rounds: int):
        self.graph = EpisodeGraph.repeated(adj, rounds)
        self.name = name_of(adj)

    def begin(self, n_agents: int, seed: int) -> Any:
        return None

    def plan(self, obs: dict, round_index: int, memory: Any) -> tuple:
        return self.graph.plan(round_index), memory


def name_of(adj: np.ndarray) -> str:
    """``0>1,1>2`` (``none`` for the empty graph)."""
    src, dst = np.nonzero(adj)
    return ",".join(f"{s}>{d}" for s, d in zip(src, dst, strict=True)) or "none"


def play(opts: TeamOptions, graphs: list[np.ndarray], episodes: int) -> dict[str, np.ndarray]:
    """Every graph on episodes ``0..episodes-1`` of ``opts``'s evaluation stream:
    ``reward, tokens (G, E)``, each episode's ``domain, difficulty (E,)`` and the task
    ``features (E, F)`` every policy observes."""
    env = TeamEnv(opts, "eval")
    try:
        reward = np.zeros((len(graphs), episodes))
        tokens = np.zeros((len(graphs), episodes))
        records = []
        for g, adj in enumerate(graphs):
            records = env.run(FixedGraph(adj, opts.rounds), range(episodes), width=64)
            reward[g] = [r.reward for r in records]
            tokens[g] = [r.tokens for r in records]
    finally:
        env.close()
    return {
        "reward": reward,
        "tokens": tokens,
        "domain": np.array([r.domain for r in records]),
        "difficulty": np.array([r.difficulty for r in records]),
        "features": task_features(opts, records),
    }


def task_features(opts: TeamOptions, records: list) -> np.ndarray:
    """``(E, F)``: the embedding, text statistics and domain of each episode's task — the
    task part of every agent's observation (:mod:`core.team.observations`)."""
    embed = make_embedder(opts.embedding, opts.embedding_dim)
    rows = []
    for r in records:
        domain = np.zeros(len(DOMAINS), dtype=np.float32)
        domain[DOMAINS.index(r.domain)] = 1.0
        rows.append(np.concatenate([embed(r.question), text_stats(r.question), domain]))
    return np.stack(rows)


def fit_difficulty(select: dict[str, np.ndarray], judge: dict[str, np.ndarray]) -> dict:
    """A ridge read-out of the difficulty from the task features, fitted on ``select``;
    writes ``predicted difficulty`` (1..5) into both runs and returns its fit on ``judge``."""
    x = select["features"]
    mean, std = x.mean(axis=0), x.std(axis=0) + 1e-6

    def design(run: dict[str, np.ndarray]) -> np.ndarray:
        z = (run["features"] - mean) / std
        return np.hstack([z, np.ones((len(z), 1))])

    a = design(select)
    y = select["difficulty"].astype(float)
    w = np.linalg.solve(a.T @ a + RIDGE * np.eye(a.shape[1]), a.T @ y)
    for run in (select, judge):
        run["predicted difficulty"] = np.clip(np.rint(design(run) @ w), 1, 5).astype(int)
    truth = judge["difficulty"].astype(float)
    residual = truth - design(judge) @ w
    r2 = 1 - residual.var() / truth.var() if truth.var() > 0 else float("nan")
    return {
        "r2": round(float(r2), 4),
        "exact": round(float((judge["predicted difficulty"] == truth).mean()), 4),
    }


def _keys(run: dict[str, np.ndarray], split: str) -> np.ndarray:
    if split == "domain×difficulty":
        return np.char.add(
            np.char.add(run["domain"].astype(str), "/"), run["difficulty"].astype(str)
        )
    return run[split].astype(str)


def shortlist(pilot: dict[str, np.ndarray], keep: int) -> list[int]:
    """Indices of the ``keep`` best graphs on ``pilot`` overall and in every subset of
    every split but the predicted one, sorted."""
    chosen = set(np.argsort(-pilot["reward"].mean(axis=1))[:keep].tolist())
    for split in SPLITS[:-1]:
        keys = _keys(pilot, split)
        for k in np.unique(keys):
            means = pilot["reward"][:, keys == k].mean(axis=1)
            chosen |= set(np.argsort(-means)[:keep].tolist())
    return sorted(int(g) for g in chosen)


def per_subset_choice(select: dict[str, np.ndarray], split: str, fallback: int) -> dict[str, int]:
    """The best graph of every subset of ``split`` on the selection stream (a subset it
    never saw plays ``fallback``, the best single graph)."""
    keys = _keys(select, split)
    return {k: int(select["reward"][:, keys == k].mean(axis=1).argmax()) for k in np.unique(keys)}


def _interval(diff: np.ndarray, rng: np.random.Generator, resamples: int) -> list[float]:
    means = [diff[rng.integers(0, len(diff), len(diff))].mean() for _ in range(resamples)]
    return [round(float(np.percentile(means, 2.5)), 4), round(float(np.percentile(means, 97.5)), 4)]


def headroom(
    select: dict[str, np.ndarray],
    judge: dict[str, np.ndarray],
    graphs: list[np.ndarray],
    resamples: int,
    seed: int = 0,
) -> dict[str, Any]:
    """The best single graph against the best graph per subset, chosen on ``select`` and
    played on ``judge`` (paired by episode); and in hindsight on ``judge`` alone (both
    chosen there: the best single graph against the best per subset, an optimistic bound
    on what designing per subset is worth)."""
    rng = np.random.default_rng(seed)
    fit = fit_difficulty(select, judge)
    single = int(select["reward"].mean(axis=1).argmax())
    best = int(judge["reward"].mean(axis=1).argmax())
    cols = np.arange(judge["reward"].shape[1])
    base, best_row = judge["reward"][single], judge["reward"][best]
    out: dict[str, Any] = {
        "graphs": len(graphs),
        "difficulty_from_features": fit,
        "single": {
            "graph": name_of(graphs[single]),
            "reward": round(float(base.mean()), 4),
            "tokens": round(float(judge["tokens"][single].mean()), 1),
        },
        "hindsight_single": {
            "graph": name_of(graphs[best]),
            "reward": round(float(best_row.mean()), 4),
            "tokens": round(float(judge["tokens"][best].mean()), 1),
        },
    }
    for split in SPLITS:
        choice = per_subset_choice(select, split, single)
        keys = _keys(judge, split)
        picks = np.array([choice.get(k, single) for k in keys])
        played = judge["reward"][picks, cols]
        hindsight = np.zeros_like(base)
        for k in np.unique(keys):
            mask = keys == k
            hindsight[mask] = judge["reward"][judge["reward"][:, mask].mean(axis=1).argmax(), mask]
        out[split] = {
            "reward": round(float(played.mean()), 4),
            "tokens": round(float(judge["tokens"][picks, cols].mean()), 1),
            "gain_over_single": round(float((played - base).mean()), 4),
            "gain_ci95": _interval(played - base, rng, resamples),
            "hindsight_reward": round(float(hindsight.mean()), 4),
            "hindsight_gain": round(float((hindsight - best_row).mean()), 4),
            "distinct_graphs": len(set(choice.values())),
            "choice": {k: name_of(graphs[g]) for k, g in sorted(choice.items())},
        }
    best_each = judge["reward"].max(axis=0)
    out["oracle_per_episode_gain"] = round(float((best_each - best_row).mean()), 4)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--benchmark", default="mixed")
    parser.add_argument("--episodes", type=int_in(1, 10**5), default=500)
    parser.add_argument("--select-seed", type=int_in(0, 2**63 - 1), default=300)
    parser.add_argument("--seed", type=int_in(0, 2**63 - 1), default=5000)
    parser.add_argument("--token-weight", type=float_in(0.0, 1e6), default=0.1)
    parser.add_argument("--bootstrap", type=int_in(10, 10**5), default=1000)
    parser.add_argument("--embedding", default="hash", help="task embedding: hash or minilm")
    parser.add_argument("--shortlist", type=int_in(0, 543), default=0, help="0: every graph")
    parser.add_argument("--pilot", type=int_in(1, 10**4), default=60)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.select_seed == args.seed:
        parser.error("--select-seed and --seed must differ: the choice is judged on fresh tasks")
    base = {
        "benchmark": args.benchmark,
        "token_weight": args.token_weight,
        "actions": "graph",
        "embedding": args.embedding,
    }
    with user_errors():
        chooser = TeamOptions(seed=args.select_seed, **base)
        judge = TeamOptions(seed=args.seed, **base)
        chooser.validate()
        judge.validate()
        graphs = acyclic_graphs(len(judge.roles))
        played = len(graphs)
        if args.shortlist:
            keep = shortlist(play(chooser, graphs, args.pilot), args.shortlist)
            graphs = [graphs[g] for g in keep]
        result = headroom(
            play(chooser, graphs, args.episodes),
            play(judge, graphs, args.episodes),
            graphs,
            args.bootstrap,
        )
    pilot = {"pilot_episodes": args.pilot, "graphs_piloted": played} if args.shortlist else {}
    run_main({"episodes": args.episodes, **pilot, **result}, args.json)


if __name__ == "__main__":
    main()
