"""The wrappers' shared fixtures: a real X server (Xvfb) for the keyboard tests."""

import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest


def free_display_number():
    for number in range(90, 200):
        if (
            not Path(f"/tmp/.X11-unix/X{number}").exists()
            and not Path(f"/tmp/.X{number}-lock").exists()
        ):
            return number
    raise RuntimeError("no free X display number in :90-:199")


@pytest.fixture
def xvfb_display(monkeypatch):
    for tool in ("Xvfb", "xdotool"):
        assert shutil.which(tool), f"{tool} is missing: run bash .ci/setup (installs xvfb, xdotool)"
    number = free_display_number()
    server = subprocess.Popen(
        ["Xvfb", f":{number}", "-screen", "0", "320x240x24", "-nolisten", "tcp"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    socket = Path(f"/tmp/.X11-unix/X{number}")
    deadline = time.monotonic() + 20
    while not socket.exists():
        assert server.poll() is None, "Xvfb exited at start"
        assert time.monotonic() < deadline, "Xvfb did not open its socket in 20 s"
        time.sleep(0.05)
    monkeypatch.setenv("DISPLAY", f":{number}")
    monkeypatch.delenv("PYNPUT_BACKEND", raising=False)
    yield f":{number}"
    server.terminate()
    server.wait(timeout=10)


@pytest.fixture
def keyboard_threads_end(xvfb_display):
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
