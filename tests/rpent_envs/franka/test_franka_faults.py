"""Franka faults leave the arm commanded to stop and the env saying what happened.

A NaN reaching the backend, a reflex in the middle of an action chunk and a dropped connection,
each on franky-sim (MuJoCo FR3 on loopback; the reflex from fault_sim.py) where it can show
it, and on the in-memory arm for what a simulation cannot produce (a NaN state reading at the
start or at the end of a step, an unrecoverable error).
"""

import signal
import subprocess
import sys
import time

import gymnasium as gym
import numpy as np
import pytest
from franky_sim import STILL_M, assert_still

import rpent_envs
from rpent_envs.franka.backend import FrankaCommandError, FrankaConnectionError, FrankaControlError
from rpent_envs.franka.env import FrankaEnv
from rpent_envs.franka.memory_backend import MemoryFrankaBackend
from rpent_envs.franka.pose import Pose
from wrappers.chunking import execute_chunk

pytestmark = [pytest.mark.sim, pytest.mark.subprocess, pytest.mark.timeout(180, method="thread")]

CHUNK_STEPS = 20
SIM_ENV = {
    "target_position_m": (0.55, 0.0, 0.45),
    "box_half_extent_m": (0.08,) * 3,
    "reset_height_m": 0.05,
    "reset_dynamics_factor": 0.3,
}
CLIENT = f"""
import sys
import gymnasium as gym
import numpy as np
import rpent_envs

env = gym.make(rpent_envs.FRANKA_ID, host=sys.argv[1], **{SIM_ENV!r})
env.reset(seed=0)
for step in range(10_000):  # back and forth: a motion is always in progress
    env.step(np.array([(-1) ** (step // 3), 0, 0, 0, 0, 0, 1], np.float32))
    print(step, flush=True)
"""


