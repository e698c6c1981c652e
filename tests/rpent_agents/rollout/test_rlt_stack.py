"""`RPent/PegInsertion-RLT-v0`: peg env -> RLTObservation (default checkpoint) -> PolicySwitch."""

import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env

import rpent_envs
from rpent_agents.features.checkpoint import DEFAULT_CHECKPOINT_DIR, read_config

pytestmark = pytest.mark.sim

DEFAULT = read_config(DEFAULT_CHECKPOINT_DIR)


@pytest.fixture(scope="module")
def always_on_env():
    # Every chunk goes to the agent, so reset() returns at once whatever the base policy does.
    env = gym.make(rpent_envs.PEG_RLT_ID, trigger_mode="always_on")
    yield env
    env.close()


def wrapper_names(env):
    names = []
    while hasattr(env, "env"):
        names.append(type(env).__name__)
        env = env.env
    return names


def test_default_make_has_no_arguments_and_the_documented_spaces():
    env = gym.make("rpent_envs:RPent/PegInsertion-RLT-v0")
    try:
        names = wrapper_names(env.unwrapped.stack)
        assert names.index("PolicySwitch") < names.index("RLTObservation")
        assert env.get_wrapper_attr("skip_inactive") is True
        space = env.observation_space
        assert space["z_rl"].shape == (DEFAULT["rl_token"]["dim"],)
        assert space["proprio"].shape == (9,)
        assert space["ref_chunk"].shape == (DEFAULT["vla"]["chunk_len"], 8)
        assert env.action_space == gym.spaces.Box(-1, 1, (80,), np.float32)
        image_size = DEFAULT["vla"]["image_size"]
        peg_space = env.unwrapped.peg_env.observation_space
        assert peg_space["image"].shape == (image_size, image_size, 3)
    finally:
        env.close()


def test_actor_chunks_run_on_the_featurized_env(always_on_env):
    obs, info = always_on_env.reset(seed=0)
    assert obs in always_on_env.observation_space
    assert info["next_action_source"] == "actor" and info["skipped_chunks"] == 0
    action = np.zeros(80, np.float32)
    obs, reward, terminated, truncated, info = always_on_env.step(action)
    assert info["action_source"] == "actor" and info["chunk_len"] == 10
    np.testing.assert_array_equal(info["executed_action"], np.zeros((10, 8), np.float32))
    assert len(info["chunk_rewards"]) == 10 and obs in always_on_env.observation_space
    rlt = always_on_env.get_wrapper_attr("raw_observation")
    np.testing.assert_array_equal(obs["proprio"], rlt["state"])


def test_checkers_pass(always_on_env):
    gym_check_env(always_on_env, skip_render_check=True)
    sb3_check_env(always_on_env, warn=False)


@pytest.mark.subprocess
def test_importing_rpent_envs_does_not_import_rpent_agents():
    code = "import sys, rpent_envs; assert 'rpent_agents' not in sys.modules"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_the_gate_settings_round_trip_and_name_a_field_that_is_no_gate_field():
    from rpent_agents.rollout.rlt_stack import PegRLTConfig

    rescue = PegRLTConfig(missed_grasp_chunks=4, chunk_len=5)
    assert rescue.gate_settings() == {"trigger_mode": "auto", "missed_grasp_chunks": 4}
    adopted = PegRLTConfig().with_gate_settings(rescue.gate_settings())
    assert adopted.make_gate().missed_grasp_chunks == 4 and adopted.chunk_len == 10
    with pytest.raises(ValueError, match=r"\['chunk_len'\] are not among"):
        PegRLTConfig().with_gate_settings({"chunk_len": 5})
