"""A fair contest of Agent Q-Mix and the learned-topology methods (docs/baselines.md,
"The contest"): both protocols, the same tuning budget for everyone, several training
seeds, one held-out evaluation stream, intervals that include seed-to-seed variation.

The plan, top to bottom:

1. **Tuning.** For each protocol and method (Agent Q-Mix included), every configuration of
   its grid (:data:`GRIDS`: the same number for every method, the published default first,
   the others one step around it) is trained on the *tuning seed* and played on the
   *tuning stream*; one rule picks the configuration (:func:`select`: highest mean reward,
   ties to fewer tokens).
2. **Final runs.** The chosen configuration is trained on each *training seed* (none of
   them the tuning seed) and played on the *evaluation stream* (never the tuning stream).
3. **Analysis.** Per protocol, per method: means over seeds and episodes; Agent Q-Mix minus
   each method, paired by episode, with 95 % intervals from a hierarchical bootstrap (seeds
   resampled per method, then episodes — shared by all methods — resampled), overall, per
   domain and per difficulty; prompt and completion tokens apart.

Protocols: ``graph`` — the team's action set is ``graph`` (no ``execute_verify``) and the
methods learn graphs only; ``tools`` — all six actions, and each method also learns a verify
bit per agent and round (``tools=true``, our extension).

Each trial (a training run and its evaluation) writes one JSON file under the output
folder when it is done, so the plan resumes where it stopped: a plain resumable driver in
one process (the sweep's Ray machinery is not used; trials run one after another).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from core.errors import UserError
from core.records import EpisodeRecord
from core.team.options import TeamOptions

PROTOCOLS = ("graph", "tools")
"""``graph``: no tool for anyone; ``tools``: every method may verify."""
CONTESTANTS = ("qmix", "gptswarm", "agentprune", "agentdropout", "gdesigner")

GRIDS: dict[str, tuple[dict[str, Any], ...]] = {
    # Agent Q-Mix: dotted TrainConfig paths over the ``society`` recipe.
    "qmix": ({}, {"learner.lr": 1e-3}, {"learner.td_lambda": 0.6}),
    "gptswarm": ({}, {"learning_rate": 0.05}, {"learning_rate": 0.2}),
    "agentprune": ({}, {"prune_ratio": 0.5}, {"learning_rate": 0.05}),
    "agentdropout": ({}, {"edge_dropout": 0.5}, {"learning_rate": 0.05}),
    "gdesigner": ({}, {"anchor": "chain", "anchor_weight": 0.01}, {"sparsity_weight": 0.1}),
}
"""Each contestant's tuning grid: the published default (released code's, where paper and
code disagree) first, then one step around it; the same number of configurations each."""
assert len({len(g) for g in GRIDS.values()}) == 1 and tuple(GRIDS) == CONTESTANTS

ABLATIONS: tuple[tuple[str, dict[str, Any]] | None, ...] = (
    ("agentprune", {"rank_weight": 0.02}),
    ("agentprune", {"prune_steps": 1, "prune_ratio": 0.5}),
    ("agentdropout", {"closeness_weight": 0.0}),
    None,  # was G-Designer's chain anchor: a no-op when tuning picks it (keeps the indices)
    ("gdesigner", {"anchor": "full", "anchor_weight": 0.0}),
    ("gdesigner", {"decoder": "bilinear"}),
    ("agentdropout", {"skip_sampling": False}),
    ("gdesigner", {"minmax_diagonal": False}),
)
"""The other reading where paper and released code differ (docs/baselines.md): each is the
tuned configuration with these changes, trained on the final seeds and played on the
evaluation stream, in the ``graph`` protocol only (CPU). AgentPrune's and AgentDropout's
rows are the papers' readings; G-Designer's is the released one (tuning picked the paper's
chain anchor in the recorded contest); its second row is the earlier absolute-logit
decoder, which collapsed to one graph for every query. AgentDropout's second row is step 1
as the paper states it (the plain policy gradient, no skip sampling); G-Designer's third is
the min-max over the off-diagonal pair scores only (the default until issue 33's fourth
pass; the released one spans the diagonal too)."""

FIXED_REFERENCES = ("single", "full", "random")
"""Fixed topologies played on the evaluation stream beside the contestants (no training)."""


@dataclass
class ContestConfig:
    """What one contest runs; every field is stored with its results."""

    benchmark: str = "mixed"
    episodes: int = 8_000
    """Training episodes of every run (every contestant the same)."""
    tune_seed: int = 100
    """The one training seed tuning uses."""
    tune_stream: int = 300
    """The held-out stream tuning judges on."""
    tune_episodes: int = 300
    seeds: tuple[int, ...] = (11, 12, 13)
    """Training seeds of the final runs."""
    eval_stream: int = 5000
    """The held-out stream of the final evaluation (never seen by tuning)."""
    eval_episodes: int = 1000
    protocols: tuple[str, ...] = PROTOCOLS
    methods: tuple[str, ...] = CONTESTANTS
    grid_size: int = 3
    """How many configurations of each grid are tried (the first ``grid_size``)."""
    n_envs: int = 32
    bootstrap: int = 2000
    """Hierarchical bootstrap resamples."""
    ablations: bool = False
    """Also run :data:`ABLATIONS` (may be switched on for a finished contest: it adds trials
    and changes none)."""

    def validate(self) -> None:
        for name in ("episodes", "tune_episodes", "eval_episodes", "grid_size", "n_envs"):
            if getattr(self, name) < 1:
                raise UserError(f"--{name.replace('_', '-')} must be >= 1.")
        if self.grid_size > len(GRIDS["qmix"]):
            raise UserError(f"--grid-size must be at most {len(GRIDS['qmix'])}.")
        if self.tune_stream == self.eval_stream:
            raise UserError("the tuning stream and the evaluation stream must differ.")
        if self.tune_seed in self.seeds:
            raise UserError(f"training seed {self.tune_seed} is the tuning seed; choose others.")
        if len(self.seeds) < 1 or len(set(self.seeds)) != len(self.seeds):
            raise UserError("--seeds needs distinct training seeds.")
        for p in self.protocols:
            if p not in PROTOCOLS:
                raise UserError(f"protocol {p!r} is not one of {', '.join(PROTOCOLS)}.")
        for m in self.methods:
            if m not in CONTESTANTS:
                raise UserError(f"method {m!r} is not one of {', '.join(CONTESTANTS)}.")


@dataclass
class Trial:
    """One training run and its evaluation."""

    phase: str
    """``tune`` or ``final``."""
    protocol: str
    method: str
    config: dict[str, Any]
    seed: int
    stream: int
    episodes: int
    index: int = 0
    """The configuration's place in its grid."""

    @property
    def key(self) -> str:
        return f"{self.phase}-{self.protocol}-{self.method}-c{self.index}-s{self.seed}"


