"""Every user mistake we know of ends in one sentence on stderr and exit code 2.

One table: each row is a command line (built over files the test writes into tmp_path)
and a phrase its one line of stderr must contain. Rows run :func:`core.cli.main` in this
process (the same code the console script runs, without seconds of imports per row);
``agentqmix bench`` rows start the benchmark's own process as the CLI always does, and
rows marked ``PROC`` run the whole CLI as a subprocess (argv bytes that are not UTF-8).
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

from core.cli import main
from core.qmix.checkpoint import save_checkpoint
from core.qmix.encoders import AgentNetConfig, AgentNetwork
from core.qmix.env import EnvShapes
from core.qmix.mixers import MixerConfig, make_mixer
from core.qmix.training import TrainConfig
from core.store.synthetic import synthetic_episode
from core.store.writer import LoggerConfig, RunLogger
from core.team.options import TeamOptions
from tests.core.torch_threads import one_torch_thread  # noqa: F401
from tests.core.user_envs import CORRIDOR

REPO = Path(__file__).resolve().parents[2]

ENVS = (
    CORRIDOR
    + """

class StringObs(Corridor):
    def observe(self):
        return {**super().observe(), "obs": "two agents, one corridor"}


class StringReward(Corridor):
    def step(self, actions):
        obs, _, done, info = super().step(actions)
        return obs, "high", done, info


class BoolDims(Corridor):
    n_agents = True


class ShortStep(Corridor):
    def step(self, actions):
        return super().step(actions)[:2]


class RaisingStep(Corridor):
    def step(self, actions):
        return 1 / 0


class RaisingReset(Corridor):
    def reset(self, seed=None):
        raise KeyError("level 3")


class NanObs(Corridor):
    def observe(self):
        return {**super().observe(), "state": np.full(1, np.nan)}


class InfReward(Corridor):
    def step(self, actions):
        obs, _, done, info = super().step(actions)
        return obs, -np.inf, done, info


def make():
    return Corridor()


def string_obs():
    return StringObs()


def string_reward():
    return StringReward()


def bool_dims():
    return BoolDims()


def short_step():
    return ShortStep()


def raising_step():
    return RaisingStep()


def raising_reset():
    return RaisingReset()


def nan_obs():
    return NanObs()


def inf_reward():
    return InfReward()
