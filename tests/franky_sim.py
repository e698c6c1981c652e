"""franky-sim servers as real subprocesses on private loopback addresses, always stopped.

The fixture `start_sim` is imported by the conftests of the tests that drive franky-sim
(tests/rpent_envs/franka, tests/rpent_agents/robot); tests/ is on `sys.path`.
"""

import contextlib
import ctypes
import os
import queue
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import franky
import numpy as np
import pytest

FAULT_SIM_SCRIPT = Path(__file__).parent / "rpent_envs" / "franka" / "fault_sim.py"
FRANKY_SIM_CLI = Path(sys.executable).with_name("franky-sim")
ROBOT_PORTS = (1337, 1338)  # franky-sim's arm and hand command ports
SIM_START_TIMEOUT_S = 90
PR_SET_PDEATHSIG = 1
STILL_M = 0.002  # how far a still arm may drift in half a second


def die_with_parent() -> None:
    """Have the kernel end the server if pytest itself dies (a crash skips every teardown)."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def free_loopback_host() -> str:
    """A 127.x.y.z address whose arm and hand ports are free (one sim per address)."""
    for _ in range(100):
        host = f"127.{random.randint(1, 254)}.{random.randint(0, 255)}.{random.randint(1, 254)}"
        with contextlib.ExitStack() as sockets:
            try:
                for port in ROBOT_PORTS:
                    probe = sockets.enter_context(socket.socket())
                    probe.bind((host, port))
            except OSError:
                continue
        return host
    raise RuntimeError("no free loopback address for franky-sim")


class SimProcess:
    """A running franky-sim server; its output is drained so the pipe never blocks it."""

    def __init__(self, host: str, command: list[str], ready_text: str) -> None:
        self.host = host
        self.process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            preexec_fn=die_with_parent,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.output: list[str] = []
        threading.Thread(target=self._drain, daemon=True).start()
        self._wait_for(ready_text)

    def _drain(self) -> None:
        for line in self.process.stdout:
            self.output.append(line)
            self.lines.put(line)

    def _wait_for(self, ready_text: str) -> None:
        deadline_s = time.monotonic() + SIM_START_TIMEOUT_S
        while time.monotonic() < deadline_s:
            try:
                if ready_text in self.lines.get(timeout=1.0):
                    return
            except queue.Empty:
                if self.process.poll() is not None:
                    break
        self.stop()
        pytest.fail(f"franky-sim did not start: {''.join(self.output)}")

    def kill(self) -> None:
        """Die at once, as a crashed server or a pulled cable would."""
        self.process.kill()
        self.process.wait()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture(scope="module")
def start_sim():
    """Start franky-sim: `start_sim()` runs the stock CLI on a free address, `fault=True` the
    reflex-switch server, `host=` a given address (to bring a killed arm back)."""
    started: list[SimProcess] = []

    def start(host: str | None = None, fault: bool = False) -> SimProcess:
        host = host or free_loopback_host()
        if fault:
            command = [sys.executable, str(FAULT_SIM_SCRIPT), host]
            sim = SimProcess(host, command, f"ready {host}")
        else:
            command = [str(FRANKY_SIM_CLI), "-s", "mujoco", "--hostname", host]
            sim = SimProcess(host, command, "Connect to the server")
        started.append(sim)
        return sim

    yield start
    for sim in started:
        sim.stop()


def assert_still(host):
    """A fresh connection sees the arm at rest and nobody in control of it."""
    robot = franky.Robot(host, realtime_config=franky.RealtimeConfig.Ignore)
    first_m = robot.current_cartesian_state.pose.end_effector_pose.translation
    time.sleep(0.5)
    last_m = robot.current_cartesian_state.pose.end_effector_pose.translation
    in_control = robot.is_in_control
    # franky-sim serves one client at a time: a connection a failed assertion's traceback kept
    # alive would leave every later client of this server waiting for ever.
    del robot
    np.testing.assert_allclose(last_m, first_m, atol=STILL_M)
    assert not in_control