@dataclass
class Outcome:
    """A trial's per-episode results on its stream (episode ``k`` is the same task for every
    policy played on that stream)."""

    trial: dict[str, Any]
    episodes: dict[str, list[Any]] = field(default_factory=dict)
    """Columns: score, reward, tokens, prompt, completion, domain, difficulty."""
    graph: dict[str, float] = field(default_factory=dict)
    """Mean actions per round: verifies, and how many agents read someone."""

    def mean(self, column: str) -> float:
        return float(np.mean(self.episodes[column]))


# --------------------------------------------------------------------------- running


def team(config: ContestConfig, protocol: str, stream: int) -> TeamOptions:
    """The team of a protocol on a stream (the seed of ``TeamOptions`` is the stream)."""
    return TeamOptions(
        benchmark=config.benchmark, seed=stream, actions="graph" if protocol == "graph" else "all"
    )


@dataclass
class Played:
    """A policy's episodes on a trial's stream, and what the store needs to log them."""

    records: list[EpisodeRecord]
    policy: Any
    """The policy that played them (its ``name`` and ``info`` describe it in the store)."""
    opts: TeamOptions
    """The team they were played with."""


def train_and_play(trial: Trial, config: ContestConfig, folder: Path) -> Played:
    """Train ``trial``'s contestant on its training seed and play it on its stream."""
    checkpoint = checkpoint_of(trial, folder)
    checkpoint.parent.mkdir(parents=True, exist_ok=True)
    train_opts = team(config, trial.protocol, trial.seed)
    if trial.method == "qmix":
        _train_qmix(train_opts, trial, config, checkpoint)
    else:
        _train_method(train_opts, trial, config, checkpoint)
    return play_trained(trial, config, folder)


