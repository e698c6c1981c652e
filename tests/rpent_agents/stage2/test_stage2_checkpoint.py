"""Resuming a whole run from its folder, and loading one weights file."""

import dataclasses

import numpy as np
import pytest
import torch
from stage2_helpers import CHUNK_LEN, DIMS, transition

from rpent_agents.stage2 import (
    RLTDims,
    Stage2Config,
    Stage2Learner,
    actor_gate,
    load_actor,
    load_weights,
    resume_run,
    save_run,
    save_weights,
)

SMALL = Stage2Config(
    chunk_len=CHUNK_LEN, hidden_dim=32, batch_size=8, learning_starts=30, warmup_updates=5,
    max_updates_per_train_step=3, device="cpu",
)  # fmt: skip


AVERAGED = dataclasses.replace(SMALL, acting_actor_tau=0.25)
"""SMALL with a Polyak-averaged acting actor."""
ACTING_DURING_UPDATES = dataclasses.replace(SMALL, act_during_updates=True)
"""SMALL acting on copies of the networks from before the latest train step."""
OBS = {"z_rl": np.ones((2, 4)), "proprio": np.ones((2, 2)), "ref_chunk": np.ones((2, 3, 2))}


def _trained_learner(config=SMALL):
    learner = Stage2Learner(config, DIMS)
    learner.add_transitions(transition(value) for value in np.linspace(-1, 1, 40))
    learner.train_step()
    return learner


def _parameters(learner):
    modules = (learner.actor, learner.acting_actor, learner.critic, learner.target_critic)
    return torch.cat([p.detach().flatten() for m in modules for p in m.parameters()])


@pytest.mark.parametrize(
    "config",
    [SMALL, AVERAGED, ACTING_DURING_UPDATES],
    ids=["trained-actor", "averaged-actor", "acting-during-updates"],
)
def test_a_resumed_run_continues_exactly_like_the_uninterrupted_one(tmp_path, config):
    learner = _trained_learner(config)
    save_run(learner, tmp_path / "run", extra={"env_steps": 1234, "episodes": [1, 2]})
    resumed, extra = resume_run(tmp_path / "run")
    assert extra == {"env_steps": 1234, "episodes": [1, 2]}
    assert (resumed.update_step, len(resumed.replay), resumed.replay.total_added) == (3, 40, 40)
    assert resumed.schedule.state_dict() == learner.schedule.state_dict()
    # training's next chunks: noise from the restored generator, on the actor that acts
    np.testing.assert_array_equal(resumed.act(OBS), learner.act(OBS))
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


def test_a_run_saved_before_the_acting_actor_existed_resumes_with_its_actor(tmp_path):
    learner = _trained_learner()
    save_run(learner, tmp_path / "run")
    state = torch.load(tmp_path / "run" / "learner_state.pt", weights_only=True)
    del state["acting_actor"]
    torch.save(state, tmp_path / "run" / "learner_state.pt")
    resumed, _ = resume_run(tmp_path / "run")
    assert torch.equal(_parameters(resumed), _parameters(learner))


@pytest.mark.parametrize("config", [SMALL, AVERAGED], ids=["trained-actor", "averaged-actor"])
def test_a_weights_file_restores_the_policy_and_critic(tmp_path, config):
    # the file holds the policy that acts deterministically: the average when there is one
    learner = _trained_learner(config)
    save_weights(learner, tmp_path / "weights.pt")
    fresh = Stage2Learner(Stage2Config(chunk_len=CHUNK_LEN, hidden_dim=32, seed=7), DIMS, "cpu")
    load_weights(fresh, tmp_path / "weights.pt")
    np.testing.assert_array_equal(fresh.act(OBS, True), learner.act(OBS, True))
    critic_pairs = zip(fresh.critic.parameters(), fresh.target_critic.parameters(), strict=True)
    assert all(torch.equal(online, target) for online, target in critic_pairs)
    save_run(learner, tmp_path / "run")
    load_weights(fresh, tmp_path / "run")


def test_loaded_weights_are_what_training_acts_with_when_it_acts_during_updates(tmp_path):
    learner = _trained_learner()
    save_weights(learner, tmp_path / "weights.pt")
    lagged = dataclasses.replace(ACTING_DURING_UPDATES, actor_noise_std=0.0, seed=7)
    fresh = Stage2Learner(lagged, DIMS)
    load_weights(fresh, tmp_path / "weights.pt")
    np.testing.assert_array_equal(fresh.act(OBS), learner.act(OBS, True))  # noise 0


