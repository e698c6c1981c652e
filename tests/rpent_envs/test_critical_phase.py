"""The peg task's critical-phase signals: the window near the hole the gate and takeover share."""

import pytest

from rpent_envs.maniskill.critical_phase import GraspStreak, HoleSignals, HoleWindow

RADIUS = 0.04


def signals(x, y=0.0, z=0.0):
    info = {"peg_head_pos_at_hole": [x, y, z], "hole_radius": RADIUS, "success": False}
    return HoleSignals.from_info(info, "test")


@pytest.mark.parametrize(
    "window, x, y, inside",
    [
        (HoleWindow(-0.10, 2.0), -0.10, 2.0 * RADIUS, True),  # both bounds are inclusive
        (HoleWindow(-0.10, 2.0), -0.101, 0.0, False),
        (HoleWindow(-0.10, 2.0), -0.05, -2.01 * RADIUS, False),
        (HoleWindow(None, 2.0), -5.0, 0.0, True),  # no x bound
        (HoleWindow(-0.10, None), -0.05, 9.0, True),  # no yz bound
        (HoleWindow(None, None), -5.0, 9.0, True),
    ],
)
def test_the_window_bounds_x_and_yz_and_none_is_no_bound(window, x, y, inside):
    assert window.contains(signals(x, y)) is inside


def test_missing_keys_name_the_reader_and_the_keyboard_alternative():
    with pytest.raises(KeyError, match=r"AutoGate needs info keys \['hole_radius'\].*Keyboard"):
        HoleSignals.from_info({"peg_head_pos_at_hole": [0, 0, 0], "success": False}, "AutoGate")


def test_the_grasp_streak_restarts_at_a_lost_grasp():
    streak = GraspStreak()
    grasps = [True, True, False, True]
    assert streak.observe([{"is_grasped": g} for g in grasps], "test") == 1
