"""The robot run's learner in this process: updates as owed and no more, weights, saves, resume."""

import dataclasses

import numpy as np
import pytest
import torch
from robot_learner_helpers import (
    CHUNK_LEN,
    DIMS,
    UPDATE_EPOCH,
    WARMUP_UPDATES,
    numbered_transition,
    owed_updates,
    warmup_config,
)

from rpent_agents.robot import LearnerService, LocalPolicy, RobotRunState
from rpent_agents.stage2 import Stage2Config, Stage2Learner, act_chunks, save_run
from rpent_agents.stage2.checkpoint import actor_gate
from rpent_agents.stage2.demo_transitions import save_transitions

pytestmark = pytest.mark.slow


def run_all_owed(service, max_updates=8):
    """Update until nothing is owed; returns how many ran."""
    total = 0
    while ran := service.update_some(max_updates):
        assert ran <= max_updates
        total += ran
    return total


def test_warmup_schedule_runs_what_it_owes_and_no_more(tmp_path):
    service = LearnerService.fresh(warmup_config(), DIMS, tmp_path / "run")
    assert service.update_some(100) == 0  # nothing stored: nothing owed
    for count in range(1, 7):
        assert service.add([numbered_transition(count)]) == 1
        assert service.status().updates_owed == owed_updates(count) - service.status().updates
        run_all_owed(service)
        assert service.status().updates == owed_updates(count)
        assert service.status().actor_ready == (owed_updates(count) >= WARMUP_UPDATES)
    assert service.update_some(100) == 0


def test_a_fresh_run_starts_from_its_demonstrations_before_the_first_episode(tmp_path):
    demos = [
        dataclasses.replace(numbered_transition(number), intervened=np.ones(CHUNK_LEN, bool))
        for number in range(6)
    ]
    save_transitions(demos, DIMS, tmp_path / "demos.npz")
    config = warmup_config(
        demo_transitions=tmp_path / "demos.npz", demo_pretrain_updates=WARMUP_UPDATES
    )
    service = LearnerService.fresh(config, DIMS, tmp_path / "run")
    status = service.status()
    assert (status.replay_size, status.transitions, status.updates) == (6, 6, WARMUP_UPDATES)
    assert status.actor_ready and service.weights().actor_ready and status.updates_owed == 0
    assert "critic/critic_loss" in status.scalars
    resumed = LearnerService.resume(tmp_path / "run")  # the first save holds them
    assert (resumed.status().replay_size, resumed.status().updates) == (6, WARMUP_UPDATES)
    service.add([numbered_transition(6)])  # the warm-up ran on the demonstrations
    assert service.status().updates_owed == 0
    service.add([numbered_transition(7)])
    assert service.status().updates_owed == UPDATE_EPOCH


def test_without_the_schedule_each_stored_transition_earns_an_update_epoch(tmp_path):
    config = warmup_config(update_schedule=False, learning_starts=2, update_epoch=8)
    service = LearnerService.fresh(config, DIMS, tmp_path / "run")
    service.add([numbered_transition(1)])
    assert service.update_some(100) == 0 and service.status().actor_ready  # acts at once
    service.add([numbered_transition(2)])
    assert service.update_some(5) == 5 and service.update_some(100) == 3
    service.add([numbered_transition(number) for number in (3, 4, 5)])
    assert run_all_owed(service) == 24 and service.status().updates == 32


def test_weights_change_version_with_the_actor_and_load_into_the_acting_copy(tmp_path):
    service = LearnerService.fresh(warmup_config(), DIMS, tmp_path / "run")
    first = service.weights()
    assert (first.version, first.update_step, first.actor_ready) == (1, 0, False)
    assert service.weights() is first  # no update: the same weights
    service.add([numbered_transition(number) for number in range(4)])
    run_all_owed(service)
    trained = service.weights()
    assert trained.version == 2 and trained.actor_ready
    actor = service.acting_spec.build_actor()
    trained.load_into(actor)
    obs = {
        "z_rl": np.full((2, DIMS.z_dim), 0.3, np.float32),
        "proprio": np.full((2, DIMS.proprio_dim), -0.2, np.float32),
        "ref_chunk": np.full((2, DIMS.ref_chunk_len, DIMS.action_dim), 0.1, np.float32),
    }
    np.testing.assert_array_equal(
        act_chunks(actor, obs, deterministic=True),
        service.learner.act(obs, deterministic=True),
    )
    assert actor.noise_std == service.learner.config.actor_noise_std
    assert trained.critic_state_dict is None and service.acting_spec.build_critic() is None