def test_the_gate_the_actor_was_trained_with_travels_with_its_weights(tmp_path):
    learner = _trained_learner()
    gate = {"trigger_mode": "auto", "missed_grasp_chunks": 4}
    save_run(learner, tmp_path / "run", gate=gate)
    assert load_actor(tmp_path / "run", DIMS, CHUNK_LEN).gate == gate
    assert actor_gate(tmp_path / "run" / "weights.pt") == gate
    # a file saved before the gate was stored: no gate of its own (the stack's default)
    weights = torch.load(tmp_path / "run" / "weights.pt", weights_only=True)
    del weights["gate"]
    torch.save(weights, tmp_path / "old.pt")
    assert load_actor(tmp_path / "old.pt", DIMS, CHUNK_LEN).gate == {}
    assert actor_gate(tmp_path / "old.pt") == {}


def test_an_actor_saved_before_its_warm_up_ended_is_not_ready_to_drive(tmp_path):
    learner = Stage2Learner(dataclasses.replace(SMALL, warmup_updates=1000), DIMS)
    save_weights(learner, tmp_path / "early.pt")
    assert not load_actor(tmp_path / "early.pt", DIMS, CHUNK_LEN).ready
    ready = _trained_learner()
    ready.run_updates(SMALL.warmup_updates)  # its warm-up done
    assert ready.ready_for_online
    save_weights(ready, tmp_path / "ready.pt")
    assert load_actor(tmp_path / "ready.pt", DIMS, CHUNK_LEN).ready
    # a file saved before readiness was stored: ready, as it was used then
    weights = torch.load(tmp_path / "early.pt", weights_only=True)
    del weights["actor_ready"]
    torch.save(weights, tmp_path / "old.pt")
    assert load_actor(tmp_path / "old.pt", DIMS, CHUNK_LEN).ready


def test_a_weights_file_acts_with_the_q_ranking_it_was_trained_with(tmp_path):
    ranked = dataclasses.replace(SMALL, acting_samples=6, acting_sample_std=0.5)
    learner = _trained_learner(ranked)
    save_weights(learner, tmp_path / "weights.pt")
    actor = load_actor(tmp_path / "weights.pt", DIMS, CHUNK_LEN)
    assert (actor.samples, actor.sample_std) == (6, 0.5) and actor.q_filter is not None
    np.testing.assert_allclose(actor.act(OBS), learner.act(OBS, True), atol=1e-6)


def test_a_weights_file_for_other_sizes_or_another_file_is_refused(tmp_path):
    learner = _trained_learner()
    save_weights(learner, tmp_path / "weights.pt")
    other = Stage2Learner(Stage2Config(chunk_len=CHUNK_LEN, hidden_dim=32), RLTDims(5, 2, 3, 2))
    with pytest.raises(ValueError, match="holds networks for dims"):
        load_weights(other, tmp_path / "weights.pt")
    torch.save({"actor": {}}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="not a Stage 2 weights file"):
        load_weights(learner, tmp_path / "other.pt")


def test_a_non_finite_weight_is_refused_at_save(tmp_path):
    learner = _trained_learner()
    save_run(learner, tmp_path / "run")
    name = next(iter(learner.critic.state_dict()))
    with torch.no_grad():
        learner.critic.state_dict()[name].view(-1)[1] = float("nan")
    tensor = rf"tensor 'critic\.{name}' holds nan at \[0, 0, 1\]"  # (heads, out, in)
    with pytest.raises(ValueError, match=rf"saving the Stage 2 run to .*{tensor}"):
        save_run(learner, tmp_path / "run")
    with pytest.raises(ValueError, match=rf"saving Stage 2 weights to .*{tensor}"):
        save_weights(learner, tmp_path / "weights.pt")
    assert not (tmp_path / "weights.pt").exists()
    resumed, _ = resume_run(tmp_path / "run")  # the earlier save is whole
    assert torch.isfinite(_parameters(resumed)).all()


def test_a_non_finite_weight_on_disk_is_refused_at_load(tmp_path):
    learner = _trained_learner()
    learner.skipped_steps["critic"].fill_(3.0)
    run = tmp_path / "run"
    save_run(learner, run)
    skipped = resume_run(run)[0].skipped_step_scalars()
    assert skipped["train/rlt/skipped_critic_steps"] == 3.0  # the counts resume too
    for file, part in (("learner_state.pt", "target_critic"), ("weights.pt", "actor")):
        path = run / file
        saved = torch.load(path, weights_only=True)
        name = next(iter(saved[part]))
        saved[part][name].view(-1)[0] = float("inf")
        torch.save(saved, path)
    with pytest.raises(ValueError, match=r"learner_state.pt: tensor 'target_critic\..*' holds inf"):
        resume_run(run)
    with pytest.raises(ValueError, match=r"weights.pt: tensor 'actor\..*' holds inf"):
        load_weights(learner, run)
