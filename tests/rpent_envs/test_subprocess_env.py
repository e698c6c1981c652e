"""SubprocessEnv with real worker processes, one of them Python 3.11 + gymnasium 0.29."""

import gc
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env

from rpent_envs.subprocess_env import (
    RemoteError,
    SubprocessEnv,
    WorkerDiedError,
    WorkerTimeoutError,
)
from rpent_envs.subprocess_env.venv import VenvSpec, ensure_venv, venvs_dir
from rpent_envs.subprocess_env.wire import Channel

pytestmark = pytest.mark.subprocess

BACKEND_FILE = Path(__file__).with_name("subprocess_backend.py")
FACTORY = f"{BACKEND_FILE}:make_counting_env"
OLD_STACK = VenvSpec(  # what RoboTwin's venv has: Python 3.11, gymnasium 0.29, numpy 1.26
    name="test-py311-gymnasium029",
    python_version="3.11",
    install_steps=(("numpy==1.26.4", "gymnasium==0.29.1"),),
    smoke_test="import numpy, gymnasium",
)


@pytest.fixture(scope="module")
def old_python():
    return ensure_venv(OLD_STACK, venvs_dir() / OLD_STACK.name)


@pytest.fixture(scope="module")
def old_env(old_python):
    env = SubprocessEnv(FACTORY, {"height": 24, "width": 32}, python=old_python)
    yield env
    env.close()