def checkpoint_of(trial: Trial, folder: Path) -> Path:
    return folder / "checkpoints" / f"{trial.key}.pt"


def play_trained(trial: Trial, config: ContestConfig, folder: Path) -> Played:
    """Play a trained trial's checkpoint on the trial's stream (deterministic: the same
    episodes as when it was first played)."""
    from core.experiment.evaluate import learned_policy, run_policy

    opts = team(config, trial.protocol, trial.stream)
    policy = learned_policy(checkpoint_of(trial, folder), opts)
    return Played(run_policy(opts, policy, trial.episodes, trial.stream), policy, opts)


def _train_qmix(opts: TeamOptions, trial: Trial, config: ContestConfig, out: Path) -> None:
    from core.experiment.train import train_team
    from core.team.recipes import TEAM_RECIPE, recipe_config

    # The recipe's update budget scaled to the run's episodes (4,000 for 40,000).
    given = {
        "episodes": config.episodes,
        "max_updates": max(1, config.episodes // 10),
        "seed": trial.seed,
        "n_envs": config.n_envs,
        **trial.config,
    }
    train_team(opts, recipe_config(TEAM_RECIPE, given), out, log=False, eval_episodes=0)


def _train_method(opts: TeamOptions, trial: Trial, config: ContestConfig, out: Path) -> None:
    from core.baselines.registry import method_config
    from core.baselines.training import BaselineTrainConfig
    from core.experiment.methods import train_baseline

    values = {**trial.config, "tools": trial.protocol == "tools"}
    train = BaselineTrainConfig(episodes=config.episodes, n_envs=config.n_envs, seed=trial.seed)
    train_baseline(
        opts, trial.method, method_config(trial.method, values), train, out, log=False,
        eval_episodes=0,
    )  # fmt: skip


def fixed_trial(name: str, protocol: str, config: ContestConfig) -> Trial:
    return Trial("final", protocol, name, {}, -1, config.eval_stream, config.eval_episodes)


def play_fixed(trial: Trial, config: ContestConfig) -> Played:
    from core.experiment.evaluate import run_policy
    from core.team.topologies import make_policy

    opts = team(config, trial.protocol, trial.stream)
    policy = make_policy(trial.method)
    return Played(run_policy(opts, policy, trial.episodes, trial.stream), policy, opts)


def outcome_of(trial: Trial, records: Sequence[EpisodeRecord]) -> Outcome:
    """Per-episode columns and the mean plan of ``records``."""
    from core.actions import Action

    cols: dict[str, list[Any]] = {
        k: [] for k in ("score", "reward", "tokens", "prompt", "completion", "domain", "difficulty")
    }
    verifies, reading = [], []
    for r in records:
        cols["score"].append(float(r.score))
        cols["reward"].append(float(r.reward))
        cols["tokens"].append(int(r.tokens))
        cols["prompt"].append(sum(c.prompt_tokens for c in r.calls))
        cols["completion"].append(sum(c.completion_tokens for c in r.calls))
        cols["domain"].append(r.domain)
        cols["difficulty"].append(int(r.difficulty))
        for rnd in r.rounds:
            steps = [s for s in rnd.steps if s.alive and s.fault != "inactive"]
            verifies.append(sum(s.action == int(Action.EXECUTE_VERIFY) for s in steps))
            reading.append(len({d for _, d in rnd.edges}))
    graph = {"verifying_agents": _mean(verifies), "reading_agents": _mean(reading)}
    return Outcome(asdict(trial), cols, graph)


def _mean(values: list[float]) -> float:
    return float(np.mean(values)) if values else 0.0


# --------------------------------------------------------------------------- the plan


def select(outcomes: Sequence[Outcome]) -> int:
    """The one selection rule: the configuration with the highest mean reward on the tuning
    stream; ties (within 1e-9) to fewer mean tokens, then to the earlier in the grid."""
    best = max(
        range(len(outcomes)),
        key=lambda k: (
            round(outcomes[k].mean("reward"), 9),
            -outcomes[k].mean("tokens"),
            -outcomes[k].trial["index"],
        ),
    )
    return int(outcomes[best].trial["index"])


class Contest:
    """Runs a :class:`ContestConfig` into ``folder`` (``trials/KEY.json`` per trial)."""

    def __init__(
        self,
        config: ContestConfig,
        folder: Path,
        runner: Callable[[Trial, ContestConfig, Path], Played] = train_and_play,
        progress: Callable[[str], None] | None = None,
        db: str | Path | None = None,
    ):
        config.validate()
        self.config, self.folder, self.runner = config, folder, runner
        self.progress = progress or (lambda _: None)
        (folder / "trials").mkdir(parents=True, exist_ok=True)
        stored = folder / "contest.json"
        plan = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(config).items()}
        old = json.loads(stored.read_text()) if stored.exists() else None
        if old is not None and {**old, "ablations": None} != {**plan, "ablations": None}:
            raise UserError(
                f"{folder} holds a contest with other settings ({stored}); "
                "choose another --out or the same settings to resume."
            )
        stored.write_text(json.dumps(plan, indent=1))
        self.log = None
        """Where the evaluations go for the lab (None: the folder only)."""
        if db is not None:
            from core.experiment.contest_store import ContestLog

            self.log = ContestLog(db, folder, plan)

    def run(self, trial: Trial, label: str | None = None, tuning: dict | None = None) -> Outcome:
        """The trial's outcome: stored, or run now and stored (resumable). With a ``label``
        (an evaluation the lab shows) it is also logged to the store once, with its
        contestant's ``tuning`` record; a trial stored before is played again from its
        checkpoint for that."""
        path = self.folder / "trials" / f"{trial.key}.json"
        wanted = self.log is not None and label is not None and trial.key not in self.log.logged()
        if path.exists():
            data = json.loads(path.read_text())
            if wanted and checkpoint_of(trial, self.folder).exists():
                self.progress(f"{trial.key} (to the store)")
                self._log(trial, label, play_trained(trial, self.config, self.folder), tuning)
            return Outcome(data["trial"], data["episodes"], data["graph"])
        self.progress(trial.key)
        played = self.runner(trial, self.config, self.folder)
        outcome = outcome_of(trial, played.records)
        tmp = path.with_suffix(".part")
        tmp.write_text(json.dumps(asdict(outcome)))
        tmp.replace(path)
        if wanted:
            self._log(trial, label, played, tuning)
        return outcome

    def reference(self, name: str, protocol: str) -> Outcome:
        """A fixed topology on the evaluation stream (played every time: no training)."""
        trial = fixed_trial(name, protocol, self.config)
        played = play_fixed(trial, self.config)
        if self.log is not None and trial.key not in self.log.logged():
            self._log(trial, f"fixed:{name}", played, None)
        return outcome_of(trial, played.records)

    def _log(self, trial: Trial, label: str, played: Played, tuning: dict | None) -> None:
        assert self.log is not None
        self.log.log(trial, label, played, tuning)

    def tune(self) -> dict[str, dict[str, Any]]:
        """``{protocol: {method: {"chosen", "grid": [...], "tuning": [{reward, ...}]}}}``.
        Reads only the tuning seed and the tuning stream."""
        c = self.config
        choices: dict[str, dict[str, Any]] = {}
        for protocol in c.protocols:
            choices[protocol] = {}
            for method in c.methods:
                grid = GRIDS[method][: c.grid_size]
                outcomes = [
                    self.run(
                        Trial(
                            "tune",
                            protocol,
                            method,
                            values,
                            c.tune_seed,
                            c.tune_stream,
                            c.tune_episodes,
                            index,
                        )
                    )  # fmt: skip
                    for index, values in enumerate(grid)
                ]
                chosen = select(outcomes)
                choices[protocol][method] = {
                    "chosen": chosen,
                    "config": grid[chosen],
                    "grid": list(grid),
                    "tuning": [_means(o) for o in outcomes],
                }
        return choices

    def final(self, choices: dict[str, dict[str, Any]]) -> dict[str, dict[str, list[Outcome]]]:
        """Each protocol's chosen configurations on every training seed, on the evaluation
        stream; the fixed references under ``"fixed:NAME"``."""
        c = self.config
        out: dict[str, dict[str, list[Outcome]]] = {}
        for protocol in c.protocols:
            out[protocol] = {}
            for method in c.methods:
                pick = choices[protocol][method]
                out[protocol][method] = [
                    self.run(
                        Trial(
                            "final",
                            protocol,
                            method,
                            pick["config"],
                            seed,
                            c.eval_stream,
                            c.eval_episodes,
                            pick["chosen"],
                        ),
                        method,
                        pick,
                    )  # fmt: skip
                    for seed in c.seeds
                ]
            for name in FIXED_REFERENCES:
                out[protocol][f"fixed:{name}"] = [self.reference(name, protocol)]
            if c.ablations and protocol == "graph":
                out[protocol] |= self.ablations(choices[protocol])
        return out

    def ablations(self, choices: dict[str, Any]) -> dict[str, list[Outcome]]:
        """``{"METHOD[k=v,...]": outcomes}``: each ablation of a contestant in the plan."""
        c = self.config
        out = {}
        for number, ablation in enumerate(ABLATIONS):
            if ablation is None or ablation[0] not in c.methods:
                continue
            method, change = ablation
            values = {**choices[method]["config"], **change}
            label = f"{method}[{','.join(f'{k}={v}' for k, v in change.items())}]"
            out[label] = [
                self.run(
                    Trial(
                        "ablation",
                        "graph",
                        method,
                        values,
                        seed,
                        c.eval_stream,
                        c.eval_episodes,
                        number,
                    ),
                    label,
                    choices[method],
                )  # fmt: skip
                for seed in c.seeds
            ]
        return out

    def result(self) -> dict[str, Any]:
        """The whole contest: settings, tuning, final figures and paired differences."""
        choices = self.tune()
        finals = self.final(choices)
        rng = np.random.default_rng(0)
        return {
            "config": json.loads((self.folder / "contest.json").read_text()),
            "driver": "plain resumable driver, one process, trials in sequence",
            "tuning": choices,
            "protocols": {
                p: analyse(finals[p], self.config.bootstrap, rng) for p in self.config.protocols
            },
        }