def back_and_forth(steps):
    chunk = np.zeros((steps, 7), np.float32)
    chunk[:, 0] = [(-1) ** (step // 3) for step in range(steps)]
    return chunk


def memory_env():
    backend = MemoryFrankaBackend()
    return FrankaEnv(backend=backend, period_s=0.0), backend


# The in-memory arm.


def test_a_nan_state_reading_never_reaches_the_arm_and_stops_it():
    env, backend = memory_env()
    env.reset(seed=0)
    sent = len(backend.commanded_poses)
    backend.tcp_pose = Pose([np.nan, 0.0, 0.2], backend.tcp_pose.quat_xyzw)  # a broken reading
    with pytest.raises(FrankaCommandError, match="NaN or inf.*commanded to stop"):
        env.step(np.zeros(7, np.float32))
    assert len(backend.commanded_poses) == sent and backend.stops == 1
    with pytest.raises(gym.error.ResetNeeded):
        env.step(np.zeros(7, np.float32))


def test_a_nan_force_reading_truncates_the_episode_with_the_arm_stopped():
    env, backend = memory_env()
    observation, _ = env.reset(seed=0)
    backend.inject_sensor_glitch()  # the force estimate reads NaN from now on
    next_observation, _, terminated, truncated, info = env.step(np.zeros(7, np.float32))
    assert truncated and not terminated and backend.stops == 1
    assert info["invalid_state"].startswith("state[13]=nan, state[14]=nan")  # force, torque
    np.testing.assert_array_equal(next_observation["state"], observation["state"])
    with pytest.raises(gym.error.ResetNeeded):
        env.step(np.zeros(7, np.float32))
    observation, _ = env.reset(seed=0)  # the recovery clears the glitch
    assert np.isfinite(observation["state"]).all()


def test_a_reflex_mid_chunk_ends_the_chunk_with_the_arm_stopped():
    env, backend = memory_env()
    observation, _ = env.reset(seed=0)
    sent, steps = len(backend.commanded_poses), []

    def policy_hit_by_a_reflex(observation):
        steps.append(len(steps))
        if len(steps) == 4:  # the reflex strikes while the 4th target is on its way
            backend.inject_control_error("motion aborted by reflex! [cartesian_reflex]")
        return back_and_forth(CHUNK_STEPS)[len(steps) - 1]

    result = execute_chunk(env, observation, policy_hit_by_a_reflex, CHUNK_STEPS)
    assert result.truncated and len(result.rewards) == 4
    assert "cartesian_reflex" in result.info["control_error"]
    assert len(backend.commanded_poses) == sent + 3 and backend.stops == 1
    with pytest.raises(gym.error.ResetNeeded):
        env.step(np.zeros(7, np.float32))


def test_an_unrecoverable_error_commands_a_stop_and_says_how_to_clear_it():
    env, backend = memory_env()
    env.reset(seed=0)
    backend.inject_control_error("emergency stop pressed", recoverable=False)
    with pytest.raises(FrankaControlError, match="recovery failed.*Desk"):
        env.step(np.zeros(7, np.float32))
    assert backend.stops == 1


def test_a_dropped_connection_sends_nothing_until_reset_reconnects():
    env, backend = memory_env()
    env.reset(seed=0)
    sent = len(backend.commanded_poses)
    backend.drop_connection()
    with pytest.raises(FrankaConnectionError, match="connection dropped"):
        env.step(np.ones(7, np.float32))
    with pytest.raises(gym.error.ResetNeeded):
        env.step(np.ones(7, np.float32))
    assert len(backend.commanded_poses) == sent
    env.reset(seed=0)
    assert backend.recoveries == 2  # reset recovers before it moves


# franky-sim.


@pytest.fixture
def fault_sim(start_sim):
    """A server of its own per test: no client a test left connected can hold up the next."""
    sim = start_sim(fault=True)
    yield sim
    sim.stop()


def sim_env(sim):
    return gym.make(rpent_envs.FRANKA_ID, host=sim.host, **SIM_ENV)


def test_sim_a_nan_target_is_refused_and_the_arm_stops_short_of_its_target(fault_sim):
    env = sim_env(fault_sim)
    env.reset(seed=0)
    backend = env.unwrapped.backend
    start = backend.read_state().tcp_pose
    far = Pose(start.position_m + [0.1, 0.0, 0.0], start.quat_xyzw)
    backend.move_to(far, dynamics_factor=0.05)  # a slow motion, 10 cm long
    wait_until_moved(backend, start.position_m)  # is in progress
    target = Pose([np.nan, 0.0, 0.5], start.quat_xyzw)
    with pytest.raises(FrankaCommandError, match=f"{fault_sim.host}.*commanded to stop"):
        backend.move_to(target, dynamics_factor=0.3)
    stopped_m = backend.read_state().tcp_pose.position_m
    time.sleep(0.3)
    np.testing.assert_allclose(backend.read_state().tcp_pose.position_m, stopped_m, atol=STILL_M)
    assert np.linalg.norm(far.position_m - stopped_m) > 0.05  # stopped, far short of it
    *_, info = env.step(back_and_forth(1)[0])  # the stop left no error behind
    assert info["control_error"] is None
    env.close()
    assert_still(fault_sim.host)


def wait_until_moved(backend, start_m, timeout_s=30.0):
    """Return once the arm is more than `STILL_M` from `start_m` (franky-sim may run slower
    than real time: poll, never assume how far it got)."""
    deadline_s = time.monotonic() + timeout_s
    while time.monotonic() < deadline_s:
        position_m = backend.read_state().tcp_pose.position_m
        if np.linalg.norm(position_m - start_m) > STILL_M:
            return
        time.sleep(0.01)
    raise AssertionError(f"the arm did not move within {timeout_s} s")


def test_sim_a_reflex_mid_chunk_ends_the_chunk_and_leaves_the_arm_still(fault_sim):
    env = sim_env(fault_sim)
    observation, _ = env.reset(seed=0)
    fault_sim.process.send_signal(signal.SIGUSR1)  # aborts the next motion in progress
    result = execute_chunk(env, observation, back_and_forth(CHUNK_STEPS), CHUNK_STEPS)
    assert result.truncated and len(result.rewards) < CHUNK_STEPS  # the rest never ran
    assert "reflex" in result.info["control_error"]
    env.close()
    assert_still(fault_sim.host)


def test_sim_a_dropped_client_leaves_the_arm_still(start_sim):
    sim = start_sim()
    client = subprocess.Popen(
        [sys.executable, "-c", CLIENT, sim.host], stdout=subprocess.PIPE, text=True
    )
    for line in client.stdout:  # the arm is moving back and forth
        if int(line) >= 8:
            break
    client.kill()  # the connection drops mid-motion, as with a pulled cable
    client.wait()
    assert_still(sim.host)