def process_gone(pid: int, within_s: float = 10.0) -> bool:
    """Whether `pid` is gone (or a zombie nobody reaped) within the time limit."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except FileNotFoundError:
            return True
        if "State:\tZ" in status:
            return True
        time.sleep(0.05)
    return False


def test_worker_runs_python_311_with_gymnasium_029(old_env):
    assert sys.version_info[:2] == (3, 12)
    versions = old_env.get_attr("versions")
    assert versions["python"].startswith("3.11.")
    assert versions["gymnasium"] == "0.29.1" and versions["numpy"] == "1.26.4"
    assert old_env.worker_runtime["python"] == versions["python"]


def test_spaces_and_episode_match_the_env_in_process(old_env):
    sys.path.insert(0, str(BACKEND_FILE.parent))
    try:
        from subprocess_backend import CountingEnv
    finally:
        sys.path.pop(0)
    local = CountingEnv(height=24, width=32)
    assert old_env.observation_space == local.observation_space
    assert old_env.action_space == local.action_space
    assert list(old_env.observation_space.spaces) == ["image", "state"]
    assert old_env.metadata["render_modes"] == ["rgb_array"]
    remote_obs, remote_info = old_env.reset(seed=5)
    local_obs, local_info = local.reset(seed=5)
    assert remote_info == local_info
    for key in local_obs:
        np.testing.assert_array_equal(remote_obs[key], local_obs[key])
        assert remote_obs[key].dtype == local_obs[key].dtype
    actions = [np.array([0.5, -0.25], np.float32), np.array([1.0, 1.0], np.float32)] * 2
    for action in actions[:3]:
        remote = old_env.step(action)
        expected = local.step(action)
        np.testing.assert_array_equal(remote[0]["state"], expected[0]["state"])
        assert remote[1:4] == expected[1:4]
        np.testing.assert_array_equal(remote[4]["action_received"], action)
        assert remote[4]["extras"]["count"] == expected[4]["extras"]["count"]
        np.testing.assert_array_equal(remote[4]["extras"]["flags"], [True, False])
        assert remote[4]["extras"]["none"] is None
    assert remote[2] is True and remote[4]["is_success"] is True
    assert isinstance(remote[1], float) and isinstance(remote[2], bool)
    assert old_env.get_attr("task_description") == "count to three"


def test_passes_gymnasium_and_sb3_env_checkers(old_python):
    env = SubprocessEnv(FACTORY, {"render_mode": "rgb_array"}, python=old_python)
    try:
        gym_check_env(env, skip_render_check=False)
        sb3_check_env(env)
        env.reset(seed=1)
        assert env.render().shape == (16, 16, 3)
    finally:
        env.close()


def test_large_images_travel_as_raw_bytes():
    env = SubprocessEnv(FACTORY, {"height": 480, "width": 640})
    try:
        obs, _ = env.reset(seed=0)
        assert obs["image"].shape == (480, 640, 3) and obs["image"].flags.writeable
        started = time.perf_counter()
        for _ in range(20):
            obs, *_ = env.step(np.zeros(2, np.float32))
        per_step_s = (time.perf_counter() - started) / 20
        assert per_step_s < 0.05, f"a 900 KB observation took {per_step_s * 1e3:.1f} ms"
    finally:
        env.close()


def test_builtin_exception_keeps_its_type_and_the_env_stays_usable(old_env):
    with pytest.raises(FileNotFoundError, match="assets missing under /nowhere") as caught:
        old_env.reset(options={"fail": "raise"})
    assert "raised in the env's worker process" in caught.value.__notes__[0]
    assert "subprocess_backend.py" in caught.value.__notes__[0]
    with pytest.raises(RemoteError, match="only the worker knows") as caught:
        old_env.reset(options={"fail": "raise_custom"})
    assert caught.value.remote_type.endswith("BackendSpecificError")
    with pytest.raises(AttributeError, match="no_such_attribute"):
        old_env.get_attr("no_such_attribute")
    with pytest.raises(TypeError, match="object cannot be sent"):
        old_env.get_attr("unsendable")
    obs, _ = old_env.reset(seed=0)
    assert obs["image"].shape == (24, 32, 3)


@pytest.mark.parametrize(("fail", "exit_text"), [("segfault", "SIGSEGV"), ("exit", "code 3")])
def test_crashed_worker_raises_worker_died_error(old_python, fail, exit_text):
    env = SubprocessEnv(FACTORY, python=old_python)
    pid = env.worker_pid
    with pytest.raises(WorkerDiedError, match=exit_text) as caught:
        env.reset(options={"fail": fail})
    assert f"reset seed=None fail={fail}" in str(caught.value)  # the worker's last output
    assert process_gone(pid)
    with pytest.raises(WorkerDiedError, match="make a new env"):
        env.step(np.zeros(2, np.float32))
    env.close()


def test_hanging_worker_times_out_and_is_killed(old_python):
    env = SubprocessEnv(FACTORY, python=old_python, call_timeout_s=1.0)
    pid = env.worker_pid
    started = time.monotonic()
    with pytest.raises(WorkerTimeoutError, match="did not answer reset within 1 s"):
        env.reset(options={"fail": "hang"})
    assert time.monotonic() - started < 5.0
    assert process_gone(pid)
    with pytest.raises(WorkerDiedError, match="timed out"):
        env.reset()
    env.close()


def test_close_and_garbage_collection_end_the_worker(old_python):
    env = SubprocessEnv(FACTORY, python=old_python)
    pid = env.worker_pid
    env.close()
    env.close()
    assert process_gone(pid)
    with pytest.raises(WorkerDiedError, match="closed"):
        env.reset()
    forgotten = SubprocessEnv(FACTORY, python=old_python)
    pid = forgotten.worker_pid
    del forgotten
    gc.collect()
    assert process_gone(pid)


@pytest.mark.parametrize("in_thread", [False, True], ids=["main-thread", "other-thread"])
def test_no_orphan_survives_a_killed_parent(old_python, in_thread):
    parent_script = textwrap.dedent(
        f"""
        import threading, time
        from rpent_envs.subprocess_env import SubprocessEnv
        envs = []
        def make():
            envs.append(SubprocessEnv({FACTORY!r}, python={str(old_python)!r}))
        if {in_thread}:
            thread = threading.Thread(target=make)
            thread.start()
            thread.join()
        else:
            make()
        print(envs[0].worker_pid, flush=True)
        time.sleep(600)
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", parent_script], stdout=subprocess.PIPE)
    try:
        worker_pid = int(parent.stdout.readline())
        assert not process_gone(worker_pid, within_s=0.5)
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        assert process_gone(worker_pid), f"worker {worker_pid} outlived its parent"
    finally:
        parent.kill()
        parent.stdout.close()