def _means(o: Outcome) -> dict[str, float]:
    return {k: o.mean(k) for k in ("reward", "score", "tokens")} | {"index": o.trial["index"]}


# --------------------------------------------------------------------------- analysis


def analyse(runs: dict[str, list[Outcome]], resamples: int, rng: np.random.Generator) -> dict:
    """Per policy: means over seeds and episodes (and the seeds' spread); Agent Q-Mix minus
    each other policy with hierarchical-bootstrap intervals, overall, per domain and per
    difficulty; AgentDropout against AgentPrune in prompt and completion tokens."""
    first = next(iter(runs.values()))[0].episodes
    subsets = {"all": np.ones(len(first["score"]), dtype=bool)}
    for d in sorted(set(first["domain"])):
        subsets[f"domain={d}"] = np.asarray(first["domain"]) == d
    for k in sorted(set(first["difficulty"])):
        subsets[f"difficulty={k}"] = np.asarray(first["difficulty"]) == k
    metrics = ("reward", "score", "tokens", "prompt", "completion")
    arrays = {
        name: {m: np.asarray([o.episodes[m] for o in outs], dtype=float) for m in metrics}
        for name, outs in runs.items()
    }  # (seeds, episodes) per policy and metric
    policies = {}
    for name, outs in runs.items():
        a = arrays[name]
        policies[name] = {
            "seeds": len(outs),
            **{m: float(a[m].mean()) for m in metrics},
            "reward_by_seed": [float(x) for x in a["reward"].mean(axis=1)],
            "score_by_seed": [float(x) for x in a["score"].mean(axis=1)],
            "tokens_by_seed": [float(x) for x in a["tokens"].mean(axis=1)],
            "graph": {k: _mean([o.graph[k] for o in outs]) for k in outs[0].graph},
        }
    diffs: dict[str, Any] = {}
    if "qmix" in arrays:
        for name in arrays:
            if name == "qmix":
                continue
            diffs[name] = {
                label: {
                    m: paired_bootstrap(arrays["qmix"][m][:, mask], arrays[name][m][:, mask],
                                        resamples, rng)
                    for m in ("reward", "score", "tokens")
                }
                for label, mask in subsets.items()
                if mask.any()
            }  # fmt: skip
    claim = None
    if "agentdropout" in arrays and "agentprune" in arrays:
        claim = {
            part: relative_change(arrays["agentdropout"][part], arrays["agentprune"][part],
                                  resamples, rng)
            for part in ("prompt", "completion")
        }  # fmt: skip
    return {
        "policies": policies,
        "qmix_minus": diffs,
        "agentdropout_vs_agentprune": claim,
        "episodes": len(first["score"]),
    }


