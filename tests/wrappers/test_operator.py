"""The operator's keys, the outcome wrapper and the console, with presses fed by code."""

import threading

import gymnasium as gym
import numpy as np
import pytest

import rpent_envs
from wrappers.console import OperatorConsole
from wrappers.key_source import KeyPressQueue
from wrappers.operator import OperatorKeys, OperatorOutcome


def test_default_keys_follow_the_three_pedals_and_the_legend_names_every_key():
    keys = OperatorKeys()
    assert (keys.failure, keys.actor, keys.success) == ("a", "b", "c")
    legend = keys.legend()
    assert "\n" not in legend
    for name, key in vars(keys).items():
        assert key in legend, name
    assert "c success" in legend and "space teleop on/off" in legend and "up/down x" in legend
    assert keys.movement_keys()["page_down"] == (2, -1.0)
    assert keys.movement_keys()["o"] == (5, -1.0)


def test_a_key_bound_twice_or_empty_is_refused_naming_the_fields():
    with pytest.raises(ValueError, match="key 'b' is bound to both actor and gripper"):
        OperatorKeys(gripper="b")
    with pytest.raises(ValueError, match="OperatorKeys.reset=''"):
        OperatorKeys(reset="")


def make_env(env_id, **kwargs):
    if env_id == rpent_envs.FRANKA_ID:
        return gym.make(env_id, backend="memory", period_s=0.0, **kwargs)
    return gym.make(env_id, **kwargs)


def still(env):
    return np.zeros(env.action_space.shape, np.float32) if env.action_space.shape else 0


@pytest.mark.parametrize("env_id", [rpent_envs.FRANKA_ID, "CartPole-v1"])
@pytest.mark.parametrize(
    ("key", "reward", "success"), [("c", 1.0, True), ("a", 0.0, False)], ids=["c", "a"]
)
def test_an_outcome_press_ends_the_episode_at_its_step(env_id, key, reward, success):
    presses = KeyPressQueue()
    env = OperatorOutcome(make_env(env_id), key_source=presses)
    _, info = env.reset(seed=0)
    assert info["operator_outcome"] is None
    _, _, terminated, _, info = env.step(still(env))
    assert not terminated and info["operator_outcome"] is None
    presses.press("b")  # not an outcome key
    presses.press(key)
    presses.press("c" if key == "a" else "a")  # a second verdict in the same step: the first counts
    _, step_reward, terminated, _, info = env.step(still(env))
    assert (step_reward, terminated) == (reward, True)
    assert info["success"] is success and info["is_success"] is success
    assert info["operator_outcome"] == ("success" if success else "failure")
    env.close()


def test_presses_before_a_reset_are_dropped():
    presses = KeyPressQueue()
    env = OperatorOutcome(make_env(rpent_envs.FRANKA_ID), key_source=presses)
    env.reset(seed=0)
    presses.press("c")  # while the arm resets between episodes
    env.reset(seed=1)
    _, reward, terminated, _, info = env.step(still(env))
    assert (reward, terminated, info["success"], info["operator_outcome"]) == (
        0.0,
        False,
        False,
        None,
    )
    env.close()


def test_an_env_that_judges_success_keeps_doing_so_until_the_operator_presses():
    verdict = {"success": False}
    presses = KeyPressQueue()
    env = make_env(rpent_envs.FRANKA_ID, success_fn=lambda observation: verdict["success"])
    env = OperatorOutcome(env, key_source=presses)
    env.reset(seed=0)
    verdict["success"] = True
    _, reward, terminated, _, info = env.step(still(env))
    assert (reward, terminated, info["success"], info["operator_outcome"]) == (
        1.0,
        True,
        True,
        None,
    )
    env.reset(seed=1)
    presses.press("a")  # the operator overrules the env's judge
    _, reward, terminated, _, info = env.step(still(env))
    assert (reward, terminated, info["success"], info["operator_outcome"]) == (
        0.0,
        True,
        False,
        "failure",
    )
    env.close()


def test_console_feeds_every_consumer_from_one_source_and_waits_for_the_reset_key():
    source = KeyPressQueue()
    console = OperatorConsole(key_source=source)
    trigger = console.trigger()
    env = console.outcome(make_env(rpent_envs.FRANKA_ID))
    teleop = console.keyboard_teleop()
    takeover = console.takeover(teleop)
    trigger.reset()
    takeover.reset()
    env.reset(seed=0)
    for key in ("b", "space", "up", "g", "c"):
        source.press(key)
    assert trigger.update([]).event == "enter_actor"
    assert takeover.update([{}], critical_phase=True) is True
    assert teleop.action().tolist() == [1.0, 0, 0, 0, 0, 0, -1.0]
    _, _, terminated, _, info = env.step(still(env))
    assert terminated and info["operator_outcome"] == "success"

    source.press("r")  # made before the wait: dropped
    assert console.wait_for_reset(poll_s=0.01, should_stop=lambda: True) is False
    pressed_later = threading.Timer(0.2, source.press, args=("r",))
    pressed_later.start()
    assert console.wait_for_reset(poll_s=0.01) is True
    pressed_later.join()
    env.close()
    trigger.close()
    console.close()
