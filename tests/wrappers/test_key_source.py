"""KeyPressQueue: subscribers and held keys, from code and from the real keyboard under Xvfb."""

import subprocess
import time

import pytest

from wrappers.key_source import KeyPressQueue, PynputKeySource


def keys_of(queue):
    return [press.key for press in queue.pop_presses()]


def test_every_subscriber_gets_every_press_of_its_keys():
    source = KeyPressQueue(clock=lambda: 7.0)
    everything, outcome, teleop = (
        source.subscribe(),
        source.subscribe(["a", "c"]),
        source.subscribe(["space", "up"]),
    )
    for key in ("b", "c", "space", "a", "up"):
        source.press(key)
    assert keys_of(source) == ["b", "c", "space", "a", "up"]
    assert keys_of(everything) == ["b", "c", "space", "a", "up"]
    assert keys_of(outcome) == ["c", "a"]
    assert [(press.key, press.time_s) for press in teleop.pop_presses()] == [
        ("space", 7.0),
        ("up", 7.0),
    ]
    assert keys_of(outcome) == [] and keys_of(everything) == []  # popping one leaves the others
    source.press("c")
    assert keys_of(outcome) == ["c"] and keys_of(source) == ["c"]


def test_held_keys_follow_presses_and_releases_in_every_subscriber():
    source = KeyPressQueue()
    movement = source.subscribe(["up", "i"])
    source.press("up")
    source.press("i")
    source.press("b")
    assert source.held_keys() == {"up", "i", "b"} and movement.held_keys() == {"up", "i"}
    source.release("up")
    assert source.held_keys() == {"i", "b"} and movement.held_keys() == {"i"}
    source.release("I")  # shift went down while i was held: the release reports "I"
    assert source.held_keys() == {"b"} and movement.held_keys() == set()


def test_a_queue_nobody_pops_keeps_its_newest_presses():
    source = KeyPressQueue()
    for index in range(KeyPressQueue.MAX_PENDING_PRESSES + 5):
        source.press(str(index))
    presses = keys_of(source)
    assert len(presses) == KeyPressQueue.MAX_PENDING_PRESSES and presses[-1] == "1004"


def wait_for(condition, what):
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


@pytest.mark.subprocess
def test_real_keyboard_under_xvfb_reports_held_keys_and_one_press_per_hold(
    keyboard_threads_end,
):
    source = PynputKeySource()
    movement = source.subscribe(["up"])
    source.start()
    try:
        subprocess.run(["xdotool", "keydown", "Up"], check=True, timeout=10)
        wait_for(lambda: movement.held_keys() == {"up"}, "the held Up key never arrived")
        time.sleep(0.8)  # past the X server's auto-repeat delay (660 ms)
        assert source.held_keys() == {"up"}
        subprocess.run(["xdotool", "keyup", "Up"], check=True, timeout=10)
        wait_for(lambda: not movement.held_keys(), "the Up key's release never arrived")
        assert keys_of(movement) == ["up"]  # auto-repeat presses of a held key are not queued
        subprocess.run(["xdotool", "key", "space"], check=True, timeout=10)
        wait_for(lambda: "space" in keys_of(source), "the space press never arrived")
        assert source.held_keys() == set()
    finally:
        source.stop()