def paired_bootstrap(
    a: np.ndarray, b: np.ndarray, resamples: int, rng: np.random.Generator
) -> dict[str, float]:
    """Mean of ``a − b`` with a 95 % interval that includes seed-to-seed variation.

    ``a (Sa, E)``, ``b (Sb, E)``: per training seed, per episode (episode ``e`` is the same
    task for both). Each resample draws seeds with replacement for each side apart (their
    training seeds are not paired), then episodes with replacement — the same episodes for
    both sides (paired by task)."""
    sa, e = a.shape
    sb = b.shape[0]
    point = float(a.mean() - b.mean())
    stats = np.empty(resamples)
    for k in range(resamples):
        ia = rng.integers(0, sa, sa)
        ib = rng.integers(0, sb, sb)
        ie = rng.integers(0, e, e)
        stats[k] = a[ia][:, ie].mean() - b[ib][:, ie].mean()
    lo, hi = np.percentile(stats, [2.5, 97.5])
    return {"mean": point, "lo": float(lo), "hi": float(hi)}


def bootstrap_mean(a: np.ndarray, resamples: int, rng: np.random.Generator) -> dict[str, float]:
    """Mean of ``a (S, E)`` (per training seed, per episode) with the same hierarchical 95 %
    interval as :func:`paired_bootstrap` (seeds, then episodes, resampled): the difference
    from a policy that scores 0 on every episode."""
    return paired_bootstrap(a, np.zeros((1, a.shape[1])), resamples, rng)


