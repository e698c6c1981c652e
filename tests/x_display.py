"""A real X server (Xvfb) for the tests of the operator's keys, driven by xdotool.

The fixture `xvfb_display` is imported by the conftests of the tests that press real keys;
tests/ is on `sys.path`.
"""

import shutil
import subprocess
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
    """An Xvfb server for the test; DISPLAY names it (for this process and its children)."""
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
