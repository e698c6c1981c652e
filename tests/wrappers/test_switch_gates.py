"""AutoGate and ExpertTakeover decisions at their thresholds, from infos as the env writes them."""

import numpy as np
import pytest

from rpent_envs.maniskill.critical_phase import HoleWindow, PegWindow
from wrappers.takeover import ExpertTakeover, as_step_policy
from wrappers.triggers import AutoGate, SwitchUpdate

RADIUS = 0.04


def info(x, y=0.0, z=0.0, grasped=True, success=False):
    return {
        "peg_head_pos_at_hole": np.array([x, y, z], np.float32),
        "hole_radius": RADIUS,
        "is_grasped": grasped,
        "success": success,
    }


def chunk(x, y=0.0, z=0.0, grasped=True, success=False, steps=10):
    return [info(x, y, z, grasped, success)] * steps


# --- AutoGate ---------------------------------------------------------------------------


def test_gate_needs_five_consecutive_grasped_steps():
    gate = AutoGate()
    assert gate.reset() == SwitchUpdate(False)
    assert gate.update([info(-0.1, grasped=False)] + [info(-0.1)] * 4) == SwitchUpdate(False)
    assert gate.update([info(-0.1)]) == SwitchUpdate(True, "enter_actor")  # 4 + 1 across chunks


def test_a_dropped_grasp_restarts_the_streak():
    gate = AutoGate()
    gate.reset()
    steps = [info(-0.1)] * 6 + [info(-0.1, grasped=False)] + [info(-0.1)] * 4
    assert not gate.update(steps).active


@pytest.mark.parametrize(
    "x, y, z, expected",
    [
        (-0.16, 0.0, 0.0, True),  # x bound is inclusive
        (-0.161, 0.0, 0.0, False),
        (-0.1, 1.5 * RADIUS, 0.0, True),  # yz bound is inclusive
        (-0.1, 1.51 * RADIUS, 0.0, False),
        (-0.1, 0.0, -1.51 * RADIUS, False),
        (-0.1, -1.49 * RADIUS, 1.49 * RADIUS, True),
    ],
)
def test_gate_near_hole_bounds(x, y, z, expected):
    gate = AutoGate()
    gate.reset()
    assert gate.update(chunk(x, y, z)).active is expected


def test_gate_stays_closed_after_success_unless_allowed():
    gate = AutoGate()
    gate.reset()
    assert not gate.update(chunk(-0.01, success=True)).active
    permissive = AutoGate(require_not_success=False)
    permissive.reset()
    assert permissive.update(chunk(-0.01, success=True)).active


def test_gate_without_grasp_requirement_opens_on_position_alone():
    gate = AutoGate(require_grasp=False)
    gate.reset()
    assert gate.update(chunk(-0.1, grasped=False, steps=1)).active


def test_latched_gate_stays_open_until_reset_and_unlatched_gate_follows():
    latched, unlatched = AutoGate(), AutoGate(latch_until_done=False)
    for gate in (latched, unlatched):
        gate.reset()
        assert gate.update(chunk(-0.1)) == SwitchUpdate(True, "enter_actor")
    assert latched.update(chunk(-0.3, grasped=False)) == SwitchUpdate(True)
    assert unlatched.update(chunk(-0.3, grasped=False)) == SwitchUpdate(False)
    assert unlatched.update(chunk(-0.1)) == SwitchUpdate(True, "enter_actor")
    assert latched.reset() == SwitchUpdate(False)
    assert not latched.update(chunk(-0.1, steps=4)).active  # the grasp streak restarted too


def test_always_on_gives_the_actor_every_chunk():
    gate = AutoGate(trigger_mode="always_on")
    assert gate.reset() == SwitchUpdate(True, "enter_actor")
    assert gate.update(chunk(-0.5, grasped=False)) == SwitchUpdate(True)