def relative_change(
    a: np.ndarray, b: np.ndarray, resamples: int, rng: np.random.Generator
) -> dict[str, float]:
    """``mean(a) / mean(b) − 1`` with the same hierarchical bootstrap interval."""
    point = float(a.mean() / b.mean() - 1) if b.mean() else math.nan
    sa, e = a.shape
    sb = b.shape[0]
    stats = np.empty(resamples)
    for k in range(resamples):
        ie = rng.integers(0, e, e)
        num = a[rng.integers(0, sa, sa)][:, ie].mean()
        den = b[rng.integers(0, sb, sb)][:, ie].mean()
        stats[k] = num / den - 1 if den else math.nan
    lo, hi = np.nanpercentile(stats, [2.5, 97.5])
    return {"mean": point, "lo": float(lo), "hi": float(hi)}


def table(result: dict[str, Any]) -> str:
    """The contest as Markdown: per protocol, each policy's figures and Q-Mix's margins."""
    lines = []
    for protocol, part in result["protocols"].items():
        lines += [
            f"**Protocol `{protocol}`** ({part['episodes']} held-out episodes, stream "
            f"{result['config']['eval_stream']}, training seeds "
            f"{', '.join(map(str, result['config']['seeds']))})",
            "",
            "| policy | seeds | reward | accuracy | tokens (prompt / completion) | verifying "
            "agents / round | Q-Mix − it: reward [95 %] | accuracy [95 %] | tokens [95 %] |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for name, p in part["policies"].items():
            d = part["qmix_minus"].get(name, {}).get("all")
            cell = (
                " | ".join(f"{d[m]['mean']:+.3f} [{d[m]['lo']:+.3f}, {d[m]['hi']:+.3f}]"
                           for m in ("reward", "score"))
                + f" | {d['tokens']['mean']:+,.0f} [{d['tokens']['lo']:+,.0f}, "
                f"{d['tokens']['hi']:+,.0f}]"
                if d else "— | — | —"
            )  # fmt: skip
            lines.append(
                f"| {name} | {p['seeds']} | {p['reward']:.3f} | {p['score']:.3f} | "
                f"{p['tokens']:,.0f} ({p['prompt']:,.0f} / {p['completion']:,.0f}) | "
                f"{p['graph']['verifying_agents']:.2f} | {cell} |"
            )
        lines += ["", *_breakdown(part), ""]
    return "\n".join(_tuning(result) + lines)


def _tuning(result: dict[str, Any]) -> list[str]:
    """Each grid, its tuning-stream rewards and the configuration chosen."""
    c = result["config"]
    lines = [
        f"**Tuning** (training seed {c['tune_seed']}, stream {c['tune_stream']}, "
        f"{c['tune_episodes']} episodes; rule: highest mean reward, ties to fewer tokens)",
        "",
        "| protocol | method | grid (reward on the tuning stream) | chosen |",
        "|---|---|---|---|",
    ]
    for protocol, methods in result["tuning"].items():
        for method, t in methods.items():
            tried = "; ".join(
                f"{_config(g)}: {r['reward']:.3f}"
                for g, r in zip(t["grid"], t["tuning"], strict=True)
            )
            lines.append(f"| {protocol} | {method} | {tried} | {_config(t['config'])} |")
    return [*lines, ""]


def _config(values: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in values.items()) or "defaults"


def _breakdown(part: dict[str, Any]) -> list[str]:
    """Agent Q-Mix minus each contestant in reward, per domain and per difficulty."""
    names = [n for n in part["qmix_minus"] if not n.startswith("fixed:")]
    if not names:
        return []
    labels = [k for k in part["qmix_minus"][names[0]] if k != "all"]
    lines = [
        "Q-Mix − it, reward [95 %], by domain and difficulty:",
        "",
        "| subset | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for label in labels:
        cells = []
        for n in names:
            d = part["qmix_minus"][n].get(label, {}).get("reward")
            cells.append(f"{d['mean']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}]" if d else "—")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    claim = part.get("agentdropout_vs_agentprune")
    if claim:
        lines += [
            "",
            "AgentDropout against AgentPrune (its paper: −21.6 % prompt, −18.4 % completion "
            "tokens): "
            + "; ".join(
                f"{k} {v['mean']:+.1%} [{v['lo']:+.1%}, {v['hi']:+.1%}]" for k, v in claim.items()
            ),
        ]
    return lines
