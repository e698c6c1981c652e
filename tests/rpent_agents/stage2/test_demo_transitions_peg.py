"""A collected expert episode converts to the transitions the live RLT env gives for it."""

import gymnasium as gym
import numpy as np
import pytest
from stage2_helpers import tiny_featurizer

import rpent_envs
from rpent_agents.stage1.collect import rollout_expert
from rpent_agents.stage1.frame_cache import cache_from_episodes
from rpent_agents.stage2 import build_transition
from rpent_agents.stage2.demo_transitions import demo_transitions
from wrappers.rlt import RLTObservation

pytestmark = [pytest.mark.sim, pytest.mark.subprocess]

H, SEED = 10, 1000


def live_transitions(actions, featurizer):
    """The same episode replayed through the RLT wrapper, its chunks stored as expert ones."""
    env = RLTObservation(
        gym.make(rpent_envs.PEG_INSERTION_ID, obs_mode="rgb", image_size=32), featurizer, H
    )
    obs, _ = env.reset(seed=SEED)
    transitions, done = [], False
    for start in range(0, len(actions), H):
        next_obs, _, terminated, truncated, info = env.step_chunk(actions[start : start + H])
        info |= {"record_transition": True, "intervene_flag": True}
        transitions.append(
            build_transition(obs, next_obs, info, terminated, truncated, H, True, "observed")
        )
        obs, done = next_obs, terminated or truncated
        if done:
            break
    env.close()
    return transitions, done


def test_an_expert_episode_converts_as_the_live_env_stores_it():
    env = gym.make(rpent_envs.PEG_INSERTION_ID, obs_mode="rgb", image_size=32)
    frames, success = rollout_expert(env, SEED)
    env.close()
    assert success
    cache, featurizer = cache_from_episodes([frames]), tiny_featurizer()
    demos = demo_transitions(cache, featurizer, H, "observed")
    live, done = live_transitions(cache.actions, featurizer)
    assert done and len(live) == len(demos) == -(-len(frames) // H)
    for index, (demo, expected) in enumerate(zip(demos, live, strict=True)):
        fields = ["z_rl", "proprio", "ref_chunk", "action", "rewards", "intervened"]
        if index < len(demos) - 1:  # the cache lacks the observation after the last step
            fields += ["next_z_rl", "next_proprio", "next_ref_chunk"]
        for name in fields:
            np.testing.assert_allclose(
                getattr(demo, name), getattr(expected, name), atol=1e-5, err_msg=name
            )
        assert demo.done == expected.done
