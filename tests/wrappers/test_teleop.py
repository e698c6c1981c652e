"""Teleop devices and the human takeover through PolicySwitch on the in-memory Franka arm."""

import subprocess
import sys
import time
import types
from collections import namedtuple

import gymnasium as gym
import numpy as np
import pytest

import rpent_envs
from wrappers.console import OperatorConsole
from wrappers.key_source import KeyPressQueue
from wrappers.operator import OperatorKeys
from wrappers.policy_switch import PolicySwitch
from wrappers.teleop import HumanTakeover, KeyboardTeleop, SpaceMouseTeleop, TeleopUnavailableError
from wrappers.triggers import KeyboardTrigger

HORIZON, ACTION_DIM = 2, 7
OPEN, CLOSED = 1.0, -1.0


@pytest.mark.parametrize(("key", "axis_sign"), sorted(OperatorKeys().movement_keys().items()))
def test_keyboard_teleop_maps_each_held_key_to_its_axis(key, axis_sign):
    presses = KeyPressQueue()
    teleop = KeyboardTeleop(presses)
    presses.press(key)
    expected = np.zeros(ACTION_DIM, np.float32)
    expected[axis_sign[0]], expected[-1] = axis_sign[1], OPEN
    np.testing.assert_array_equal(teleop.action(), expected)
    presses.release(key)
    np.testing.assert_array_equal(teleop.action(), [0, 0, 0, 0, 0, 0, OPEN])


def test_keyboard_teleop_toggles_the_gripper_and_cancels_opposite_keys():
    presses = KeyPressQueue()
    teleop = KeyboardTeleop(presses, action_dim=8)
    for key in ("up", "down", "left", "g"):
        presses.press(key)
    np.testing.assert_array_equal(teleop.action(), [0, 1, 0, 0, 0, 0, 0, CLOSED])
    presses.press("g")
    assert teleop.action()[-1] == OPEN
    presses.press("g")
    teleop.set_gripper(False)  # the takeover hands over an open gripper: the press is dropped
    assert teleop.action()[-1] == OPEN
    with pytest.raises(ValueError, match="action_dim=6"):
        KeyboardTeleop(presses, action_dim=6)


SpaceNavigator = namedtuple(
    "SpaceNavigator", ["t", "x", "y", "z", "roll", "pitch", "yaw", "buttons"]
)


def fake_pyspacemouse(states):
    """A stand-in for the device module: `open()` gives a device whose `read()` gives `states`,
    then the last again and again."""
    remaining = list(states)
    device = types.SimpleNamespace(closed=False, reads=0)

    def read():
        device.reads += 1
        return remaining.pop(0) if len(remaining) > 1 else remaining[0]

    device.read = read
    device.close = lambda: setattr(device, "closed", True)
    return types.SimpleNamespace(open=lambda: device), device


def missing_device():
    raise RuntimeError("No connected or supported devices found.")  # as pyspacemouse 2.x


def state(x=0.0, y=0.0, z=0.0, roll=0.0, pitch=0.0, yaw=0.0, buttons=(0, 0)):
    return SpaceNavigator(0.0, x, y, z, roll, pitch, yaw, list(buttons))


def settled_action(teleop, device, reads):
    deadline = time.monotonic() + 10
    while device.reads < reads:
        assert time.monotonic() < deadline, "the SpaceMouse reader thread stopped reading"
        time.sleep(0.005)
    return teleop.action()


def test_spacemouse_maps_its_axes_with_a_deadband_and_latches_the_gripper_buttons(monkeypatch):
    states = [
        state(buttons=(1, 0)),  # the close button, pressed and let go
        state(x=0.55, y=-1.0, z=0.05, roll=0.1, pitch=-0.325, yaw=1.0),
    ]
    module, device = fake_pyspacemouse(states)
    monkeypatch.setitem(sys.modules, "pyspacemouse", module)
    teleop = SpaceMouseTeleop(deadband=0.1)
    action = settled_action(teleop, device, reads=3)
    # SERL's mapping: [-y, x, z, -roll, -pitch, -yaw], |v| <= 0.1 is zero, the rest rescaled
    np.testing.assert_allclose(action, [1.0, 0.5, 0.0, 0.0, 0.25, -1.0, CLOSED], atol=1e-6)
    teleop.set_gripper(False)
    assert teleop.action()[-1] == OPEN
    teleop.close()
    assert device.closed

    module, device = fake_pyspacemouse([state(y=-0.325, buttons=(0, 1))])
    monkeypatch.setitem(sys.modules, "pyspacemouse", module)
    teleop = SpaceMouseTeleop(scale=2.0, deadband=0.1, gripper_closed=True)
    np.testing.assert_allclose(
        settled_action(teleop, device, reads=2), [0.5, 0, 0, 0, 0, 0, OPEN], atol=1e-6
    )
    teleop.close()


