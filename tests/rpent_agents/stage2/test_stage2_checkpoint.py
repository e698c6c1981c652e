"""Resuming a whole run from its folder, and loading one weights file."""

import numpy as np
import pytest
import torch
from stage2_helpers import CHUNK_LEN, DIMS, transition

from rpent_agents.stage2 import (
    RLTDims,
    Stage2Config,
    Stage2Learner,
    load_weights,
    resume_run,
    save_run,
    save_weights,
)

SMALL = Stage2Config(
    chunk_len=CHUNK_LEN, hidden_dim=32, batch_size=8, learning_starts=30, warmup_updates=5,
    max_updates_per_train_step=3, device="cpu",
)  # fmt: skip


def _trained_learner():
    learner = Stage2Learner(SMALL, DIMS)
    learner.add_transitions(transition(value) for value in np.linspace(-1, 1, 40))
    learner.train_step()
    return learner


def _parameters(learner):
    modules = (learner.actor, learner.critic, learner.target_critic)
    return torch.cat([p.detach().flatten() for m in modules for p in m.parameters()])


def test_a_resumed_run_continues_exactly_like_the_uninterrupted_one(tmp_path):
    learner = _trained_learner()
    save_run(learner, tmp_path / "run", extra={"env_steps": 1234, "episodes": [1, 2]})
    resumed, extra = resume_run(tmp_path / "run")
    assert extra == {"env_steps": 1234, "episodes": [1, 2]}
    assert (resumed.update_step, len(resumed.replay), resumed.replay.total_added) == (3, 40, 40)
    assert resumed.schedule.state_dict() == learner.schedule.state_dict()
    for run in (learner, resumed):
        run.add_transitions(transition(0.25) for _ in range(5))
    assert resumed.train_step() == learner.train_step()
    assert torch.equal(_parameters(resumed), _parameters(learner))
    assert resumed.ready_for_online and learner.ready_for_online


def test_saving_again_replaces_the_folder_contents(tmp_path):
    learner = _trained_learner()
    save_run(learner, tmp_path / "run")
    learner.run_updates(2)
    save_run(learner, tmp_path / "run")
    assert resume_run(tmp_path / "run")[0].update_step == 5
    assert sorted(path.name for path in tmp_path.iterdir()) == ["run"]


def test_resume_names_the_missing_file(tmp_path):
    (tmp_path / "run").mkdir()
    with pytest.raises(FileNotFoundError, match="stage2_config.json is missing"):
        resume_run(tmp_path / "run")


def test_a_weights_file_restores_the_policy_and_critic(tmp_path):
    learner = _trained_learner()
    save_weights(learner, tmp_path / "weights.pt")
    fresh = Stage2Learner(Stage2Config(chunk_len=CHUNK_LEN, hidden_dim=32, seed=7), DIMS, "cpu")
    load_weights(fresh, tmp_path / "weights.pt")
    obs = {"z_rl": np.ones((2, 4)), "proprio": np.ones((2, 2)), "ref_chunk": np.ones((2, 3, 2))}
    np.testing.assert_array_equal(fresh.act(obs, True), learner.act(obs, True))
    critic_pairs = zip(fresh.critic.parameters(), fresh.target_critic.parameters(), strict=True)
    assert all(torch.equal(online, target) for online, target in critic_pairs)
    save_run(learner, tmp_path / "run")
    load_weights(fresh, tmp_path / "run")


def test_a_weights_file_for_other_sizes_or_another_file_is_refused(tmp_path):
    learner = _trained_learner()
    save_weights(learner, tmp_path / "weights.pt")
    other = Stage2Learner(Stage2Config(chunk_len=CHUNK_LEN, hidden_dim=32), RLTDims(5, 2, 3, 2))
    with pytest.raises(ValueError, match="holds networks for dims"):
        load_weights(other, tmp_path / "weights.pt")
    torch.save({"actor": {}}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="not a Stage 2 weights file"):
        load_weights(learner, tmp_path / "other.pt")
