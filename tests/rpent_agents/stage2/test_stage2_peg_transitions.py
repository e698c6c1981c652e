"""Transitions built from the real RLT peg stack (tiny untrained VLA) train the learner."""

import gymnasium as gym
import numpy as np
import pytest
from stage2_helpers import tiny_featurizer

import rpent_envs
from rpent_agents.stage2 import (
    ChunkStats,
    RLTDims,
    Stage2Config,
    Stage2Learner,
    build_transition,
)
from rpent_envs.maniskill.expert import PegInsertionExpert
from wrappers.policy_switch import PolicySwitch
from wrappers.rlt import RLTObservation
from wrappers.takeover import ExpertTakeover, as_step_policy
from wrappers.triggers import AutoGate

pytestmark = pytest.mark.sim

H, ACTION_DIM = 10, 8


def test_critical_phase_actor_and_expert_chunks_become_replay_transitions():
    env = gym.make(rpent_envs.PEG_INSERTION_ID, obs_mode="rgb", image_size=32)
    expert = PegInsertionExpert(env)
    switch = PolicySwitch(
        RLTObservation(env, tiny_featurizer(), chunk_len=H),
        AutoGate(near_hole_x_min=-0.10),
        reference=lambda observation: as_step_policy(expert),  # scripted stand-in for a VLA
        expert_takeover=ExpertTakeover(expert),
    )
    config = Stage2Config(hidden_dim=32, batch_size=8, learning_starts=1, warmup_updates=2)
    learner = Stage2Learner(config, RLTDims.from_observation_space(switch.observation_space))
    hold = np.zeros((H, ACTION_DIM), np.float32)
    hold[:, -1] = -1.0  # the actor holds the grasped peg still until the expert takes over
    obs, _ = switch.reset(seed=0)
    chunk_stats, stored = ChunkStats(), []
    for _ in range(20):
        next_obs, _, terminated, truncated, info = switch.step(hold.reshape(-1))
        item = build_transition(obs, next_obs, info, terminated, truncated, H)
        chunk_stats.record(info, item)
        if item is not None:
            stored.append((info["action_source"], item, obs))
        obs = next_obs
        if terminated or truncated:
            break
    env.close()
    sources = [source for source, _, _ in stored]
    assert sources[:3] == ["actor"] * 3 and set(sources[3:]) == {"expert"}
    _, actor_item, actor_obs = stored[0]
    np.testing.assert_array_equal(actor_item.action, hold)
    np.testing.assert_array_equal(actor_item.ref_chunk, actor_obs["ref_chunk"])
    assert not actor_item.intervened.any() and not actor_item.done
    _, last_item, _ = stored[-1]
    assert last_item.done and last_item.rewards.sum() == 1.0
    steps = int(info["chunk_len"])  # the success may end the chunk early
    assert last_item.intervened[:steps].all() and not last_item.intervened[steps:].any()
    np.testing.assert_array_equal(last_item.ref_chunk[:steps], info["executed_action"])
    assert learner.add_transitions(item for _, item, _ in stored) == len(stored)
    scalars = learner.train_step() | chunk_stats.scalars()
    assert scalars["train/rlt/critic_updates_run"] == 2.0
    assert scalars["train/replay/transition_count"] == len(stored)
    assert scalars["train/replay/intervention_rate"] > 0
