"""The wrappers' shared fixtures: a real X server (Xvfb, tests/x_display.py) for the keyboard
tests, and a check that their key listeners end."""

import subprocess
import threading

import pytest
from x_display import xvfb_display  # noqa: F401  (a fixture)


@pytest.fixture
def keyboard_threads_end(xvfb_display):  # noqa: F811  (the imported fixture)
    """The X display, then at the end: every thread the test started has ended.

    pynput's X listener thread ends at the next input event after its stop: the fixture sends
    one, then waits for the test's threads (stop every key source before the test returns).
    """
    threads_before = set(threading.enumerate())
    yield xvfb_display
    subprocess.run(["xdotool", "key", "shift"], check=True, timeout=10)
    for thread in set(threading.enumerate()) - threads_before:
        thread.join(timeout=10)
        assert not thread.is_alive(), f"{thread.name} still runs after close()"