def worker_children() -> set[str]:
    found = subprocess.run(
        ["pgrep", "-P", str(os.getpid()), "-f", "worker.py"], capture_output=True, text=True
    )
    return set(found.stdout.split())


def test_failed_construction_raises_and_leaves_no_worker(old_python):
    workers_before = worker_children()
    with pytest.raises(TypeError, match="unexpected keyword argument"):
        SubprocessEnv(FACTORY, {"no_such_argument": 1}, python=old_python)
    with pytest.raises(ValueError, match="factory 'no_colon'"):
        SubprocessEnv("no_colon", python=old_python)
    with pytest.raises(FileNotFoundError, match="/no/such/python"):
        SubprocessEnv(FACTORY, python="/no/such/python")
    assert worker_children() == workers_before


def test_wire_round_trip_of_unusual_arrays_and_refusals():
    left, right = socket.socketpair()
    sender, receiver = Channel(left), Channel(right)
    message = {
        "empty": np.zeros((0, 3), np.float32),
        "strided": np.arange(24, dtype=np.int16).reshape(4, 6)[:, ::2],
        "big_endian": np.array([1.5, -2.0], dtype=">f8"),
        "zero_dim": np.asarray(np.int64(1)),  # e.g. a Discrete action from space.sample()
        "scalars": [np.float32(0.5), np.int64(7), np.bool_(True)],
        "nested": {"text": "ok", "tuple": (1, None)},
    }
    sender.send(message)
    received = receiver.receive(timeout_s=5)
    for key in ("empty", "strided", "big_endian", "zero_dim"):
        np.testing.assert_array_equal(received[key], message[key])
        assert received[key].dtype == message[key].dtype
        assert received[key].shape == message[key].shape
    assert received["scalars"] == [0.5, 7, True]
    assert received["nested"] == {"text": "ok", "tuple": [1, None]}
    with pytest.raises(TypeError, match=r"message\.bad: dict key 1 is not a str"):
        sender.send({"bad": {1: "x"}})
    with pytest.raises(TypeError, match=r"message\.obj: arrays of Python objects"):
        sender.send({"obj": np.array([object()])})
    sender.close()
    receiver.close()


def test_space_types_survive_the_trip(old_python, tmp_path):
    backend = tmp_path / "spaces_backend.py"
    backend.write_text(
        textwrap.dedent(
            """
            import gymnasium as gym, numpy as np
            class SpacesEnv(gym.Env):
                def __init__(self):
                    self.observation_space = gym.spaces.Dict({
                        "discrete": gym.spaces.Discrete(5, start=-2),
                        "binary": gym.spaces.MultiBinary([2, 3]),
                        "multi": gym.spaces.MultiDiscrete([3, 4]),
                        "text": gym.spaces.Text(12, min_length=1, charset="abc "),
                        "pair": gym.spaces.Tuple((gym.spaces.Box(-1, 2, (3,)),
                                                  gym.spaces.Discrete(2))),
                    })
                    self.action_space = gym.spaces.Box(np.array([0, -1]), np.array([1, 1]),
                                                       dtype=np.float64)
            """
        )
    )
    env = SubprocessEnv(f"{backend}:SpacesEnv", python=old_python)
    try:
        space = env.observation_space
        assert space["discrete"] == gym.spaces.Discrete(5, start=-2)
        assert space["binary"] == gym.spaces.MultiBinary([2, 3])
        assert space["multi"] == gym.spaces.MultiDiscrete([3, 4])
        assert space["text"] == gym.spaces.Text(12, min_length=1, charset="abc ")
        assert space["pair"][0] == gym.spaces.Box(-1, 2, (3,), np.float32)
        assert env.action_space == gym.spaces.Box(
            np.array([0, -1]), np.array([1, 1]), dtype=np.float64
        )
    finally:
        env.close()


def test_ensure_venv_does_nothing_when_its_stamp_matches(old_python):
    started = time.monotonic()
    assert ensure_venv(OLD_STACK, venvs_dir() / OLD_STACK.name) == old_python
    assert time.monotonic() - started < 1.0
    assert (old_python.parent.parent / ".rpent-venv-stamp").read_text().strip() == (
        OLD_STACK.fingerprint()
    )
