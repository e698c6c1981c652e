"""`RPent/Franka-v0` logic on the in-memory backend: spaces, safety, timing, faults, success."""

import importlib.util
import logging
import subprocess
import sys
import time

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env
from hypothesis import given, settings
from hypothesis import strategies as st
from stable_baselines3.common.env_checker import check_env as sb3_check_env

import rpent_envs
from rpent_envs.franka.backend import FrankaConnectionError, FrankaControlError
from rpent_envs.franka.camera import square_resize
from rpent_envs.franka.config import FrankaConfig
from rpent_envs.franka.env import FrankaEnv
from rpent_envs.franka.memory_backend import HOME_POSE, MemoryFrankaBackend
from rpent_envs.franka.pose import Pose

TARGET_M = np.array([0.5, 0.0, 0.2])
BOX_M = np.array([0.1, 0.1, 0.1])


def make_env(**kwargs):
    backend = MemoryFrankaBackend()
    env = FrankaEnv(backend=backend, **{"period_s": 0.0, **kwargs})
    return env, backend


def axis_action(axis, value=1.0):
    action = np.zeros(7, np.float32)
    action[axis] = value
    return action


class SolidColourCamera:
    def __init__(self, size):
        self.frames = 0
        self.size = size
        self.closed = False

    def read_rgb(self):
        self.frames += 1
        return np.full((self.size, self.size, 3), self.frames % 256, np.uint8)

    def close(self):
        self.closed = True


def test_registered_nondeterministic_and_passes_both_checkers():
    env = gym.make(rpent_envs.FRANKA_ID, backend="memory", period_s=0.0)
    assert env.spec.nondeterministic is True and env.spec.max_episode_steps == 300
    assert env.spec.disable_env_checker is True  # checked here instead
    gym_check_env(env.unwrapped, skip_render_check=True)
    sb3_check_env(env.unwrapped)
    env.close()