def random_obs(batch, seed):
    rng = np.random.default_rng(seed)
    return {
        "z_rl": rng.normal(size=(batch, DIMS.z_dim)).astype(np.float32),
        "proprio": rng.normal(size=(batch, DIMS.proprio_dim)).astype(np.float32),
        "ref_chunk": rng.uniform(-1, 1, (batch, DIMS.ref_chunk_len, DIMS.action_dim)).astype(
            np.float32
        ),
    }


def test_the_robot_loop_picks_the_chunk_rpent_stage2_picks_with_q_ranked_acting(tmp_path):
    config = warmup_config(acting_samples=4, acting_sample_std=0.5, eval_consensus=True)
    service = LearnerService.fresh(config, DIMS, tmp_path / "run")
    service.add([numbered_transition(number) for number in range(6)])
    run_all_owed(service)
    weights = service.weights()
    assert weights.critic_state_dict is not None and service.acting_spec.ranks_chunks
    policy = LocalPolicy(service.acting_spec)
    policy.load(weights)
    learner, obs = service.learner, random_obs(32, seed=3)
    # deterministic: the mean and the fixed perturbations, consensus over the heads
    chosen = policy.act(obs, deterministic=True)
    np.testing.assert_array_equal(chosen, learner.act(obs, deterministic=True))
    # exploring: the same noise and perturbations from the same random state
    learner.noise_generator.manual_seed(11)
    exploring = policy.act(obs, deterministic=False, generator=torch.Generator().manual_seed(11))
    np.testing.assert_array_equal(exploring, learner.act(obs, deterministic=False))
    # the critic did choose: some chunks are not the actor's own
    assert not np.array_equal(exploring, act_chunks(policy.actor, obs, deterministic=True))


def test_end_episode_saves_a_set_that_resumes(tmp_path):
    run_dir = tmp_path / "run"
    service = LearnerService.fresh(warmup_config(), DIMS, run_dir)
    assert LearnerService.resume(run_dir).run_state == RobotRunState()  # saved from the start
    service.add([numbered_transition(number) for number in range(5)])
    run_all_owed(service)
    state = RobotRunState(env_steps=50, episodes=1, failures=1, seeds_handed_out=1)
    assert service.end_episode(state) == 1
    resumed = LearnerService.resume(run_dir)
    assert resumed.run_state == state and resumed.saved_episodes == 1
    assert resumed.status().updates == service.status().updates
    assert len(resumed.learner.replay) == 5 and resumed.update_some(100) == 0
    for name, values in service.weights().state_dict.items():
        np.testing.assert_array_equal(resumed.weights().state_dict[name], values)


def test_a_last_save_after_final_updates_keeps_them(tmp_path):
    run_dir = tmp_path / "run"
    service = LearnerService.fresh(warmup_config(), DIMS, run_dir)
    service.add([numbered_transition(number) for number in range(5)])
    owed = run_all_owed(service)
    before = {name: values.copy() for name, values in service.weights().state_dict.items()}
    state = RobotRunState(env_steps=50, episodes=1, successes=1, seeds_handed_out=1)
    assert service.end_episode(state, extra_updates=7) == 1  # nothing was owed: 7 more
    resumed = LearnerService.resume(run_dir)
    assert resumed.status().updates == owed + 7 and resumed.update_some(100) == 0
    changed = resumed.weights().state_dict
    assert any(not np.array_equal(changed[name], values) for name, values in before.items())


def test_the_gate_of_a_fresh_run_is_saved_with_the_actor_and_kept_by_a_resumed_one(tmp_path):
    run_dir, gate = tmp_path / "run", {"trigger_mode": "always_on", "missed_grasp_chunks": 4}
    service = LearnerService.fresh(warmup_config(), DIMS, run_dir, gate=gate)
    assert actor_gate(run_dir) == gate
    resumed = LearnerService.resume(run_dir)
    resumed.end_episode(RobotRunState(episodes=1, env_steps=10, failures=1, seeds_handed_out=1))
    assert resumed.gate == service.gate == gate and actor_gate(run_dir) == gate


def test_refuses_to_overwrite_a_run_and_to_resume_one_without_robot_counters(tmp_path):
    LearnerService.fresh(warmup_config(), DIMS, tmp_path / "robot")
    with pytest.raises(FileExistsError, match="holds a run"):
        LearnerService.fresh(warmup_config(), DIMS, tmp_path / "robot")
    save_run(Stage2Learner(Stage2Config(device="cpu"), DIMS), tmp_path / "stage2")
    with pytest.raises(ValueError, match="without robot counters"):
        LearnerService.resume(tmp_path / "stage2")
    with pytest.raises(ValueError, match=r"\['gripper_steps'\] are unknown"):
        RobotRunState.from_dict({"episodes": 1, "gripper_steps": 3})
