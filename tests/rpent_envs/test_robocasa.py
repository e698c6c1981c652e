"""`RPent/RoboCasa-v0` on real RoboCasa (rlinf-robocasa365, praxis-robosuite) in its own venv.

Up to the asset boundary everything runs for real: the venv `rpent-backend-venv robocasa`
made (CI builds it in .ci/setup), the worker, robocasa's import and task construction, and
the error a user gets without the kitchen assets. Episodes need the ~10 GB of kitchen assets
that only come from outside the package registries: those tests run when
ROBOCASA_ASSETS_PATH names a complete asset root.
"""

import os
import subprocess

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env

import rpent_envs
from rpent_envs.robocasa.install import PYTHON_VARIABLE
from rpent_envs.subprocess_env.venv import resolve_backend_python

pytestmark = [pytest.mark.sim, pytest.mark.subprocess]

IMAGE_SIZE = 32
ASSETS_ROOT = os.environ.get("ROBOCASA_ASSETS_PATH")
needs_assets = pytest.mark.skipif(
    not ASSETS_ROOT,
    reason="RoboCasa's kitchen assets (~10 GB) come from outside the package registries; "
    "set ROBOCASA_ASSETS_PATH to a complete asset root to run episodes",
)


@pytest.fixture(scope="module")
def robocasa_python():
    return resolve_backend_python("robocasa", None, PYTHON_VARIABLE)


@pytest.fixture(scope="module")
def empty_assets(tmp_path_factory):
    return tmp_path_factory.mktemp("robocasa_assets")


@pytest.fixture(scope="module")
def env_without_assets(robocasa_python, empty_assets):
    env = gym.make(rpent_envs.ROBOCASA_ID, image_size=IMAGE_SIZE, assets_path=empty_assets)
    yield env
    env.close()


@pytest.fixture(scope="module")
def env():
    env = gym.make(
        rpent_envs.ROBOCASA_ID,
        image_size=IMAGE_SIZE,
        render_mode="rgb_array",
        assets_path=ASSETS_ROOT,
    )
    yield env
    env.close()


def test_venv_has_praxis_robosuite_and_old_mujoco_beside_rpents_robosuite(robocasa_python):
    probe = (
        "import importlib.metadata as m, importlib.util as u; "
        "print(m.version('praxis-robosuite'), m.version('mujoco'), u.find_spec('robosuite').origin)"
    )
    output = subprocess.run(
        [str(robocasa_python), "-c", probe], capture_output=True, text=True, check=True
    ).stdout.split()
    praxis_version, mujoco_version, robosuite_file = output[-3:]
    assert praxis_version == "1.5.2.post1"
    assert tuple(int(part) for part in mujoco_version.split(".")[:2]) < (3, 10)
    assert str(robocasa_python.parent.parent) in robosuite_file
    # RPent's own venv keeps LIBERO's robosuite 1.4 (the reason RoboCasa runs apart).
    import importlib.metadata

    assert importlib.metadata.version("robosuite") == "1.4.0"


def test_registered_env_has_the_rpent_spaces(env_without_assets, robocasa_python):
    env = env_without_assets
    space = env.observation_space
    assert set(space.spaces) == {"image", "wrist_image", "state"}
    assert space["image"] == gym.spaces.Box(0, 255, (IMAGE_SIZE, IMAGE_SIZE, 3), np.uint8)
    assert space["wrist_image"] == space["image"]
    assert space["state"].shape == (16,) and space["state"].dtype == np.float32
    assert env.action_space == gym.spaces.Box(-1.0, 1.0, (12,), np.float32)
    assert env.spec.max_episode_steps == 500
    assert env.metadata["render_fps"] == 20
    runtime = env.unwrapped.worker_runtime
    assert runtime["executable"].startswith(str(robocasa_python.parent))
    assert env.unwrapped.get_attr("task") == "PickPlaceCounterToCabinet"
    assert env.unwrapped.task_description == ""  # sampled with the scene at reset


def test_reset_without_assets_says_how_to_install_them(env_without_assets, empty_assets):
    with pytest.raises(FileNotFoundError) as caught:
        env_without_assets.reset(seed=0)
    message = str(caught.value)
    assert "kitchen assets" in message and "objects/objaverse" in message
    assert str(empty_assets) in message  # the asset root it looked in
    assert "robocasa.scripts.download_kitchen_assets --type all" in message
    assert "robocasa-download-assets --assets-path DIR" in message
    assert "ROBOCASA_ASSETS_PATH" in message
    with pytest.raises(FileNotFoundError, match="kitchen assets"):
        env_without_assets.reset(seed=1)  # the worker is still there and still says so


def test_unknown_task_names_close_matches():
    with pytest.raises(ValueError, match="PickPlaceCounterToCabinet"):
        gym.make(rpent_envs.ROBOCASA_ID, task="PickPlaceCounterToCabinett")


def test_missing_venv_says_how_to_create_it(monkeypatch, tmp_path):
    monkeypatch.delenv(PYTHON_VARIABLE, raising=False)
    monkeypatch.setenv("RPENT_VENVS_DIR", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="rpent-backend-venv robocasa"):
        gym.make(rpent_envs.ROBOCASA_ID)


def test_invalid_arguments_fail_before_starting_a_worker():
    with pytest.raises(ValueError, match="image_size=8"):
        gym.make(rpent_envs.ROBOCASA_ID, image_size=8)
    with pytest.raises(ValueError, match="split='test'"):
        gym.make(rpent_envs.ROBOCASA_ID, split="test")


@needs_assets
def test_episode_follows_the_rpent_convention(env):
    obs, info = env.reset(seed=0)
    assert obs in env.observation_space
    assert isinstance(info["task"], str) and info["task"]
    assert env.unwrapped.task_description == info["task"]
    assert info["success"] is False and info["is_success"] is False
    assert obs["image"].std() > 0 and obs["wrist_image"].std() > 0
    for _ in range(3):
        obs, reward, terminated, truncated, info = env.step(np.zeros(12, np.float32))
        assert obs in env.observation_space and reward in (0.0, 1.0)
    np.testing.assert_array_equal(env.render(), obs["image"])
    first, _ = env.reset(seed=3)
    again, _ = env.reset(seed=3)
    np.testing.assert_array_equal(first["state"], again["state"])


@needs_assets
def test_passes_the_gymnasium_env_checker(env):
    gym_check_env(env.unwrapped, skip_render_check=True)
