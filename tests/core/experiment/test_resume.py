"""``train --resume`` keeps every logged episode and continues the numbering after the last.

Each test leaves a training run in a real store exactly as a SIGKILL does (episodes logged,
the run interrupted, with or without a checkpoint that is older than its last episodes),
then resumes it through :func:`train_team`. The CLI's real SIGKILL is in
tests/core/test_cli_resume.py.
"""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path

import pytest
import torch

from core.errors import UserError
from core.experiment import TeamOptions, run_policy, train_team
from core.experiment.train import restore_state, save_training_checkpoint
from core.qmix.checkpoint import load_checkpoint
from core.qmix.encoders import AgentNetConfig
from core.qmix.env import EnvShapes
from core.qmix.training import TrainConfig, build_state
from core.store.queries import get_run
from core.store.writer import LoggerConfig, RunLogger
from core.team.env import TeamEnv
from core.team.topologies import make_policy
from tests.core.logged import logged_episodes
from tests.core.torch_threads import one_torch_thread  # noqa: F401

OPTS = TeamOptions(benchmark="math", seed=0)
CONFIG = TrainConfig(
    episodes=40, seed=0, device="cpu", n_envs=8, max_updates=10,
    agent=AgentNetConfig(gnn_hidden=8, gru_hidden=8, q_hidden=8),
)  # fmt: skip
LOGGED = 16
"""Episodes the killed run logged."""


def killed_run(db: Path, out: Path, checkpoint_after: int | None) -> str:
    """A training run that logged :data:`LOGGED` episodes and then died; its checkpoint (if
    any) holds the learner after episode ``checkpoint_after``."""
    records = run_policy(OPTS, make_policy("full"), LOGGED, seed=0)
    config = {"team": asdict(OPTS), "train": asdict(CONFIG), "out": str(out)}
    logger = RunLogger(db, "train", config, policy="qmix", settings=LoggerConfig(background=False))
    if checkpoint_after is None:
        logger.log_episodes(records)
    else:
        env = TeamEnv(OPTS, "train")
        state = build_state(EnvShapes.of(env), CONFIG)
        env.close()
        state.episodes_done = checkpoint_after + 1
        save_training_checkpoint(out, state, CONFIG, OPTS, None, {"run_id": logger.run_id})
        logger.log_episodes(records[: checkpoint_after + 1])
        logger.set_checkpoint(out, checkpoint_after)
        logger.log_episodes(records[checkpoint_after + 1 :])
    logger.close("interrupted")
    return logger.run_id


@pytest.mark.parametrize("checkpoint_after", [None, 7], ids=["no checkpoint", "older checkpoint"])
def test_resume_keeps_logged_episodes_and_continues_after_them(
    tmp_path: Path, checkpoint_after: int | None
) -> None:
    db, out = tmp_path / "s.duckdb", tmp_path / "m.pt"
    run_id = killed_run(db, out, checkpoint_after)
    before = logged_episodes(db, run_id)
    assert [e[0] for e in before] == list(range(LOGGED))

    outcome = train_team(OPTS, CONFIG, None, db=db, resume_run=run_id, eval_episodes=0)

    after = logged_episodes(db, run_id)
    assert outcome.run_id == run_id and outcome.checkpoint == out and out.is_file()
    assert [e[0] for e in after] == list(range(CONFIG.episodes))  # no gap, no duplicate
    assert after[:LOGGED] == before  # the episodes logged before the kill are untouched
    assert outcome.state.episodes_done == CONFIG.episodes
    info = get_run(db, run_id)
    assert info.status == "finished" and info.episodes == CONFIG.episodes
    assert info.checkpoint_episode == CONFIG.episodes - 1


def test_resume_refuses_a_run_whose_checkpoint_file_is_gone(tmp_path: Path) -> None:
    db, out = tmp_path / "s.duckdb", tmp_path / "m.pt"
    run_id = killed_run(db, out, checkpoint_after=7)
    out.unlink()
    with pytest.raises(UserError, match="checkpoint .* is missing"):
        train_team(OPTS, CONFIG, None, db=db, resume_run=run_id, eval_episodes=0)
    assert len(logged_episodes(db, run_id)) == LOGGED


def test_the_averaged_policy_is_what_evaluates_and_saves_and_resume_keeps_both(tmp_path: Path):
    """With ``policy_ema`` the greedy policy (evaluation, checkpoint weights) is the average;
    resuming restores the average and the online weights the optimiser trains, apart."""
    config = replace(CONFIG, learner=replace(CONFIG.learner, policy_ema=0.05))
    shapes = EnvShapes(n_agents=2, n_actions=3, obs_dim=5, state_dim=7, max_steps=3)
    state = build_state(shapes, config)
    with torch.no_grad():  # online weights that differ from their average
        for p in list(state.agent.parameters()) + list(state.mixer.parameters()):
            p.add_(1.0)
    greedy = state.greedy_policy()
    assert greedy.agent is state.learner.policy_agent is not state.agent
    assert greedy.mixer is state.learner.policy_mixer and greedy.epsilon == 0.0
    out = tmp_path / "ema.pt"
    save_training_checkpoint(out, state, config, OPTS, None, {})
    saved = load_checkpoint(out).agent.state_dict()
    for name, value in state.learner.policy_agent.state_dict().items():
        assert torch.equal(saved[name], value)
    back = restore_state(out, shapes, config)
    for mine, theirs in ((back.agent, state.agent), (back.learner.policy_agent, greedy.agent)):
        for a, b in zip(mine.parameters(), theirs.parameters(), strict=True):
            assert torch.equal(a, b)
