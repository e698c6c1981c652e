"""RoboCasa365 kitchen task, worker side: runs in the RoboCasa venv, not in RPent's.

Loaded by path in a `SubprocessEnv` worker, so it imports only numpy, gymnasium and the
simulator (never `rpent_envs`). `rpent_envs.robocasa.env.RoboCasaEnv` documents the
observations, actions and settings.
"""

from __future__ import annotations

import difflib
import os
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

ROBOT = "PandaOmron"
CAMERAS = {"image": "robot0_agentview_left", "wrist_image": "robot0_eye_in_hand"}
# state = eef position and quaternion in the base frame, gripper fingers, base pose (world).
STATE_KEYS = (
    "robot0_base_to_eef_pos",
    "robot0_base_to_eef_quat",
    "robot0_gripper_qpos",
    "robot0_base_pos",
    "robot0_base_quat",
)
STATE_DIM = 16
# PandaOmron's default composite controller: arm OSC pose (6), torso (1), base (3),
# gripper (1), base mode (1).
ACTION_DIM = 12
CONTROL_FREQ_HZ = 20
# Folders of the downloaded asset packs (the wheel ships only a few fixtures and no objects).
REQUIRED_ASSET_DIRS = (
    "arenas",
    "textures",
    "fixtures/sinks",
    "fixtures/fridges",
    "objects/objaverse",
    "objects/lightwheel",
    "objects/aigen_objs",
)
ASSETS_HELP = """RoboCasa's kitchen assets (~10 GB, from outside PyPI) are missing: {missing}.
Install them into the asset root {root} with the RoboCasa venv's interpreter:
  {python} -m robocasa.scripts.download_kitchen_assets --type all
or keep them outside the venv, in a folder DIR named by ROBOCASA_ASSETS_PATH (the env's
assets_path= argument sets it): copy the bundled files first, then download into DIR:
  mkdir -p DIR && cp -r {bundled}/. DIR
  {download_cli} --assets-path DIR --no-macros -y
  export ROBOCASA_ASSETS_PATH=DIR"""


def assets_root() -> Path:
    """The asset root robocasa reads: `$ROBOCASA_ASSETS_PATH`, else the package's own folder."""
    import robocasa.models

    return Path(robocasa.models.assets_root)


def missing_assets_error(root: Path, missing: list[str]) -> FileNotFoundError:
    """The error that says which assets are missing and how to install them."""
    import robocasa

    message = ASSETS_HELP.format(
        missing=", ".join(missing),
        root=root,
        python=sys.executable,
        bundled=Path(robocasa.__path__[0]) / "models" / "assets",
        download_cli=Path(sys.executable).parent / "robocasa-download-assets",
    )
    return FileNotFoundError(message)


def check_assets() -> None:
    """Raise `FileNotFoundError` with install instructions when asset packs are missing."""
    root = assets_root()
    missing = [name for name in REQUIRED_ASSET_DIRS if not any((root / name).glob("*"))]
    if missing:
        raise missing_assets_error(root, missing)


def import_robocasa() -> tuple[Any, dict[str, Any]]:
    """Import robocasa (registers its kitchen tasks with robosuite) headless.

    Returns:
        robocasa's `create_env` function and robosuite's registry of env classes.
    """
    os.environ.setdefault("MUJOCO_GL", "egl")
    import robocasa  # noqa: F401  (registers the kitchen tasks)
    from robocasa.utils.env_utils import create_env
    from robosuite.environments.base import REGISTERED_ENVS

    return create_env, REGISTERED_ENVS


class RoboCasaBackend(gym.Env):
    """One RoboCasa kitchen task as a flat-Dict Gymnasium env (worker side)."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": CONTROL_FREQ_HZ}

    def __init__(
        self,
        task: str,
        image_size: int = 128,
        render_mode: str | None = None,
        split: str | None = None,
        layout_and_style_ids: list[list[int]] | None = None,
    ) -> None:
        """Build the robosuite env; the kitchen model itself is loaded by the first reset."""
        create_env, registered = import_robocasa()
        if task not in registered:
            close = difflib.get_close_matches(task, list(registered), n=3)
            raise ValueError(f"task={task!r} is not a RoboCasa task; close names: {close}")
        self.task = task
        self.render_mode = render_mode
        self._sim = create_env(
            env_name=task,
            robots=ROBOT,
            camera_names=list(CAMERAS.values()),
            camera_widths=image_size,
            camera_heights=image_size,
            split=split,
            layout_and_style_ids=layout_and_style_ids,
        )
        image_space = gym.spaces.Box(0, 255, (image_size, image_size, 3), np.uint8)
        state_space = gym.spaces.Box(-np.inf, np.inf, (STATE_DIM,), np.float32)
        spaces = {"image": image_space, "wrist_image": image_space, "state": state_space}
        self.observation_space = gym.spaces.Dict(spaces)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (ACTION_DIM,), np.float32)
        self.task_description = ""
        self.episode_seed: int | None = None
        self._last_obs: dict[str, np.ndarray] | None = None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Sample a kitchen layout, style and object placement and return the first frame."""
        super().reset(seed=seed)
        check_assets()
        self.episode_seed = (
            int(seed) if seed is not None else int(self.np_random.integers(2**31 - 1))
        )
        self._sim.rng = np.random.default_rng(self.episode_seed)
        raw_obs = self._sim.reset()
        self._check_action_dim()
        self.task_description = str(self._sim.get_ep_meta().get("lang", ""))
        self._last_obs = self._observation(raw_obs)
        return self._last_obs, self._info(success=False)

    def step(
        self, action: np.ndarray
    ) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        """Apply one action for one 0.05 s control step."""
        if self._last_obs is None:
            raise RuntimeError("call reset() before step(): the kitchen is built at reset")
        action = np.asarray(action, dtype=np.float64)
        if action.shape != (ACTION_DIM,):
            raise ValueError(f"action has shape {action.shape}; expected ({ACTION_DIM},)")
        if not np.all(np.isfinite(action)):
            raise ValueError(f"action contains NaN or inf: {action}; send finite values")
        raw_obs, _, _, _ = self._sim.step(np.clip(action, -1.0, 1.0))
        success = bool(self._sim._check_success())
        self._last_obs = self._observation(raw_obs)
        return self._last_obs, float(success), success, False, self._info(success)

    def render(self) -> np.ndarray | None:
        """The main camera's last image when `render_mode="rgb_array"`."""
        if self.render_mode != "rgb_array" or self._last_obs is None:
            return None
        return self._last_obs["image"]

    def close(self) -> None:
        """Release MuJoCo and its renderer."""
        if getattr(self._sim, "sim", None) is not None:
            self._sim.close()

    def _check_action_dim(self) -> None:
        low, _ = self._sim.action_spec
        if low.shape != (ACTION_DIM,):
            raise RuntimeError(
                f"{ROBOT}'s controller takes {low.shape[0]} action values, this adapter "
                f"{ACTION_DIM}: the RoboCasa venv has another robosuite controller config"
            )

    def _observation(self, raw_obs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        # robosuite renders bottom-up (OpenGL); RoboCasa's datasets flip images vertically.
        obs = {
            key: np.ascontiguousarray(raw_obs[f"{camera}_image"][::-1])
            for key, camera in CAMERAS.items()
        }
        obs["state"] = np.concatenate([raw_obs[key] for key in STATE_KEYS]).astype(np.float32)
        return obs

    def _info(self, success: bool) -> dict[str, Any]:
        return {
            "success": success,
            "is_success": success,
            "task": self.task_description,
            "episode_seed": self.episode_seed,
        }
