"""`RPent/RoboTwin-v0` on real rlinf-robotwin-runtime in its own Python 3.11 venv.

Up to the asset boundary everything runs for real: the venv (CI builds the light variant:
the runtime's exact pins except a CPU torch from local disk, see rpent_envs/robotwin/install.py),
the worker under Python 3.11 + gymnasium 0.29, the errors a user gets without the assets (the
env checks them before importing the task's code) and, in the backend, the import of the
task's code (SAPIEN, torch, mplib, open3d, ...). Scenes need RoboTwin's
asset snapshot, which only comes from a model hub outside the package registries: those tests
run when ROBOTWIN_ASSETS_ROOT names it (and want a Vulkan GPU: SAPIEN ray-traces).
"""

import os
import subprocess
import textwrap
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import rpent_envs
from rpent_envs.robotwin.install import ASSETS_VARIABLE, PYTHON_VARIABLE
from rpent_envs.subprocess_env.venv import resolve_backend_python

pytestmark = [pytest.mark.sim, pytest.mark.subprocess]

ASSETS_ROOT = os.environ.get(ASSETS_VARIABLE)
BACKEND_FILE = Path(rpent_envs.__file__).parent / "robotwin" / "backend.py"
needs_assets = pytest.mark.skipif(
    not ASSETS_ROOT,
    reason="RoboTwin's assets come from a model hub outside the package registries; set "
    "ROBOTWIN_ASSETS_ROOT (robotwin-download-assets --output DIR) to run scenes",
)


@pytest.fixture(scope="module")
def robotwin_python():
    return resolve_backend_python("robotwin", None, PYTHON_VARIABLE)


def test_venv_is_python_311_with_the_runtime_pins(robotwin_python):
    probe = (
        "import sys, importlib.metadata as m; "
        "print(sys.version.split()[0], *(m.version(name) for name in "
        "('rlinf-robotwin-runtime', 'gymnasium', 'numpy', 'sapien', 'mplib')))"
    )
    output = subprocess.run(
        [str(robotwin_python), "-c", probe], capture_output=True, text=True, check=True
    ).stdout.split()
    python_version, runtime, gymnasium_version, numpy_version, sapien, mplib = output[-6:]
    assert python_version.startswith("3.11.")
    assert (runtime, gymnasium_version, numpy_version) == ("0.1.3", "0.29.1", "1.26.4")
    assert (sapien, mplib) == ("3.0.0b1", "0.2.1")


def test_without_assets_the_error_says_how_to_get_them(robotwin_python, monkeypatch):
    monkeypatch.delenv(ASSETS_VARIABLE, raising=False)
    with pytest.raises(FileNotFoundError) as caught:
        gym.make(rpent_envs.ROBOTWIN_ID, task="beat_block_hammer")
    message = str(caught.value)
    assert f"{ASSETS_VARIABLE} is not set" in message
    assert f"{robotwin_python.parent}/robotwin-download-assets --output DIR" in message
    assert "assets_root=" in message
    assert "raised in the env's worker process" in caught.value.__notes__[0]


def test_backend_imports_the_task_code(robotwin_python):
    probe = textwrap.dedent(
        f"""
        import importlib.util, sys
        spec = importlib.util.spec_from_file_location("backend", {str(BACKEND_FILE)!r})
        backend = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(backend)
        task_class = backend.load_task_class("beat_block_hammer")
        simulators = {{"sapien", "torch", "mplib", "open3d"}} & set(sys.modules)
        print(task_class.__name__, *sorted(simulators))
        """
    )
    output = subprocess.run(
        [str(robotwin_python), "-c", probe], capture_output=True, text=True, check=True
    ).stdout.split()
    assert output[-5:] == ["beat_block_hammer", "mplib", "open3d", "sapien", "torch"]


def test_incomplete_asset_roots_are_refused(robotwin_python, tmp_path):
    with pytest.raises(FileNotFoundError, match="missing directories") as caught:
        gym.make(rpent_envs.ROBOTWIN_ID, assets_root=tmp_path)
    assert str(tmp_path) in str(caught.value)
    for folder in ("background_texture", "embodiments/aloha-agilex", "objects"):
        (tmp_path / "assets" / folder).mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match="aloha-agilex/config.yml is missing"):
        gym.make(rpent_envs.ROBOTWIN_ID, assets_root=tmp_path)


def test_unknown_task_and_arguments(robotwin_python):
    with pytest.raises(ValueError, match="beat_block_hammer"):
        gym.make(rpent_envs.ROBOTWIN_ID, task="beat_the_block")
    with pytest.raises(ValueError, match="instruction_type='novel'"):
        gym.make(rpent_envs.ROBOTWIN_ID, instruction_type="novel")


@needs_assets
def test_episode_follows_the_rpent_convention():
    env = gym.make(rpent_envs.ROBOTWIN_ID, task="beat_block_hammer", render_mode="rgb_array")
    try:
        assert env.action_space.shape == (14,)
        assert env.observation_space["image"].shape == (240, 320, 3)
        obs, info = env.reset(seed=0)
        assert obs in env.observation_space
        assert isinstance(info["task"], str) and info["task"]
        assert env.unwrapped.task_description == info["task"]
        assert info["success"] is False and info["scene_seed"] >= 0
        hold = obs["state"].copy()  # joint targets in the action layout: stay put
        obs, reward, terminated, truncated, info = env.step(hold)
        np.testing.assert_allclose(obs["state"], hold, atol=1e-3)
        assert reward in (0.0, 1.0) and isinstance(terminated, bool)
        np.testing.assert_array_equal(env.render(), obs["image"])
    finally:
        env.close()
