"""RoboTwin 2.0 task, worker side: runs in the RoboTwin venv (Python 3.11), not in RPent's.

Loaded by path in a `SubprocessEnv` worker, so it imports only numpy, gymnasium and the
simulator (never `rpent_envs`). `rpent_envs.robotwin.env.RoboTwinEnv` documents the
observations, actions and settings. The scene setup follows rlinf-robotwin-runtime's own
`robotwin.envs.vector_env`, for one env.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import logging
import os
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

logger = logging.getLogger(__name__)

ASSETS_VARIABLE = "ROBOTWIN_ASSETS_ROOT"
CAMERA_TYPE = "D435"  # the head and wrist cameras, 320x240, as RoboTwin's evaluations use
CAMERAS = {
    "image": "head_camera",
    "wrist_image": "left_camera",
    "right_wrist_image": "right_camera",
}
JOINT_LIMIT_RAD = 2 * np.pi
MAX_UNSTABLE_SEEDS = 50  # seeds to try when objects do not settle in a sampled scene
ASSETS_HELP = """RoboTwin's assets (objects, embodiments, textures: several GB from a model hub,
outside PyPI) are needed and {problem}.
Download them with the RoboTwin venv's command (into an empty or new folder DIR):
  {download_cli} --output DIR
then point {variable} at DIR (the env's assets_root= argument sets it for the worker)."""


def assets_error(problem: str) -> FileNotFoundError:
    """The error that says what is wrong with the assets and how to install them."""
    download_cli = Path(sys.executable).parent / "robotwin-download-assets"
    message = ASSETS_HELP.format(
        problem=problem, download_cli=download_cli, variable=ASSETS_VARIABLE
    )
    return FileNotFoundError(message)


def checked_assets_root() -> Path:
    """The validated asset root from `$ROBOTWIN_ASSETS_ROOT`.

    Raises:
        FileNotFoundError: The variable is unset or the folder is not a complete snapshot.
    """
    configured = os.environ.get(ASSETS_VARIABLE)
    if not configured:
        raise assets_error(f"{ASSETS_VARIABLE} is not set")
    from robotwin.assets import validate_root

    try:
        identity = validate_root(configured)
    except ValueError as error:
        raise assets_error(f"{ASSETS_VARIABLE}={configured} is not usable: {error}") from None
    # RoboTwin's task code reads ASSETS_PATH; its vector env sets it the same way.
    os.environ["ASSETS_PATH"] = identity["root"]
    return Path(identity["root"])


def packaged_tasks() -> list[str]:
    """Names of the task modules in `robotwin.envs` (e.g. "beat_block_hammer")."""
    spec = importlib.util.find_spec("robotwin.envs")
    assert spec is not None and spec.submodule_search_locations
    folder = Path(next(iter(spec.submodule_search_locations)))
    skip = {"vector_env", "reward"}
    return sorted(
        path.stem
        for path in folder.glob("*.py")
        if not path.stem.startswith("_") and path.stem not in skip
    )


def check_task(task: str) -> None:
    """Raise `ValueError` unless `task` is a packaged RoboTwin task (imports nothing heavy)."""
    tasks = packaged_tasks()
    if task not in tasks:
        raise ValueError(f"task={task!r} is not a RoboTwin task; use one of {tasks}")


def load_task_class(task: str) -> type:
    """Import `robotwin.envs.<task>` (SAPIEN, torch, mplib, open3d, ...); return its class."""
    check_task(task)
    return getattr(importlib.import_module(f"robotwin.envs.{task}"), task)


def embodiment_args(assets_root: Path, embodiment: list[str]) -> dict[str, Any]:
    """Robot files and configs of one embodiment ([name]) or a pair ([left, right, distance])."""
    import yaml
    from robotwin.config import load_task_config

    files = load_task_config("_embodiment_config")

    def robot_file(name: str) -> str:
        if name not in files or files[name]["file_path"] is None:
            raise ValueError(f"embodiment {name!r} is not packaged; use one of {sorted(files)}")
        return str(assets_root / files[name]["file_path"])

    def robot_config(path: str) -> dict[str, Any]:
        config_file = Path(path) / "config.yml"
        if not config_file.is_file():
            raise assets_error(f"the embodiment file {config_file} is missing")
        with config_file.open(encoding="utf-8") as stream:
            return yaml.safe_load(stream)

    if len(embodiment) == 1:
        left = right = robot_file(embodiment[0])
        args: dict[str, Any] = {"dual_arm_embodied": True, "embodiment_name": embodiment[0]}
    elif len(embodiment) == 3:
        left, right = robot_file(embodiment[0]), robot_file(embodiment[1])
        name = f"{embodiment[0]}_{embodiment[1]}"
        args = {
            "dual_arm_embodied": False,
            "embodiment_dis": embodiment[2],
            "embodiment_name": name,
        }
    else:
        raise ValueError(f"embodiment={embodiment!r}: use [name] or [left, right, distance_m]")
    args.update(left_robot_file=left, right_robot_file=right)
    args.update(
        left_embodiment_config=robot_config(left), right_embodiment_config=robot_config(right)
    )
    return args


def task_args(task: str, config: str, embodiment: list[str], assets_root: Path) -> dict[str, Any]:
    """The keyword arguments of RoboTwin's `setup_demo` for one evaluation-mode episode."""
    from robotwin.config import load_task_config

    args = load_task_config(config)
    camera = load_task_config("_camera_config")[CAMERA_TYPE]
    args.update(embodiment_args(assets_root, embodiment))
    args.update(
        task_name=task,
        embodiment=list(embodiment),
        planner_backend="mplib",  # cuRobo is not on PyPI; mplib is a pinned dependency
        head_camera_h=camera["h"],
        head_camera_w=camera["w"],
        eval_mode=True,  # step limit from the task's evaluation horizon
        render_freq=0,
        save_data=False,
        eval_video_log=False,
    )
    args["camera"] = {**args["camera"], "head_camera_type": CAMERA_TYPE}
    args["camera"]["wrist_camera_type"] = CAMERA_TYPE
    return args


def quietly(function: Any, *args: Any, **kwargs: Any) -> Any:
    """Call `function` with its prints (RoboTwin prints every step) sent to the debug log."""
    captured = io.StringIO()
    with contextlib.redirect_stdout(captured):
        result = function(*args, **kwargs)
    if captured.getvalue().strip():
        logger.debug("%s", captured.getvalue().strip())
    return result


class RoboTwinBackend(gym.Env):
    """One RoboTwin 2.0 task as a flat-Dict Gymnasium env (worker side)."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(
        self,
        task: str,
        embodiment: list[Any],
        config: str = "demo_clean",
        instruction_type: str = "seen",
        render_mode: str | None = None,
    ) -> None:
        """Check the task and assets (fast), import the task's code, define the spaces.

        The scene itself is built at each reset.
        """
        from robotwin.config import load_task_config

        check_task(task)
        self._args = task_args(task, config, list(embodiment), checked_assets_root())
        self.task_class = load_task_class(task)
        self.task = task
        self.instruction_type = instruction_type
        self.render_mode = render_mode
        left_dofs = len(self._args["left_embodiment_config"]["arm_joints_name"][0])
        right_dofs = len(self._args["right_embodiment_config"]["arm_joints_name"][1])
        self.action_space = joint_action_space(left_dofs, right_dofs)
        camera = load_task_config("_camera_config")[CAMERA_TYPE]
        image_space = gym.spaces.Box(0, 255, (camera["h"], camera["w"], 3), np.uint8)
        spaces = {key: image_space for key in CAMERAS}
        state_space = gym.spaces.Box(-np.inf, np.inf, (left_dofs + right_dofs + 2,), np.float32)
        self.observation_space = gym.spaces.Dict({**spaces, "state": state_space})
        self.task_description = ""
        self.episode_seed: int | None = None
        self._scene: Any = None
        self._last_obs: dict[str, np.ndarray] | None = None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Build a new scene from the seed (the next seeds when its objects do not settle)."""
        super().reset(seed=seed)
        self.episode_seed = (
            int(seed) if seed is not None else int(self.np_random.integers(2**31 - 1))
        )
        self._close_scene()
        self._scene, scene_seed = self._settled_scene(self.episode_seed)
        self.task_description = self._instruction(scene_seed)
        self._scene.set_instruction(self.task_description)
        self._last_obs = self._observation()
        return self._last_obs, self._info(success=False, scene_seed=scene_seed)

    def step(
        self, action: np.ndarray
    ) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        """Move both arms to the joint targets (time-optimal path) and the grippers."""
        if self._scene is None:
            raise RuntimeError("call reset() before step(): the scene is built at reset")
        action = np.asarray(action, dtype=np.float64)
        if action.shape != self.action_space.shape:
            raise ValueError(f"action has shape {action.shape}; expected {self.action_space.shape}")
        if not np.all(np.isfinite(action)):
            raise ValueError(f"action contains NaN or inf: {action}; send finite values")
        action = np.clip(action, self.action_space.low, self.action_space.high)
        reward, terminated, truncated, _ = quietly(self._scene.gen_sparse_reward_data, action[None])
        self._last_obs = self._observation()
        success = bool(terminated[0])
        info = self._info(success=success, scene_seed=self._scene.ep_num)
        return self._last_obs, float(reward[0]), success, bool(truncated[0]), info

    def render(self) -> np.ndarray | None:
        """The head camera's last image when `render_mode="rgb_array"`."""
        if self.render_mode != "rgb_array" or self._last_obs is None:
            return None
        return self._last_obs["image"]

    def close(self) -> None:
        """Release the SAPIEN scene and renderer caches."""
        self._close_scene()

    def _close_scene(self) -> None:
        if self._scene is not None:
            quietly(self._scene.close_env, clear_cache=True)
            self._scene = None

    def _settled_scene(self, seed: int) -> tuple[Any, int]:
        from robotwin.envs.utils.create_actor import UnStableError

        for scene_seed in range(seed, seed + MAX_UNSTABLE_SEEDS):
            scene = self.task_class()
            try:
                quietly(scene.setup_demo, now_ep_num=scene_seed, seed=scene_seed, **self._args)
                return scene, scene_seed
            except UnStableError as error:
                logger.info(
                    "seed %d: objects did not settle (%s); trying the next", scene_seed, error
                )
                quietly(scene.close_env, clear_cache=True)
        raise RuntimeError(f"no stable scene for seeds {seed}..{seed + MAX_UNSTABLE_SEEDS - 1}")

    def _instruction(self, scene_seed: int) -> str:
        from robotwin.description import generate_episode_descriptions

        placeholders = self._scene.get_info() if hasattr(self._scene, "get_info") else {}
        generated = quietly(generate_episode_descriptions, self.task, [placeholders], 1, scene_seed)
        candidates = generated[0].get(self.instruction_type, []) if generated else []
        if not candidates:
            logger.warning(
                "no %s instruction for %s; using the task name", self.instruction_type, self.task
            )
            return self.task.replace("_", " ")
        return str(candidates[0])

    def _observation(self) -> dict[str, np.ndarray]:
        raw = quietly(self._scene.get_obs)
        cameras = raw["observation"]
        obs = {key: np.ascontiguousarray(cameras[name]["rgb"]) for key, name in CAMERAS.items()}
        obs["state"] = np.asarray(raw["joint_action"]["vector"], dtype=np.float32)
        return obs

    def _info(self, success: bool, scene_seed: int) -> dict[str, Any]:
        return {
            "success": success,
            "is_success": success,
            "task": self.task_description,
            "episode_seed": self.episode_seed,
            "scene_seed": int(scene_seed),
        }


def joint_action_space(left_dofs: int, right_dofs: int) -> gym.spaces.Box:
    """Absolute joint targets (rad) of each arm, each followed by its gripper (0 shut, 1 open)."""
    limit = JOINT_LIMIT_RAD
    low = np.concatenate([np.full(left_dofs, -limit), [0.0], np.full(right_dofs, -limit), [0.0]])
    high = np.concatenate([np.full(left_dofs, limit), [1.0], np.full(right_dofs, limit), [1.0]])
    return gym.spaces.Box(low.astype(np.float32), high.astype(np.float32), dtype=np.float32)