@pytest.mark.subprocess
def test_made_without_import_and_without_loading_robot_libraries():
    code = (
        "import sys, gymnasium as gym\n"
        "gym.make('rpent_envs:RPent/Franka-v0', backend='memory').reset(seed=0)\n"
        "print(sorted({'franky', 'franky_sim', 'mujoco'} & set(sys.modules)))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "[]", result.stderr


def test_spaces_observation_and_instruction():
    env, _ = make_env(instruction="put the peg in the hole")
    obs, info = env.reset(seed=0)
    assert env.action_space == gym.spaces.Box(-1, 1, (7,), np.float32)
    assert set(env.observation_space.spaces) == {"state"} and obs in env.observation_space
    state = obs["state"]
    np.testing.assert_allclose(state[:3], TARGET_M + [0, 0, 0.05], atol=1e-6)  # above target
    np.testing.assert_allclose(state[3:12], 0.0, atol=1e-6)  # target orientation, at rest
    assert state[12] == pytest.approx(0.08)  # gripper opened at reset
    assert env.task_description == info["task"] == "put the peg in the hole"
    assert info["success"] is False and info["is_success"] is False
    assert info["control_error"] is None and info["box_clipped"] is False


def test_reset_lifts_straight_up_then_moves_above_the_target():
    env, backend = make_env()
    start = HOME_POSE.moved_by(np.array([0.0, 0.1, -0.4]), np.zeros(3))  # low, off to the side
    backend.tcp_pose = start
    env.reset(seed=0)
    lift, reset_pose = backend.commanded_poses
    np.testing.assert_allclose(lift.position_m, [*start.position_m[:2], 0.25])
    np.testing.assert_allclose(lift.quat_xyzw, start.quat_xyzw)
    np.testing.assert_allclose(reset_pose.position_m, TARGET_M + [0, 0, 0.05], atol=1e-12)


def test_seeded_reset_noise_is_reproducible_and_stays_in_the_box():
    env, _ = make_env(reset_noise_m=0.02, reset_noise_rad=0.1)
    first = [env.reset(seed=3)[0]["state"][:6] for _ in range(2)]
    other = env.reset(seed=4)[0]["state"][:6]
    np.testing.assert_array_equal(first[0], first[1])
    assert not np.allclose(first[0], other)
    assert np.all(np.abs(first[0][:3] - (TARGET_M + [0, 0, 0.05])) <= 0.02 + 1e-6)
    assert np.all(np.abs(first[0][3:6]) <= 0.1 + 1e-6)


@pytest.mark.parametrize("axis", range(6))
def test_each_action_axis_moves_the_commanded_pose_one_scale(axis):
    env, backend = make_env()
    before, _ = env.reset(seed=0)
    after, *_ = env.step(axis_action(axis, -0.5))
    moved = after["state"][:6] - before["state"][:6]
    scale = 0.02 if axis < 3 else 0.1
    np.testing.assert_allclose(moved, -0.5 * scale * np.eye(6)[axis], atol=1e-6)


def test_step_size_is_clamped_along_the_action_direction():
    env, _ = make_env(position_scale_m=0.1, max_step_m=0.03)
    before, _ = env.reset(seed=0)
    after, *_ = env.step(np.array([1, 1, 0, 0, 0, 0, 1], np.float32))
    moved_m = after["state"][:3] - before["state"][:3]
    np.testing.assert_allclose(moved_m, [0.03 / np.sqrt(2), 0.03 / np.sqrt(2), 0.0], atol=1e-6)


def test_targets_stop_at_the_box_and_info_says_so():
    env, backend = make_env()
    env.reset(seed=0)
    clipped = [env.step(axis_action(2, -1.0))[4]["box_clipped"] for _ in range(12)]
    assert clipped == [False] * 7 + [True] * 5  # from 0.25 m down 0.02 m a step, floor 0.1 m
    assert backend.tcp_pose.position_m[2] == pytest.approx(TARGET_M[2] - BOX_M[2])


@settings(max_examples=25, deadline=None)
@given(st.lists(st.lists(st.floats(-1e6, 1e6), min_size=7, max_size=7), max_size=40))
def test_no_action_sequence_commands_a_pose_outside_the_box(actions):
    env, backend = make_env(position_scale_m=0.05, rotation_scale_rad=0.4, max_step_rad=0.5)
    env.reset(seed=0)
    for action in actions:
        env.step(np.array(action, np.float32))
    assert all(env.box.contains(pose, tolerance=1e-7) for pose in backend.commanded_poses[1:])


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_actions_are_refused_before_anything_moves(bad):
    env, backend = make_env()
    env.reset(seed=0)
    sent = len(backend.commanded_poses)
    action = axis_action(0)
    action[4] = bad
    with pytest.raises(ValueError, match="NaN or inf"):
        env.step(action)
    assert backend.stops == 1  # the arm holds still instead of finishing the last target
    with pytest.raises(ValueError, match="shape"):
        env.step(np.zeros(6, np.float32))
    assert len(backend.commanded_poses) == sent
    env.step(axis_action(0))  # the episode goes on
    assert len(backend.commanded_poses) == sent + 1


def test_gripper_commands_are_sent_only_when_they_change():
    env, backend = make_env()
    env.reset(seed=0)
    for gripper in (1, -1, -0.2, 0.0, 0.7, -1):
        obs, *_ = env.step(axis_action(6, gripper))
    assert backend.gripper_commands == [False, True, False, True]
    assert obs["state"][12] == 0.0
    env.reset(seed=0)  # reset always opens
    assert backend.gripper_commands[-1] is False


def test_reset_can_keep_an_object_grasped():
    env, backend = make_env(reset_gripper_closed=True)
    obs, _ = env.reset(seed=0)
    assert backend.gripper_commands == [True] and obs["state"][12] == 0.0


def test_reset_clears_an_unreported_error_and_refuses_an_unrecoverable_one():
    env, backend = make_env()
    env.reset(seed=0)
    backend.inject_control_error("reflex between episodes")
    env.reset(seed=0)
    assert backend.recoveries == 2
    backend.inject_control_error("emergency stop pressed", recoverable=False)
    with pytest.raises(FrankaControlError, match="recovery failed.*emergency stop"):
        env.reset(seed=0)


def test_control_period_paces_the_loop_and_reports_overruns():
    env, _ = make_env(period_s=0.05)
    env.reset(seed=0)
    started_s = time.monotonic()
    for _ in range(4):
        *_, info = env.step(np.zeros(7, np.float32))
        assert info["period_overrun_s"] == 0.0
    assert 0.19 <= time.monotonic() - started_s < 1.0
    time.sleep(0.08)  # a policy slower than the period
    *_, info = env.step(np.zeros(7, np.float32))
    assert 0.02 <= info["period_overrun_s"] < 0.5


def test_control_error_is_recovered_reported_and_truncates(caplog):
    env, backend = make_env()
    env.reset(seed=0)
    backend.inject_control_error("motion aborted by reflex! [cartesian_reflex]")
    with caplog.at_level(logging.WARNING):
        obs, reward, terminated, truncated, info = env.step(axis_action(0))
    assert (reward, terminated, truncated) == (0.0, False, True)
    assert "cartesian_reflex" in info["control_error"] and backend.recoveries == 2  # reset, step
    assert obs in env.observation_space
    assert "recovery" in caplog.text
    with pytest.raises(gym.error.ResetNeeded):
        env.step(axis_action(0))
    env.reset(seed=0)
    *_, info = env.step(axis_action(0))
    assert info["control_error"] is None


def test_failed_recovery_raises_with_the_fix():
    env, backend = make_env()
    env.reset(seed=0)
    backend.inject_control_error("emergency stop pressed", recoverable=False)
    with pytest.raises(FrankaControlError, match="recovery failed.*Desk"):
        env.step(axis_action(0))


def test_lost_connection_ends_the_episode_and_reset_reconnects():
    env, backend = make_env()
    env.reset(seed=0)
    backend.drop_connection()
    with pytest.raises(FrankaConnectionError):
        env.step(axis_action(0))
    with pytest.raises(gym.error.ResetNeeded):
        env.step(axis_action(0))
    obs, _ = env.reset(seed=0)  # the in-memory arm reconnects at once
    assert obs in env.observation_space


def test_success_callable_sets_reward_termination_and_info():
    def peg_inserted(obs):
        return bool(obs["state"][2] < 0.22)

    env, _ = make_env(success_fn=peg_inserted)
    _, info = env.reset(seed=0)
    assert info["success"] is False
    rewards = []
    for _ in range(2):
        _, reward, terminated, _, info = env.step(axis_action(2, -1.0))
        rewards.append((reward, terminated, info["is_success"]))
    assert rewards == [(0.0, False, False), (1.0, True, True)]


def test_camera_frames_are_part_of_the_observation():
    camera, wrist_camera = SolidColourCamera(size=32), SolidColourCamera(size=32)
    env = FrankaEnv(
        backend=MemoryFrankaBackend(),
        camera=camera,
        wrist_camera=wrist_camera,
        image_size=32,
        period_s=0.0,
    )
    assert set(env.observation_space.spaces) == {"state", "image", "wrist_image"}
    obs, _ = env.reset(seed=0)
    assert obs in env.observation_space and obs["image"].shape == (32, 32, 3)
    obs, *_ = env.step(np.zeros(7, np.float32))
    assert obs["image"][0, 0, 0] == 2 and obs["wrist_image"][0, 0, 0] == 2
    env.close()
    assert camera.closed and wrist_camera.closed


def test_blank_cameras_give_grey_frames_for_dry_runs():
    env = FrankaEnv(
        backend=MemoryFrankaBackend(), camera="blank", wrist_camera="blank", image_size=32,
        period_s=0.0,
    )  # fmt: skip
    obs, _ = env.reset(seed=0)
    assert obs in env.observation_space
    assert obs["image"].shape == obs["wrist_image"].shape == (32, 32, 3)
    assert np.all(obs["image"] == 128) and np.all(obs["wrist_image"] == 128)
    env.close()


def test_a_wrong_camera_choice_or_frame_size_is_refused_with_its_name():
    with pytest.raises(ValueError, match="wrist_camera='usb'"):
        FrankaEnv(backend=MemoryFrankaBackend(), wrist_camera="usb", period_s=0.0)
    env = FrankaEnv(
        backend=MemoryFrankaBackend(),
        wrist_camera=SolidColourCamera(size=16),
        image_size=32,
        period_s=0.0,
    )
    with pytest.raises(ValueError, match="wrist_image camera frame .* expected uint8"):
        env.reset(seed=0)
    env.close()


def test_square_resize_keeps_the_centre():
    frame = np.zeros((480, 640, 3), np.uint8)
    frame[:, :80] = 255  # bands left and right of the central 480x480 square
    frame[:, -80:] = 255
    frame[:, 80:-80, 1] = 100
    image = square_resize(frame, 64)
    assert image.shape == (64, 64, 3) and image.dtype == np.uint8
    np.testing.assert_array_equal(image[..., 0], 0)
    np.testing.assert_array_equal(image[..., 1], 100)


def test_realsense_without_its_extra_names_the_extra():
    if importlib.util.find_spec("pyrealsense2") is not None:
        pytest.skip("pyrealsense2 is installed here: the missing-extra message cannot show")
    with pytest.raises(ImportError, match=r"\[realsense\]"):
        FrankaEnv(backend="memory", camera="realsense")


def test_a_camera_of_the_wrong_size_is_named():
    env = FrankaEnv(backend=MemoryFrankaBackend(), camera=SolidColourCamera(48), image_size=32)
    with pytest.raises(ValueError, match=r"camera frame.*\(32, 32, 3\)"):
        env.reset(seed=0)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"reset_height_m": 0.5}, "reset_height_m"),
        ({"dynamics_factor": 1.5}, "dynamics_factor"),
        ({"box_half_extent_rad": (0.1, 2.0, 0.1)}, "box_half_extent_rad"),
        ({"target_position_m": (0.5, 0.0)}, "target_position_m"),
        ({"period_s": -0.1}, "period_s"),
    ],
)
def test_bad_settings_name_the_field(overrides, field):
    with pytest.raises(ValueError, match=field):
        FrankaEnv(backend=MemoryFrankaBackend(), **overrides)


def test_unknown_backend_and_config_object():
    with pytest.raises(ValueError, match="backend='ur5'"):
        FrankaEnv(backend="ur5")
    config = FrankaConfig(target_position_m=[0.4, 0.1, 0.3], period_s=0.0)
    env = FrankaEnv(config, backend="memory", instruction="x")
    assert env.config.target_position_m == (0.4, 0.1, 0.3) and env.task_description == "x"
    obs, _ = env.reset(seed=0)
    np.testing.assert_allclose(obs["state"][:3], [0.4, 0.1, 0.35], atol=1e-6)


def test_memory_backend_keeps_every_commanded_pose():
    backend = MemoryFrankaBackend()
    pose = Pose.from_rpy([0.4, 0.0, 0.3], [np.pi, 0, 0])
    backend.move_to(pose, dynamics_factor=0.1)
    assert backend.commanded_poses == [pose] and backend.read_state().tcp_pose is pose
