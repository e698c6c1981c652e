"""`RPent/RoboCasa-v0`: a RoboCasa365 kitchen task, simulated in the RoboCasa venv."""

from __future__ import annotations

import os
from pathlib import Path

from rpent_envs.robocasa.install import ASSETS_VARIABLE, PYTHON_VARIABLE
from rpent_envs.subprocess_env.backend_env import BackendVenv, VenvBackendEnv

BACKEND_FACTORY = f"{Path(__file__).resolve().parent / 'backend.py'}:RoboCasaBackend"
ROBOCASA_VENV = BackendVenv("robocasa", BACKEND_FACTORY, PYTHON_VARIABLE, ASSETS_VARIABLE)
CONTROL_FREQ_HZ = 20


class RoboCasaEnv(VenvBackendEnv):
    """A RoboCasa365 kitchen task: PandaOmron mobile manipulator, 20 Hz, out of process.

    RoboCasa needs robosuite 1.5 (praxis-robosuite) and MuJoCo < 3.10, which conflict with
    LIBERO's robosuite 1.4 in RPent's venv, so the simulator runs in a worker process with the
    RoboCasa venv's interpreter (`rpent-backend-venv robocasa` creates it).

    Observation (Dict): `image` (robot0_agentview_left) and `wrist_image` (robot0_eye_in_hand),
    uint8 HxWx3, flipped upright like RoboCasa's datasets; `state`, float32 (16,) = eef
    position (3, m) and quaternion (4, xyzw) in the robot base frame, gripper finger positions
    (2), base position (3, world) and quaternion (4, xyzw).
    Action: float32 (12,) in [-1, 1], robosuite's order for PandaOmron: [0:3] eef translation
    (x 0.05 m) and [3:6] rotation (x 0.5 rad, axis-angle) deltas of the OSC_POSE arm
    controller in the base frame, [6] torso height, [7:10] base velocity (forward, sideways,
    yaw), [10] gripper (-1 open, 1 close), [11] mode (> 0 drives the base, the arm holding
    its pose; <= 0 moves the arm).
    Reward: 1.0 on success, else 0.0; the episode terminates on success (the registered id
    truncates after 500 steps; `gym.make(..., max_episode_steps=N)` changes it).

    The instruction is RoboCasa's episode language (`get_ep_meta()["lang"]`), sampled with the
    scene at each reset: `task_description` and `info["task"]` ("" before the first reset).
    Info keys: `success` / `is_success` (bool), `task`, `episode_seed` (int).

    Assets: `reset()` needs RoboCasa's kitchen assets (~10 GB from outside PyPI); without them
    it raises `FileNotFoundError` saying how to download them. They live in the RoboCasa
    venv's package folder, or in the folder named by `assets_path` / `$ROBOCASA_ASSETS_PATH`.

    Example:
        >>> import gymnasium as gym, rpent_envs
        >>> env = gym.make("RPent/RoboCasa-v0", task="PickPlaceCounterToCabinet", image_size=128)
        >>> obs, info = env.reset(seed=0)
        >>> obs["image"].shape, obs["state"].shape
        ((128, 128, 3), (16,))
        >>> info["task"]  # sampled with the scene, e.g. "pick the apple from the counter ..."
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": CONTROL_FREQ_HZ}

    def __init__(
        self,
        task: str = "PickPlaceCounterToCabinet",
        image_size: int = 128,
        render_mode: str | None = None,
        split: str | None = None,
        layout_and_style_ids: list[tuple[int, int]] | None = None,
        assets_path: str | Path | None = None,
        python: str | Path | None = None,
        make_timeout_s: float = 600.0,
        call_timeout_s: float = 300.0,
    ) -> None:
        """Start the RoboCasa worker and build the task (its kitchen loads at `reset()`).

        Args:
            task: A RoboCasa task class name, e.g. "PickPlaceCounterToCabinet".
            image_size: Height and width of both camera images, in pixels.
            render_mode: None or "rgb_array" (the main camera image).
            split: RoboCasa's scene/object split: None (robocasa's defaults), "pretrain",
                "target" or "all".
            layout_and_style_ids: Kitchen (layout, style) pairs to sample from; None samples
                the split's.
            assets_path: Asset root for the worker (sets `ROBOCASA_ASSETS_PATH` there); None
                keeps the variable as it is in this process, or the venv's package folder.
            python: Interpreter of the RoboCasa venv; default `$RPENT_ROBOCASA_PYTHON`, else
                the venv `rpent-backend-venv robocasa` made.
            make_timeout_s: Seconds allowed for importing robocasa and building the task.
            call_timeout_s: Seconds allowed per reset / step (a reset compiles a kitchen).

        Raises:
            ValueError: Unknown task or invalid argument.
            FileNotFoundError: The RoboCasa venv is missing (the message says how to make it).
        """
        if image_size < 16:
            raise ValueError(f"image_size={image_size}: use at least 16 pixels")
        if split not in (None, "pretrain", "target", "all"):
            raise ValueError(f"split={split!r}: use None, 'pretrain', 'target' or 'all'")
        super().__init__(
            ROBOCASA_VENV,
            task,
            {
                "image_size": image_size,
                "split": split,
                "layout_and_style_ids": layout_and_style_ids,
            },
            render_mode=render_mode,
            assets_dir=assets_path,
            python=python,
            make_timeout_s=make_timeout_s,
            call_timeout_s=call_timeout_s,
            worker_env={"MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")},
        )