def test_spacemouse_errors_name_the_extra_and_the_device(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyspacemouse", None)  # not installed
    with pytest.raises(TeleopUnavailableError, match=r"pip install 'rpent\[spacemouse\]'"):
        SpaceMouseTeleop()
    for open_nothing in (lambda: None, missing_device):  # pyspacemouse 1.x, 2.x
        monkeypatch.setitem(sys.modules, "pyspacemouse", types.SimpleNamespace(open=open_nothing))
        with pytest.raises(TeleopUnavailableError, match="no SpaceMouse found"):
            SpaceMouseTeleop()
    with pytest.raises(ValueError, match="SpaceMouse axis 'w'"):
        SpaceMouseTeleop(axes=("x", "y", "z", "roll", "pitch", "w"))


def closing_reference(observation):
    """The VLA stand-in: holds still with the gripper closed (it holds the peg)."""
    chunk = np.zeros((HORIZON, ACTION_DIM), np.float32)
    chunk[:, -1] = CLOSED
    return chunk


def human_switch(presses, **kwargs):
    env = gym.make(rpent_envs.FRANKA_ID, backend="memory", period_s=0.0)
    takeover = HumanTakeover(KeyboardTeleop(presses.subscribe()), presses.subscribe(["space"]))
    trigger = KeyboardTrigger(key_source=presses.subscribe(["b"]))
    return PolicySwitch(
        env,
        trigger,
        reference=closing_reference,
        human_takeover=takeover,
        horizon=HORIZON,
        **kwargs,
    )


def test_the_toggle_hands_the_next_chunks_to_the_human_over_a_not_ready_actor():
    presses = KeyPressQueue()
    switch = human_switch(presses)
    switch.actor_ready = False  # warm-up: the actor may not drive, a person always may
    actor_chunk = np.full(HORIZON * ACTION_DIM, 0.5, np.float32)
    switch.reset(seed=0)
    presses.press("b", 1.0)
    _, _, _, _, info = switch.step(actor_chunk)
    assert info["action_source"] == "vla" and info["rlt_switch_flags"]

    presses.press("space", 2.0)
    presses.press("up")
    _, _, _, _, info = switch.step(actor_chunk)
    assert info["action_source"] == "vla" and info["next_action_source"] == "human"
    _, _, _, _, info = switch.step(actor_chunk)
    assert info["action_source"] == "human" and info["intervene_flag"]
    assert info["record_transition"] and info["intervention_requested"]
    assert not info["actor_switch"]
    # +x from the held key; the gripper stays closed as the reference left it
    np.testing.assert_array_equal(info["executed_action"], [[1, 0, 0, 0, 0, 0, CLOSED]] * HORIZON)

    presses.release("up")
    presses.press("space", 3.0)
    _, _, _, _, info = switch.step(actor_chunk)
    assert info["action_source"] == "human" and info["next_action_source"] == "vla"
    np.testing.assert_array_equal(info["executed_action"], [[0, 0, 0, 0, 0, 0, CLOSED]] * HORIZON)
    _, _, _, _, info = switch.step(actor_chunk)
    assert info["action_source"] == "vla" and not info["intervene_flag"]

    presses.press("space", 4.0)
    switch.step(actor_chunk)
    _, info = switch.reset(seed=1)  # a reset hands control back
    assert info["next_action_source"] == "vla"
    switch.close()


def test_human_chunks_outside_the_critical_phase_are_not_transitions():
    presses = KeyPressQueue()
    switch = human_switch(presses)
    switch.reset(seed=0)
    presses.press("space")
    switch.step(np.zeros(HORIZON * ACTION_DIM, np.float32))
    _, _, _, _, info = switch.step(np.zeros(HORIZON * ACTION_DIM, np.float32))
    assert info["action_source"] == "human" and info["intervene_flag"]
    assert not info["record_transition"] and not info["rlt_switch_flags"]
    switch.close()


def step_until(switch, done, what):
    """Step chunks (the arm holds still unless the human drives) until `done(info, terminated)`."""
    deadline = time.monotonic() + 10
    while True:
        _, _, terminated, _, info = switch.step(np.zeros(HORIZON * ACTION_DIM, np.float32))
        if done(info, terminated):
            return info
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


@pytest.mark.subprocess
def test_real_keyboard_under_xvfb_drives_the_arm_and_ends_the_episode(keyboard_threads_end):
    console = OperatorConsole()  # the real keyboard, one pynput listener
    env = console.outcome(gym.make(rpent_envs.FRANKA_ID, backend="memory", period_s=0.0))
    teleop = console.keyboard_teleop()
    switch = PolicySwitch(
        env,
        console.trigger(),
        reference=closing_reference,
        human_takeover=console.takeover(teleop),
        horizon=HORIZON,
    )
    try:
        switch.reset(seed=0)
        subprocess.run(["xdotool", "key", "space"], check=True, timeout=10)
        step_until(switch, lambda info, _: info["next_action_source"] == "human", "no takeover")
        subprocess.run(["xdotool", "keydown", "Up"], check=True, timeout=10)
        info = step_until(switch, lambda info, _: info["executed_action"][0, 0] == 1, "no +x")
        assert info["action_source"] == "human" and info["intervene_flag"]
        np.testing.assert_array_equal(info["executed_action"], [[1, 0, 0, 0, 0, 0, CLOSED]] * 2)
        subprocess.run(["xdotool", "keyup", "Up"], check=True, timeout=10)
        subprocess.run(["xdotool", "key", "c"], check=True, timeout=10)
        info = step_until(switch, lambda _, terminated: terminated, "c did not end the episode")
        assert info["operator_outcome"] == "success" and info["success"]
    finally:
        switch.close()
        console.close()