def test_the_missed_grasp_entry_opens_after_ungrasped_chunks_only():
    gate = AutoGate(missed_grasp_chunks=4)
    gate.reset()
    on_table = chunk(-0.3, grasped=False)
    assert [gate.update(on_table).active for _ in range(4)] == [False] * 3 + [True]
    assert gate.update(chunk(-0.3)).active  # latched, as the critical phase is
    held_early = AutoGate(missed_grasp_chunks=4)  # the reference grasped in time: closed
    held_early.reset()
    for grasped in (False, False, True, True, True, False, False, False):
        assert not held_early.update(chunk(-0.3, grasped=grasped)).active
    assert held_early.update(on_table) == SwitchUpdate(True, "enter_actor")  # dropped: 4 in a row
    never = AutoGate()  # off by default
    never.reset()
    assert not any(never.update(on_table).active for _ in range(10))
    solved = AutoGate(missed_grasp_chunks=1)
    solved.reset()
    assert not solved.update(chunk(0.0, grasped=False, success=True)).active
    with pytest.raises(ValueError, match="missed_grasp_chunks=0"):
        AutoGate(missed_grasp_chunks=0)


def test_the_gate_keeps_one_window_its_keywords_change():
    assert AutoGate().window == PegWindow.gate_reference()
    assert AutoGate(near_hole_x_min=-0.10).window == PegWindow(HoleWindow(-0.10, 1.5))
    wide = PegWindow(HoleWindow(-0.2, 3.0), min_grasp_steps=2)
    assert AutoGate(window=wide, require_grasp=False).window == PegWindow(
        HoleWindow(-0.2, 3.0), False, 2
    )
    with pytest.raises(TypeError, match="AutoGate got unexpected keyword arguments"):
        AutoGate(near_hole_x=-0.1)


def test_gate_names_missing_signals_and_bad_mode():
    gate = AutoGate()
    gate.reset()
    with pytest.raises(KeyError, match="is_grasped.*KeyboardTrigger"):
        gate.update([{"success": False}])
    with pytest.raises(KeyError, match="peg_head_pos_at_hole"):
        gate.update([{"is_grasped": True, "success": False}])
    with pytest.raises(ValueError, match="trigger_mode"):
        AutoGate(trigger_mode="sometimes")


# --- ExpertTakeover ---------------------------------------------------------------------


class CountingExpert:
    def __init__(self):
        self.calls = 0

    def act(self):
        self.calls += 1
        return np.full(8, 0.5, np.float32)


@pytest.fixture
def takeover():
    takeover = ExpertTakeover(CountingExpert())
    takeover.reset()
    return takeover


def test_takeover_fires_on_the_third_stalled_chunk(takeover):
    assert not takeover.update(chunk(-0.05), True)  # first eligible chunk: records the best
    assert not takeover.update(chunk(-0.05), True)
    assert not takeover.update(chunk(-0.05), True)
    assert takeover.update(chunk(-0.05), True)
    assert takeover.stalled_chunks == 3


@pytest.mark.parametrize(
    "next_x, next_y, progressed",
    [
        (-0.05 + 0.0031, 0.0, True),  # x beats the best by more than 3 mm
        (-0.05 + 0.0019, 0.0, False),  # too little in x, and the score gains < 2 mm
        (-0.05, 0.0, False),
    ],
)
def test_progress_in_x(takeover, next_x, next_y, progressed):
    takeover.update(chunk(-0.05, 0.0), True)
    takeover.update(chunk(next_x, next_y), True)
    assert takeover.stalled_chunks == (0 if progressed else 1)


def test_progress_in_yz_and_score(takeover):
    takeover.update(chunk(-0.05, 0.010), True)
    takeover.update(chunk(-0.05, 0.0084), True)  # yz 1.6 mm closer: progress
    assert takeover.stalled_chunks == 0
    takeover.update(chunk(-0.0488, 0.0075), True)  # x +1.2 mm, yz -0.9 mm: score +2.1 mm
    assert takeover.stalled_chunks == 0
    takeover.update(chunk(-0.0480, 0.0070), True)  # x +0.8, yz -0.5, score +1.3: stalled
    assert takeover.stalled_chunks == 1


def test_an_ineligible_chunk_restarts_the_count(takeover):
    for _ in range(3):
        takeover.update(chunk(-0.05), True)
    assert takeover.stalled_chunks == 2
    takeover.update(chunk(-0.12), True)  # x < -0.10: not near enough
    assert takeover.stalled_chunks == 0 and takeover.best is None
    for expected in (0, 1, 2):  # the first eligible chunk records the best again
        takeover.update(chunk(-0.05), True)
        assert takeover.stalled_chunks == expected


