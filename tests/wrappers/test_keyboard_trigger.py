"""KeyboardTrigger: press logic with an injected key source, and a real key press under Xvfb."""

import os
import subprocess
import sys
import time

import gymnasium as gym
import numpy as np
import pytest

import rpent_envs
from wrappers.policy_switch import PolicySwitch
from wrappers.triggers import KeyboardTrigger, KeyPressQueue, SwitchUpdate

HORIZON = 2
ACTION_DIM = 7


def hold_still(observation):
    return np.zeros((HORIZON, ACTION_DIM), np.float32)


def franka_switch(trigger):
    """The Franka env (in-memory arm): the keyboard needs no task signals from the env."""
    env = gym.make(rpent_envs.FRANKA_ID, backend="memory", period_s=0.0)
    return PolicySwitch(env, trigger, reference=hold_still, horizon=HORIZON)


def test_first_press_latches_the_actor_and_later_presses_report_it():
    presses = KeyPressQueue()
    trigger = KeyboardTrigger(key_source=presses)
    assert trigger.reset() == SwitchUpdate(False)
    assert trigger.update([]) == SwitchUpdate(False)
    presses.press("a", 1.0)
    assert trigger.update([]) == SwitchUpdate(False)
    presses.press("b", 1.0)
    assert trigger.update([]) == SwitchUpdate(True, "enter_actor")
    presses.press("b", 1.1)  # a bounce within 0.2 s
    assert trigger.update([]) == SwitchUpdate(True)
    presses.press("b", 1.25)
    assert trigger.update([]) == SwitchUpdate(True, "actor_already_active")
    assert trigger.update([]) == SwitchUpdate(True)


def test_two_presses_in_one_chunk_still_report_the_entry():
    presses = KeyPressQueue()
    trigger = KeyboardTrigger(key_source=presses)
    trigger.reset()
    presses.press("b", 5.0)
    presses.press("b", 5.5)
    assert trigger.update([]) == SwitchUpdate(True, "enter_actor")


def test_reset_returns_control_and_drops_presses_made_before_it():
    presses = KeyPressQueue()
    trigger = KeyboardTrigger(key_source=presses)
    trigger.reset()
    presses.press("b", 1.0)
    trigger.update([])
    presses.press("b", 2.0)  # pressed while the episode ended
    assert trigger.reset() == SwitchUpdate(False)
    assert trigger.update([]) == SwitchUpdate(False)


def test_switch_hands_the_next_chunk_to_the_actor_after_a_press():
    presses = KeyPressQueue()
    switch = franka_switch(KeyboardTrigger(key_source=presses))
    _, info = switch.reset(seed=0)
    assert info["rlt_switch_flags"] is False and info["next_action_source"] == "vla"
    actor_chunk = np.full(HORIZON * ACTION_DIM, 0.5, np.float32)
    _, _, _, _, info = switch.step(actor_chunk)
    assert info["action_source"] == "vla"
    np.testing.assert_array_equal(info["executed_action"], np.zeros((HORIZON, ACTION_DIM)))
    presses.press("b")
    _, _, _, _, info = switch.step(actor_chunk)
    assert info["action_source"] == "vla" and info["rlt_policy_switch_event"] == "enter_actor"
    _, _, _, _, info = switch.step(actor_chunk)
    assert info["action_source"] == "actor" and info["record_transition"]
    np.testing.assert_array_equal(info["executed_action"], np.full((HORIZON, ACTION_DIM), 0.5))
    _, info = switch.reset(seed=1)
    assert info["rlt_switch_flags"] is False
    switch.close()


@pytest.mark.subprocess
def test_missing_display_names_what_to_set():
    code = "from wrappers.triggers import KeyboardTrigger\nKeyboardTrigger().reset()\n"
    env = {
        key: value for key, value in os.environ.items() if key not in ("DISPLAY", "PYNPUT_BACKEND")
    }
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode != 0
    assert "KeyboardUnavailableError" in result.stderr
    assert "Set DISPLAY" in result.stderr and "PYNPUT_BACKEND=uinput" in result.stderr


@pytest.mark.subprocess
def test_real_b_key_under_xvfb_flips_the_switch(keyboard_threads_end):
    switch = franka_switch(KeyboardTrigger())  # pynput, started by the first reset
    try:
        switch.reset(seed=0)
        _, _, _, _, info = switch.step(np.zeros(HORIZON * ACTION_DIM, np.float32))
        assert info["rlt_switch_flags"] is False
        subprocess.run(["xdotool", "key", "b"], check=True, timeout=10)
        deadline = time.monotonic() + 10
        while not info["rlt_switch_flags"]:
            assert time.monotonic() < deadline, "the b key press never reached the switch"
            time.sleep(0.02)
            _, _, _, _, info = switch.step(np.zeros(HORIZON * ACTION_DIM, np.float32))
        assert info["rlt_policy_switch_event"] == "enter_actor"
        _, _, _, _, info = switch.step(np.full(HORIZON * ACTION_DIM, 0.1, np.float32))
        assert info["action_source"] == "actor"
    finally:
        switch.close()
