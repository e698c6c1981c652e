"""The peg task's critical-phase signals: the window near the hole the gate and takeover share."""

import pytest

from rpent_envs.maniskill.critical_phase import GraspStreak, HoleSignals, HoleWindow, PegWindow

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


def test_the_reference_windows_hold_the_reference_values():
    assert PegWindow.gate_reference() == PegWindow(HoleWindow(-0.16, 1.5), True, 5)
    assert PegWindow.takeover_reference() == PegWindow(HoleWindow(-0.10, 2.0), True, 5)
    assert PegWindow.anywhere() == PegWindow(HoleWindow(None, None), False, 5)


def test_a_window_needs_the_grasp_only_when_it_requires_it():
    near = signals(-0.05)
    assert PegWindow.takeover_reference().contains(near, grasp_steps=5)
    assert not PegWindow.takeover_reference().contains(near, grasp_steps=4)
    assert PegWindow.anywhere().contains(near, grasp_steps=0)
    assert not PegWindow.anywhere().held(4) and PegWindow.anywhere().held(5)


def test_loose_keywords_change_the_window_and_unknown_ones_are_named():
    window = PegWindow.gate_reference().with_keywords("AutoGate", near_hole_x_min=-0.10)
    assert window == PegWindow(HoleWindow(-0.10, 1.5), True, 5)
    no_grasp = PegWindow.gate_reference().with_keywords("AutoGate", require_grasp=False)
    assert no_grasp == PegWindow(HoleWindow(-0.16, 1.5), False, 5)
    with pytest.raises(TypeError, match=r"AutoGate got unexpected keyword arguments \['x_min'\]"):
        PegWindow.gate_reference().with_keywords("AutoGate", x_min=-0.1)