@pytest.mark.parametrize(
    "blocker",
    [
        dict(in_critical_phase=False),
        dict(infos=chunk(-0.05, success=True)),
        dict(infos=chunk(-0.05, y=2.01 * RADIUS)),
        dict(infos=[info(-0.05)] * 6 + [info(-0.05, grasped=False)] + [info(-0.05)] * 3),
    ],
)
def test_ineligible_chunks_never_fire(takeover, blocker):
    infos = blocker.get("infos", chunk(-0.05))
    in_critical_phase = blocker.get("in_critical_phase", True)
    for _ in range(6):
        assert not takeover.update(infos, in_critical_phase)


def test_takeover_latches_until_success(takeover):
    for _ in range(4):
        takeover.update(chunk(-0.05), True)
    assert takeover.active
    assert takeover.update(chunk(-0.02), True)  # the expert makes progress: still latched
    assert takeover.update(chunk(-0.3, grasped=False), True)  # even out of the near zone
    assert not takeover.update(chunk(-0.01, success=True), True)
    assert not takeover.active and takeover.stalled_chunks == 0


def test_reset_releases_the_expert(takeover):
    for _ in range(4):
        takeover.update(chunk(-0.05), True)
    takeover.reset()
    assert not takeover.active and takeover.best is None and takeover.stalled_chunks == 0


def test_the_takeover_keeps_one_window_its_keywords_change():
    assert ExpertTakeover(CountingExpert()).window == PegWindow.takeover_reference()
    whole = ExpertTakeover.whole_critical_phase(CountingExpert())
    assert whole.window == PegWindow.anywhere() and whole.ungrasped_chunks_before_takeover == 3
    narrowed = ExpertTakeover.whole_critical_phase(CountingExpert(), near_hole_x_min=-0.2)
    assert narrowed.window == PegWindow(HoleWindow(-0.2, None), require_grasp=False)


def test_expert_objects_and_callables_become_step_policies():
    expert = CountingExpert()
    policy = as_step_policy(expert)
    np.testing.assert_array_equal(policy({"state": np.zeros(9)}), np.full(8, 0.5, np.float32))
    assert expert.calls == 1
    assert as_step_policy(np.tanh) is np.tanh
    with pytest.raises(TypeError, match="act()"):
        as_step_policy(42)


@pytest.mark.parametrize(
    "stall",
    [
        chunk(-0.12),  # at the face of a long box: below the reference's x >= -0.10
        chunk(-0.05, y=2.5 * RADIUS),  # jammed and drifting out of the y/z margin
        chunk(-0.05, grasped=False),  # dropped
    ],
)
def test_the_whole_critical_phase_takeover_fires_where_the_reference_window_does_not(stall):
    reference = ExpertTakeover(CountingExpert())
    whole = ExpertTakeover.whole_critical_phase(CountingExpert())
    fired = {"reference": False, "whole": False}
    for _ in range(4):
        fired["reference"] |= reference.update(stall, True)
        fired["whole"] |= whole.update(stall, True)
    assert fired == {"reference": False, "whole": True}
    assert not ExpertTakeover.whole_critical_phase(CountingExpert()).update(stall, False)


def test_a_peg_not_yet_grasped_is_judged_by_the_grasp_deadline_not_by_progress():
    # From the first chunk (the actor drives the whole episode) the peg lies still on the table
    # while the gripper approaches: no progress, but no stall either until the deadline.
    takeover = ExpertTakeover.whole_critical_phase(
        CountingExpert(), ungrasped_chunks_before_takeover=5
    )
    on_table = chunk(-0.3, grasped=False)
    assert [takeover.update(on_table, True) for _ in range(5)] == [False] * 4 + [True]
    takeover.reset()
    for _ in range(4):
        assert not takeover.update(on_table, True)
    for x in (-0.3, -0.3, -0.3):  # grasped: the deadline restarts, progress decides again
        assert not takeover.update(chunk(x), True)
    assert takeover.ungrasped_chunks == 0 and takeover.stalled_chunks == 2
    assert takeover.update(chunk(-0.3), True)  # third grasped chunk without progress