"""
)
SHAPES = EnvShapes(n_agents=2, n_actions=2, obs_dim=1, state_dim=1, max_steps=2)
HUGE_CHECKPOINT_WIDTH = 60_000
"""Within the loader's width limit; the file's weights are 8 wide, so only the shape check on
the meta device (no allocation) stands between it and 10^10 floats."""


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every bad (and the few good) files the table refers to, written once."""
    d = tmp_path_factory.mktemp("mistakes")
    f: dict[str, Path] = {"dir": d}
    f["envs"] = d / "envs.py"
    f["envs"].write_text(ENVS)
    (d / "importboom").mkdir()
    (d / "importboom" / "boom_env.py").write_text("raise RuntimeError('no GPU here')\n")

    # Checkpoints: a good one for the corridor, then text, CSV and crafted variants of it.
    torch.manual_seed(0)
    agent_cfg = AgentNetConfig(gnn_hidden=8, gru_hidden=8, q_hidden=8)
    mixer_cfg = MixerConfig(embed=8, hypernet_hidden=8)
    good = d / "good.pt"
    save_checkpoint(
        good,
        AgentNetwork(SHAPES.obs_dim, SHAPES.n_agents, SHAPES.n_actions, agent_cfg),
        make_mixer(SHAPES.n_agents, SHAPES.state_dim, mixer_cfg),
        SHAPES,
        agent_cfg,
        mixer_cfg,
        env={"spec": f"{f['envs']}:make"},
    )
    payload = torch.load(good, weights_only=True)

    def crafted(name: str, change: Callable[[dict], None]) -> None:
        copy = torch.load(good, weights_only=True)
        change(copy)
        torch.save(copy, d / name)

    crafted("negative.pt", lambda p: p["shapes"].update(n_agents=-2))
    crafted("string.pt", lambda p: p["agent_config"].update(gnn_hidden="wide"))
    crafted("huge.pt", lambda p: p["agent_config"].update(gnn_hidden=10**12))
    crafted("huge_obs.pt", lambda p: p["shapes"].update(obs_dim=10**12))
    crafted("wide.pt", lambda p: p["agent_config"].update(gnn_hidden=HUGE_CHECKPOINT_WIDTH))
    name = next(iter(payload["agent"]))
    crafted("nan.pt", lambda p: p["agent"][name].view(-1).__setitem__(0, float("nan")))
    (d / "notes.txt").write_text("This is where I keep my notes, not a model.\n")
    (d / "runs.csv").write_text("run,episodes,reward\nr1,100,0.5\nr2,200,0.7\n")

    # Task files.
    (d / "deep.jsonl").write_text('{"question": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    (d / "digits.jsonl").write_text('{"question": "q", "answer": ' + "7" * 5000 + "}\n")
    (d / "surrogate.jsonl").write_text('{"question": "why \\ud800?", "answer": "4"}\n')
    (d / "garbage.jsonl.gz").write_bytes(
        gzip.compress(b'{"question": "q"}\n')[:12] + os.urandom(64)
    )
    rows = {
        "bool_index.jsonl": {"question": "q", "options": ["a", "b"], "answer_index": True},
        "list_question.jsonl": {"question": ["what", "?"], "answer": "1\n#### 1"},
        "int_prompt.jsonl": {
            "task_id": "T/0", "prompt": 7, "canonical_solution": "  return 1\n",
            "test": "def check(f): pass", "entry_point": "f",
        },
        "empty_answer.jsonl": {"question": "Pick one", "options": ["x", "y"], "answer": ""},
        "dict_answer.jsonl": {"problem": "2+2?", "solution": "4", "answer": {"value": 4}},
    }  # fmt: skip
    (d / "nan_answer.jsonl").write_text('{"question": "q", "answer": NaN}\n')
    (d / "inf_answer.jsonl").write_text('{"question": "q", "answer": 1e400}\n')
    for file_name, row in rows.items():
        (d / file_name).write_text(json.dumps(row) + "\n")

    # A store with one run (for export), and a file of random bytes posing as one.
    f["db"] = d / "store.duckdb"
    with RunLogger(f["db"], "eval", {}, settings=LoggerConfig(background=False)) as logger:
        logger.log_episodes([synthetic_episode(0)])
        f["run"] = Path(logger.run_id)
    simulated = {"team": asdict(TeamOptions())}
    with RunLogger(f["db"], "eval", simulated, settings=LoggerConfig(background=False)) as logger:
        logger.log_episodes([synthetic_episode(k) for k in range(4)])
        f["sim_run"] = Path(logger.run_id)
    config = {"team": asdict(TeamOptions()), "train": asdict(TrainConfig())}
    with RunLogger(f["db"], "train", config, settings=LoggerConfig(background=False)) as logger:
        f["train_run"] = Path(logger.run_id)
    (d / "random.duckdb").write_bytes(os.urandom(8192))
    write_societies(d)
    return f


SOCIETY_HEAD = '{"format": "agentqmix-society", "version": 1, "society": '
SOCIETIES = {
    "deep": "[" * 100_000 + "]" * 100_000,
    "digits": '{"preamble_tokens": ' + "7" * 5000 + "}",
    "negative_preamble": {"preamble_tokens": -5},
    "huge_tokens": {"completion_tokens": {"math": 1e30, "code": 330, "mcq": 150}},
    "huge_budget": {"token_budget": 1e30},
    "negative_verbosity": {"role_verbosity": {"solver": -1}},
    "negative_action_verbosity": {"action_verbosity": [1, 1, 1, 1, 1, -1]},
    "negative_zipf": {"distractor_zipf": -2},
    "negative_jitter": {"difficulty_jitter": -1},
    "empty_role_skill": {"role_skill": {}},
    "unknown_role": {"role_skill": {"wizard": {"math": 1.0}}},
    "unknown_kind": {"verify_catch": {"math": 0.3, "code": 0.7, "mcq": 0.1, "poetry": 0.5}},
}
"""Society files (``--society``) a hostile user writes: the ``society`` object of each."""


def write_societies(d: Path) -> None:
    for name, body in SOCIETIES.items():
        text = body if isinstance(body, str) else json.dumps(body)
        (d / f"society_{name}.json").write_text(SOCIETY_HEAD + text + "}")
    os.mkfifo(d / "society_pipe.json")  # opening it for reading would wait for a writer


def society(f: dict[str, Path], name: str) -> list[str]:
    return team("--society", str(f["dir"] / f"society_{name}.json"))


def team(*extra: str) -> list[str]:
    return [
        "eval",
        "--benchmark",
        "math",
        "--policy",
        "full",
        "--episodes",
        "1",
        "--no-log",
        *extra,
    ]


def env_train(spec: str) -> list[str]:
    flags = ["--episodes", "2", "--n-envs", "1", "--hidden", "8", "--out", "m.pt"]
    return ["train", "--env", spec, *flags]


def env_eval(d: Path, checkpoint: str) -> list[str]:
    return ["eval", "--env", f"{d / 'envs.py'}:make", "--checkpoint", str(d / checkpoint)]


def jsonl(d: Path, name: str) -> list[str]:
    return ["eval", "--benchmark", f"jsonl:{d / name}", "--policy", "full", "--no-log"]


def sweep_flags(f: dict[str, Path]) -> list[str]:
    flags = ["--token-weights", "0.1", "--seeds", "0", "--no-log"]
    return ["sweep", "--benchmark", "math", *flags, "--out", str(f["dir"] / "sweep")]


def train_out(out: str) -> list[str]:
    return ["train", "--benchmark", "math", "--episodes", "1", "--no-log", "--out", out]


INPROC, PROC = "inproc", "proc"
MISTAKES: dict[str, tuple[Callable[[dict[str, Path]], list[str]], str, str]] = {
    # --checkpoint that is not one
    "text checkpoint": (lambda f: env_eval(f["dir"], "notes.txt"), "not a readable", INPROC),
    "csv checkpoint": (lambda f: env_eval(f["dir"], "runs.csv"), "not a readable", INPROC),
    "text checkpoint, team": (
        lambda f: ["eval", "--benchmark", "math", "--checkpoint", str(f["dir"] / "notes.txt")],
        "not a readable",
        INPROC,
    ),
    "negative size": (lambda f: env_eval(f["dir"], "negative.pt"), "non-positive n_agents", INPROC),
    "string size": (lambda f: env_eval(f["dir"], "string.pt"), "invalid gnn_hidden", INPROC),
    "huge size": (lambda f: env_eval(f["dir"], "huge.pt"), "invalid gnn_hidden", INPROC),
    "huge shape": (lambda f: env_eval(f["dir"], "huge_obs.pt"), "sizes too large", INPROC),
    "wide config, small weights": (
        lambda f: env_eval(f["dir"], "wide.pt"),
        "do not match its own configuration",
        INPROC,
    ),
    "nan weights": (lambda f: env_eval(f["dir"], "nan.pt"), "non-finite", INPROC),
    # request recipe
    "unknown prompt layout": (
        lambda f: ["eval", "--backend", "local", "--prompt-layout", "chat", "--no-log"],
        "--prompt-layout must be one of fresh, conversation",
        INPROC,
    ),
    "prompt layout on the simulator": (
        lambda f: ["eval", "--prompt-layout", "fresh", "--no-log"],
        "--prompt-layout is for --backend openai or local",
        INPROC,
    ),
    "unknown prompt style": (
        lambda f: ["eval", "--backend", "local", "--prompt-style", "terse", "--no-log"],
        "--prompt-style must be one of full, compact, not 'terse'",
        INPROC,
    ),
    "prompt style on the simulator": (
        lambda f: ["eval", "--prompt-style", "compact", "--no-log"],
        "--prompt-style is for --backend openai or local",
        INPROC,
    ),
    "verification that would read the hidden tests": (
        lambda f: ["eval", "--backend", "local", "--verify-tests", "hidden", "--no-log"],
        "--verify-tests must be one of examples, examples+written, not 'hidden'",
        INPROC,
    ),
    "folder checkpoint": (lambda f: env_eval(f["dir"], "importboom"), "is a folder", INPROC),
    # task files
    "deep nesting": (lambda f: jsonl(f["dir"], "deep.jsonl"), "nested too deeply", INPROC),
    "5000 digits": (lambda f: jsonl(f["dir"], "digits.jsonl"), "line 1 holds a value", INPROC),
    "lone surrogate": (lambda f: jsonl(f["dir"], "surrogate.jsonl"), "lone surrogate", INPROC),
    "gzip garbage": (lambda f: jsonl(f["dir"], "garbage.jsonl.gz"), "not a UTF-8 JSONL", INPROC),
    "bool answer_index": (lambda f: jsonl(f["dir"], "bool_index.jsonl"), "answer_index", INPROC),
    "list question": (lambda f: jsonl(f["dir"], "list_question.jsonl"), "'question'", INPROC),
    "dict answer": (lambda f: jsonl(f["dir"], "dict_answer.jsonl"), "'answer'", INPROC),
    "int prompt": (lambda f: jsonl(f["dir"], "int_prompt.jsonl"), "prompt must be", INPROC),
    "empty mmlu answer": (
        lambda f: jsonl(f["dir"], "empty_answer.jsonl"),
        "line 1: the answer is empty",
        INPROC,
    ),
    # --env specs and environments
    "env ':x'": (lambda f: env_train(":x"), "must look like", INPROC),
    "env ':'": (lambda f: env_train(":"), "must look like", INPROC),
    "env '.relative:x'": (lambda f: env_train(".relative:x"), "must look like", INPROC),
    "env import raises": (lambda f: env_train("boom_env:make"), "failed to import", INPROC),
    "env string obs": (
        lambda f: env_train(f"{f['envs']}:string_obs"),
        "returned obs as str",
        INPROC,
    ),
    "env string reward": (
        lambda f: env_train(f"{f['envs']}:string_reward"),
        "reward of type str",
        INPROC,
    ),
    "env bool dims": (lambda f: env_train(f"{f['envs']}:bool_dims"), "missing n_agents", INPROC),
    "env short step": (
        lambda f: env_train(f"{f['envs']}:short_step"),
        "step returned a 2-tuple",
        INPROC,
    ),
    "env reset raises": (
        lambda f: env_train(f"{f['envs']}:raising_reset"),
        "reset raised KeyError",
        INPROC,
    ),
    "env nan state": (lambda f: env_train(f"{f['envs']}:nan_obs"), "NaN or infinite", INPROC),
    "env inf reward": (
        lambda f: env_train(f"{f['envs']}:inf_reward"),
        "non-finite reward",
        INPROC,
    ),
    "env step raises": (
        lambda f: env_train(f"{f['envs']}:raising_step"),
        "step raised ZeroDivisionError",
        INPROC,
    ),
    # --out
    "out .": (lambda f: train_out("."), "is a folder", INPROC),
    "out a folder": (lambda f: train_out(str(f["dir"])), "is a folder", INPROC),
    "out /proc": (lambda f: train_out("/proc/x.pt"), "cannot be written", INPROC),
    "out under a file": (
        lambda f: train_out(str(f["dir"] / "notes.txt" / "m.pt")),
        "is a file, not a folder",
        INPROC,
    ),
    # flags out of range
    "seed 30 digits": (lambda f: train_out("m.pt") + ["--seed", "1" * 30], "--seed", INPROC),
    "rounds 100000": (lambda f: team("--rounds", "100000"), "--rounds", INPROC),
    "hidden 1e9": (lambda f: train_out("m.pt") + ["--hidden", "1e9"], "--hidden", INPROC),
    "hidden 10^9": (lambda f: train_out("m.pt") + ["--hidden", "1000000000"], "--hidden", INPROC),
    "n-envs 1e8": (lambda f: train_out("m.pt") + ["--n-envs", "1e8"], "--n-envs", INPROC),
    "threads 100000": (lambda f: train_out("m.pt") + ["--threads", "100000"], "--threads", INPROC),
    "token-weight inf": (lambda f: team("--token-weight", "inf"), "--token-weight", INPROC),
    "token-budget nan": (lambda f: team("--token-budget", "nan"), "--token-budget", INPROC),
    "timeout nan": (lambda f: team("--timeout", "nan"), "--timeout", INPROC),
    "fail-prob nan": (lambda f: team("--fail-prob", "nan"), "--fail-prob", INPROC),
    "max-attempts 0": (lambda f: team("--max-attempts", "0"), "--max-attempts", INPROC),
    "no agents": (lambda f: team("--agents", " , "), "--agents", INPROC),
    "agents with empty roles": (
        lambda f: team("--agents", "solver,solver,,"),
        "--agents has an empty role at position 3",
        INPROC,
    ),
    "agents role of 50 characters": (lambda f: team("--agents", "x" * 50), "at most 40", INPROC),
    "episodes 0": (lambda f: team("--episodes", "0"), "--episodes", INPROC),
    "base-url not a url": (lambda f: team("--base-url", "not a url"), "--base-url", INPROC),
    "openai without a key or a url": (
        lambda f: team("--backend", "openai", "--model", "m"),
        "needs a key: set OPENAI_API_KEY, or pass --base-url",
        INPROC,
    ),
    "checkpoint-every-s nan": (
        lambda f: train_out("m.pt") + ["--checkpoint-every-s", "nan"],
        "--checkpoint-every-s",
        INPROC,
    ),
    "checkpoint-every-s 0": (
        lambda f: train_out("m.pt") + ["--checkpoint-every-s", "0"],
        "--checkpoint-every-s",
        INPROC,
    ),
    "resume out /proc": (
        lambda f: (
            ["train", "--resume", str(f["train_run"]), "--db", str(f["db"])]
            + ["--out", "/proc/x.pt"]
        ),
        "cannot be written",
        INPROC,
    ),
    "unknown flag": (lambda f: train_out("m.pt") + ["--hiden", "8"], "No such option", INPROC),
    "calibrate on a simulated run": (
        lambda f: [
            "calibrate",
            "--run",
            str(f["sim_run"]),
            "--db",
            str(f["db"]),
            "--out",
            "s.json",
        ],
        "made no real calls",
        INPROC,
    ),
    # empty paths (the parser reads "" as ".", the current folder)
    "export --parquet empty": (
        lambda f: ["export", "--run", str(f["run"]), "--db", str(f["db"]), "--parquet", ""],
        "--parquet is empty",
        INPROC,
    ),
    "export --parquet= empty": (
        lambda f: ["export", "--run", str(f["run"]), "--db", str(f["db"]), "--parquet="],
        "--parquet is empty",
        INPROC,
    ),
    "train --out empty": (lambda f: train_out(""), "--out is empty", INPROC),
    "runs --db empty": (lambda f: ["runs", "--db", ""], "--db is empty", INPROC),
    "eval --checkpoint empty": (
        lambda f: team("--checkpoint", " "),
        "--checkpoint is empty",
        INPROC,
    ),
    "calibrate --out empty": (
        lambda f: ["calibrate", "--run", str(f["run"]), "--db", str(f["db"]), "--out", ""],
        "--out is empty",
        INPROC,
    ),
    # the store
    "export unwritable": (
        lambda f: ["export", "--run", str(f["run"]), "--db", str(f["db"]), "--parquet", "/proc/x"],
        "Cannot write Parquet files",
        INPROC,
    ),
    "sql not utf-8": (
        lambda f: ["sql", "SELECT '\udcff'", "--db", str(f["db"])],
        "argument 2 is not valid UTF-8",
        PROC,
    ),
    "out name 300 bytes": (lambda f: train_out("a" * 300 + ".pt"), "bytes long", INPROC),
    "db name 300 bytes": (lambda f: ["runs", "--db", "a" * 300 + ".duckdb"], "bytes long", INPROC),
    "parquet name 300 bytes": (
        lambda f: ["export", "--run", "x", "--parquet", "a" * 300, "--db", str(f["db"])],
        "bytes long",
        INPROC,
    ),
    "compare --device cuda without CUDA": (
        lambda f: ["compare", "--benchmark", "math", "--episodes", "1", "--device", "cuda"],
        "no CUDA GPU",
        INPROC,
    ),
    "token-weight 1e308": (lambda f: team("--token-weight", "1e308"), "--token-weight", INPROC),
    "train --resume, no database": (
        lambda f: ["train", "--resume", "train-x", "--db", str(f["dir"] / "none.duckdb")],
        "No episode store",
        INPROC,
    ),
    "sweep hidden 1e8": (
        lambda f: sweep_flags(f) + ["--hidden", "100000000"],
        "--hidden",
        INPROC,
    ),
    "sweep n-envs 99999": (lambda f: sweep_flags(f) + ["--n-envs", "99999"], "--n-envs", INPROC),
    "jsonl answer NaN": (lambda f: jsonl(f["dir"], "nan_answer.jsonl"), "answer", INPROC),
    "jsonl answer 1e400": (lambda f: jsonl(f["dir"], "inf_answer.jsonl"), "answer", INPROC),
    # learned-topology settings: checked by the method's own rules, each given once
    "sweep knob out of the method's range": (
        lambda f: sweep_flags(f) + ["--methods", "agentprune", "--knob", "agentprune=2.0"],
        "--knob agentprune: prune_ratio = 2.0 is not in [0, 1]",
        INPROC,
    ),
    "sweep knob not a whole number": (
        lambda f: sweep_flags(f) + ["--methods", "gdesigner", "--knob", "gdesigner.hidden=2.5"],
        "takes whole numbers",
        INPROC,
    ),
    "train --set out of range": (
        lambda f: train_out("m.pt") + ["--method", "agentprune", "--set", "prune_ratio=1.5"],
        "prune_ratio = 1.5 is not in [0, 1]",
        INPROC,
    ),
    "train --set twice": (
        lambda f: train_out("m.pt") + ["--method", "agentprune", "--set", "k=1", "--set", "k=2"],
        "--set gives k twice",
        INPROC,
    ),
    # --society files: bounded, regular, and every value meaningful
    "society nested 100000 deep": (lambda f: society(f, "deep"), "nested too deeply", INPROC),
    "society 5000-digit integer": (lambda f: society(f, "digits"), "cannot be read", INPROC),
    "society a named pipe": (lambda f: society(f, "pipe"), "not a regular file", INPROC),
    "society empty path": (lambda f: team("--society", ""), "--society is empty", INPROC),
    "society a folder": (lambda f: team("--society", str(f["dir"])), "is a folder", INPROC),
    "society negative preamble": (
        lambda f: society(f, "negative_preamble"),
        "preamble_tokens = -5 is not in",
        INPROC,
    ),
    "society 1e30 tokens": (
        lambda f: society(f, "huge_tokens"),
        "completion_tokens.math",
        INPROC,
    ),
    "society 1e30 budget": (lambda f: society(f, "huge_budget"), "token_budget", INPROC),
    "society negative verbosity": (
        lambda f: society(f, "negative_verbosity"),
        "role_verbosity.solver",
        INPROC,
    ),
    "society negative action verbosity": (
        lambda f: society(f, "negative_action_verbosity"),
        "action_verbosity[5]",
        INPROC,
    ),
    "society negative zipf": (lambda f: society(f, "negative_zipf"), "distractor_zipf", INPROC),
    "society negative jitter": (
        lambda f: society(f, "negative_jitter"),
        "difficulty_jitter",
        INPROC,
    ),
    "society empty role_skill": (
        lambda f: society(f, "empty_role_skill"),
        "role_skill is empty",
        INPROC,
    ),
    "society unknown role": (lambda f: society(f, "unknown_role"), "role 'wizard'", INPROC),
    "society unknown task kind": (
        lambda f: society(f, "unknown_kind"),
        "task kind 'poetry'",
        INPROC,
    ),
    # benchmarks (their own process, started by the CLI)
    "bench learning seeds a,b": (
        lambda f: ["bench", "learning", "--seeds", "a,b"],
        "--seeds takes",
        INPROC,
    ),
    "bench real prompt style": (
        lambda f: ["bench", "real", "--prompt-style", "nope", "--episodes", "1"],
        "--prompt-style must be one of",
        INPROC,
    ),
    "bench learner agents": (
        lambda f: ["bench", "learner", "--agents", "100000"],
        "--agents",
        INPROC,
    ),
    "bench learner seconds inf": (
        lambda f: ["bench", "learner", "--seconds", "inf"],
        "--seconds",
        INPROC,
    ),
    "bench learner device": (
        lambda f: ["bench", "learner", "--device", "tpu"],
        "--device must be one of",
        INPROC,
    ),
    "bench lab random db": (
        lambda f: ["bench", "lab", "--db", str(f["dir"] / "random.duckdb")],
        "is not a DuckDB database",
        INPROC,
    ),
    "bench sim-calibration token-weight inf": (
        lambda f: ["bench", "sim-calibration", "--token-weight", "inf"],
        "--token-weight",
        INPROC,
    ),
    "bench headroom episodes -3": (
        lambda f: ["bench", "headroom", "--episodes", "-3"],
        "--episodes: -3 is not between",
        INPROC,
    ),
    "bench headroom preset nope": (
        lambda f: ["bench", "headroom", "--preset", "nope"],
        "invalid choice: 'nope'",
        INPROC,
    ),
    "bench fuzz-checker n -1": (
        lambda f: ["bench", "fuzz-checker", "--n", "-1"],
        "--n: -1 is not between",
        INPROC,
    ),
    "bench rollouts unknown flag": (
        lambda f: ["bench", "rollouts", "--episode", "3"],
        "unrecognized arguments",
        INPROC,
    ),
    "bench learning benchmark nope": (
        lambda f: ["bench", "learning", "--benchmark", "nope", "--episodes", "1"],
        "Unknown benchmark 'nope'",
        INPROC,
    ),
}


@pytest.mark.parametrize("name", list(MISTAKES))
def test_user_mistake_is_one_sentence_and_exit_2(
    name: str,
    files: dict[str, Path],
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    build, needle, how = MISTAKES[name]
    argv = build(files)
    monkeypatch.chdir(files["dir"])
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):  # rows never depend on the shell's
        monkeypatch.delenv(var, raising=False)
    monkeypatch.syspath_prepend(str(files["dir"] / "importboom"))
    if how == PROC:
        env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "80"}
        done = subprocess.run(
            [sys.executable, "-m", "core.cli", *argv],
            capture_output=True,
            timeout=300,
            env=env,
            stdin=subprocess.DEVNULL,
        )
        code, err = done.returncode, done.stderr.decode("utf-8", "replace")
    else:
        code = main(argv)
        err = capfd.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error:") and needle in lines[0], lines[0]
    assert not (files["dir"] / "m.pt").exists()
    assert not (files["dir"] / "sweep").exists()  # no sweep folder either
    assert not list(files["dir"].glob("*.parquet"))  # nor an export into the current folder
    assert not (files["dir"] / "s.json").exists()  # nor a "calibrated" society


def test_every_benchmark_parses_like_the_cli() -> None:
    # A benchmark's flags go through benchmarks.common.Parser (one sentence, exit 2, no usage
    # block) with bounded numbers (int_in/float_in): a plain argparse parser printed its
    # usage, and `--episodes -3` reached the benchmark as a traceback.
    from core.cli.bench import BENCHMARKS

    for name in BENCHMARKS:
        source = (REPO / "benchmarks" / (name.replace("-", "_") + ".py")).read_text()
        assert "argparse.ArgumentParser(" not in source, name
        assert "Parser(" in source, name
        for unbounded in ("type=int,", "type=int)", "type=float,", "type=float)"):
            assert unbounded not in source, (name, unbounded)


PASSWORD = "hunter2-PASS-0042"
MALFORMED_URLS = {
    "port not a number": f"http://alice:{PASSWORD}@127.0.0.1:port/v1",
    "unclosed IPv6 bracket": f"http://alice:{PASSWORD}@[::1/v1",
    "scheme without a colon": f"http//alice:{PASSWORD}@127.0.0.1/v1",
    "no scheme": f"alice:{PASSWORD}@127.0.0.1:8000",
    "an @ in the password": f"http://alice:{PASSWORD}@x@127.0.0.1:port/v1",
}


@pytest.mark.parametrize("how", ["--base-url", "OPENAI_BASE_URL"])
@pytest.mark.parametrize("name", list(MALFORMED_URLS))
def test_a_malformed_url_never_prints_its_password(
    name: str, how: str, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url = MALFORMED_URLS[name]
    argv = team("--backend", "openai", "--model", "m")
    if how == "--base-url":
        argv += ["--base-url", url]
    else:
        monkeypatch.setenv("OPENAI_BASE_URL", url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-never-printed-0123")
    assert main(argv) == 2
    captured = capfd.readouterr()
    out = captured.out + captured.err
    assert "Traceback" not in out and len(out.strip().splitlines()) == 1, out
    assert "PASS" not in out and "hunter2" not in out and "never-printed" not in out, out


def test_a_run_whose_every_call_failed_exits_1_with_one_sentence(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A real server on 127.0.0.1 that refuses every call (401): the run is played and logged
    # (nothing lost), its figures printed, and then it ends non-zero, saying why.
    from core.store.queries import list_runs
    from tests.core.backends.fake_openai import FakeOpenAIServer

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    db = tmp_path / "runs.duckdb"
    with FakeOpenAIServer() as srv:
        srv.always = "401"
        flags = ["--backend", "openai", "--model", "m", "--base-url", srv.url, "--no-cache"]
        flags += ["--agents", "solver", "--rounds", "1", "--max-attempts", "1", "--db", str(db)]
        code = main(
            ["eval", "--benchmark", "math", "--policy", "single", "--episodes", "1"] + flags
        )
        refused = srv.request_count
    err = capfd.readouterr().err
    assert code == 1, err
    assert refused >= 1  # the calls were sent, and every one failed
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: ") and "to the back-end failed" in last, err
    assert "Traceback" not in err
    assert sum(line.startswith("error:") for line in err.splitlines()) == 1, err
    logged = list_runs(db)
    assert len(logged) == 1 and int(logged.iloc[0]["episodes"]) == 1  # the run is kept
