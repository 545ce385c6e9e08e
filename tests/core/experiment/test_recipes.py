"""Recipes: the engine's textbook defaults for ``--env``, the society's tuned settings for
the agent team, a flag over either, and every setting stored with the run and checkpoint."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import pytest

from core.cli import main
from core.qmix.checkpoint import load_checkpoint
from core.qmix.config import LearnerConfig, TrainConfig
from core.store import get_run
from core.team.recipes import RECIPES, recipe_config, stored_train_config, with_path


def test_textbook_is_the_engines_defaults_and_society_only_overrides():
    assert recipe_config("textbook") == TrainConfig()
    society = recipe_config("society")
    assert society.learner.td_lambda > 0 == TrainConfig().learner.td_lambda
    changed = set(RECIPES["society"].overrides)
    assert changed == {
        "episodes", "max_updates", "learner.buffer_size", "learner.td_lambda",
        "learner.target_update_interval", "exploration.anneal_fraction",
    }  # fmt: skip
    # A run logged before recipes stored no train config: it was trained as society was
    # then, with ε falling over half the run.
    assert stored_train_config({}) == with_path(society, "exploration.anneal_fraction", 0.5)
    assert society.exploration.anneal_fraction == 0.2
    old = stored_train_config({"learner": {"td_lambda": 0.5}, "gone": 1})
    assert old.learner.td_lambda == 0.5 and old.episodes == society.episodes


def test_env_training_uses_textbook_and_a_flag_overrides_it(tmp_path: Path, capsys):
    out = tmp_path / "two_step.pt"
    argv = ["train", "--env", "core.qmix.games:two_step_game", "--episodes", "40",
            "--hidden", "8", "--td-lambda", "0.3", "--out", str(out), "--json"]  # fmt: skip
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["recipe"] == "textbook"
    ckpt = load_checkpoint(out)
    assert ckpt.meta["recipe"] == "textbook"
    stored = ckpt.resume["train_config"]
    assert stored["learner"]["td_lambda"] == 0.3
    assert stored["learner"]["buffer_size"] == TrainConfig().learner.buffer_size


def test_team_training_uses_the_society_recipe_and_stores_it(tmp_path: Path, capsys):
    out, db = tmp_path / "team.pt", tmp_path / "store.duckdb"
    argv = ["train", "--benchmark", "math", "--episodes", "16", "--hidden", "8",
            "--n-envs", "8", "--eval-episodes", "4", "--gamma", "0.9",
            "--out", str(out), "--db", str(db), "--json"]  # fmt: skip
    assert main(argv) == 0
    run_id = json.loads(capsys.readouterr().out)["run_id"]
    config = get_run(db, run_id).config
    society = recipe_config("society")
    assert config["recipe"] == "society"
    assert config["train"]["learner"]["td_lambda"] == society.learner.td_lambda
    assert config["train"]["learner"]["gamma"] == 0.9 and config["train"]["episodes"] == 16
    assert load_checkpoint(out).meta["recipe"] == "society"


def test_an_unknown_recipe_is_one_sentence(tmp_path: Path, capsys):
    argv = ["train", "--benchmark", "math", "--recipe", "tuned", "--out", str(tmp_path / "x")]
    assert main(argv) == 2
    assert "--recipe must be one of textbook, society" in capsys.readouterr().err


def test_every_learner_setting_has_a_flag_and_help_shows_each_recipes_value(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    assert main(["train", "--help"]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    for field in fields(LearnerConfig):
        assert "--" + field.name.replace("_", "-") in shown or field.name == "double_q"
    assert "--double-q" in shown
    assert "(textbook 0.0; society 0.8; finetune 0.8)" in shown


def test_continuing_a_policy_on_a_real_model_defaults_to_the_finetune_recipe():
    from core.team.recipes import default_recipe

    assert default_recipe(env=False, backend="local", init=True) == "finetune"
    assert default_recipe(env=False, backend="openai", init=True) == "finetune"
    assert default_recipe(env=False, backend="sim", init=True) == "society"
    assert default_recipe(env=False, backend="local", init=False) == "society"
    assert default_recipe(env=True, backend="sim", init=False) == "textbook"
    finetune = recipe_config("finetune")
    # An update an episode from the first one: the prefill fills a batch before it.
    assert finetune.learner.updates_per_episode >= 1 and finetune.max_updates == 0
    assert finetune.prefill_episodes >= finetune.learner.batch_size
    assert finetune.n_envs <= 4


@pytest.mark.parametrize(
    ("flag", "value", "says"),
    [
        ("--tau", "1.5", "--tau must be a finite number >= 0 and <= 1, not 1.5."),
        ("--policy-ema", "-0.1", "--policy-ema must be a finite number >= 0 and <= 1, not -0.1."),
        ("--lr-decay-to", "0", "--lr-decay-to must be a finite number > 0 and <= 1, not 0.0."),
    ],
)
def test_a_stabiliser_setting_out_of_range_is_one_sentence(
    tmp_path: Path, capsys, flag, value, says
):
    argv = ["train", "--benchmark", "math", flag, value, "--out", str(tmp_path / "x.pt")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert says in " ".join(err.split()) and not (tmp_path / "x.pt").exists()
