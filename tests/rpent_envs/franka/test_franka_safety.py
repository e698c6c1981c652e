"""Poses, step limits and the safety box; hypothesis searches for a target outside the box."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.spatial.transform import Rotation

from rpent_envs.franka.config import FrankaConfig
from rpent_envs.franka.env import commanded_target, safety_box
from rpent_envs.franka.pose import Pose, limit_step
from rpent_envs.franka.safety import SafetyBox

DOWN_RPY = (np.pi, 0.0, 0.0)
CONFIG = FrankaConfig(target_position_m=(0.5, 0.0, 0.2), box_half_extent_m=(0.05, 0.08, 0.1))
BOX = safety_box(CONFIG)

finite = st.floats(-1e3, 1e3, allow_nan=False)
actions = st.lists(st.floats(-1.0, 1.0), min_size=7, max_size=7).map(np.array)
quaternions = st.lists(st.floats(-1.0, 1.0), min_size=4, max_size=4).filter(
    lambda q: np.linalg.norm(q) > 0.1
)
poses = st.builds(
    lambda position, quat: Pose(np.array(position), np.array(quat) / np.linalg.norm(quat)),
    st.lists(finite, min_size=3, max_size=3),
    quaternions,
)


def test_moved_by_turns_about_base_axes():
    down = Pose.from_rpy([0.5, 0.0, 0.2], DOWN_RPY)
    turned = down.moved_by(np.array([0.01, 0.0, 0.0]), np.array([0.0, 0.0, 0.2]))
    np.testing.assert_allclose(turned.position_m, [0.51, 0.0, 0.2])
    expected = Rotation.from_rotvec([0, 0, 0.2]) * Rotation.from_euler("xyz", DOWN_RPY)
    assert (turned.rotation * expected.inv()).magnitude() < 1e-9
    np.testing.assert_allclose(BOX.relative_rpy(turned), [0.0, 0.0, 0.2], atol=1e-9)


def test_limit_step_keeps_the_direction_and_shortens_the_way():
    start = Pose.from_rpy([0.0, 0.0, 0.0], DOWN_RPY)
    goal = start.moved_by(np.array([0.3, 0.4, 0.0]), np.array([0.0, 0.0, 1.0]))
    step = limit_step(start, goal, max_step_m=0.05, max_step_rad=0.1)
    np.testing.assert_allclose(step.position_m, [0.03, 0.04, 0.0], atol=1e-12)
    np.testing.assert_allclose((start.rotation.inv() * step.rotation).magnitude(), 0.1)
    near = start.moved_by(np.array([0.01, 0.0, 0.0]), np.zeros(3))
    np.testing.assert_allclose(limit_step(start, near, 0.05, 0.1).as_vector(), near.as_vector())


def test_box_clips_each_axis_and_angle():
    outside = Pose.from_rpy([0.9, -0.9, 0.21], DOWN_RPY).moved_by(np.zeros(3), [0.0, 1.0, 0.0])
    clipped = BOX.clip(outside)
    np.testing.assert_allclose(clipped.position_m, [0.55, -0.08, 0.21])
    np.testing.assert_allclose(BOX.relative_rpy(clipped), [0.0, 0.3, 0.0], atol=1e-9)
    assert BOX.contains(clipped) and not BOX.contains(outside)


def test_box_rejects_bounds_at_the_gimbal_lock():
    with pytest.raises(ValueError, match="box_half_extent_rad"):
        SafetyBox(BOX.center, np.full(3, 0.1), np.array([0.1, 1.6, 0.1]))


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(measured=poses, action=actions)
def test_no_action_from_any_measured_pose_commands_outside_the_box(measured, action):
    target, _ = commanded_target(measured, action, CONFIG, BOX)
    assert BOX.contains(target, tolerance=1e-7)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(start=poses.map(BOX.clip), action=actions)
def test_a_step_from_inside_the_box_stays_within_the_step_limits(start, action):
    target, _ = commanded_target(start, action, CONFIG, BOX)
    assert np.linalg.norm(target.position_m - start.position_m) <= CONFIG.max_step_m + 1e-9
    assert (start.rotation.inv() * target.rotation).magnitude() <= CONFIG.max_step_rad + 1e-6
