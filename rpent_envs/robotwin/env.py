"""`RPent/RoboTwin-v0`: a RoboTwin 2.0 task, simulated in the RoboTwin venv (Python 3.11)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rpent_envs.robotwin.install import ASSETS_VARIABLE, PYTHON_VARIABLE
from rpent_envs.subprocess_env.backend_env import BackendVenv, VenvBackendEnv

BACKEND_FACTORY = f"{Path(__file__).resolve().parent / 'backend.py'}:RoboTwinBackend"
ROBOTWIN_VENV = BackendVenv("robotwin", BACKEND_FACTORY, PYTHON_VARIABLE, ASSETS_VARIABLE)


class RoboTwinEnv(VenvBackendEnv):
    """A RoboTwin 2.0 bimanual task (default robot: AgileX ALOHA), out of process.

    rlinf-robotwin-runtime needs Python < 3.12 and exact pins (SAPIEN 3.0.0b1, torch 2.8,
    gymnasium 0.29.1, numpy 1.26), so the simulator runs in a worker process with the RoboTwin
    venv's interpreter (`rpent-backend-venv robotwin` creates it).

    Observation (Dict): `image` (head camera), `wrist_image` (left wrist camera) and
    `right_wrist_image`, uint8 240x320x3 (RealSense D435 model); `state`, float32 (L+R+2,) =
    the joint targets in the action's layout (14 for ALOHA).
    Action: float32 (L+1+R+1,) = absolute joint positions (rad) of the left arm's L joints,
    the left gripper (0 closed .. 1 open), the right arm's R joints, the right gripper; 14 for
    ALOHA (6-joint arms). The box is +-2 pi per joint (the arm's own joint limits apply). Each
    step plans a time-optimal path (TOPP) from the current targets to the action and runs it,
    as RoboTwin's evaluation does; actions are not normalised.
    Reward: 1.0 on success, else 0.0; the episode terminates on success and truncates after
    the task's evaluation step limit (RoboTwin's `_eval_step_limit.yml`, e.g. 400).

    The instruction is generated from RoboTwin's task templates for the scene's objects
    (`instruction_type` "seen" or "unseen"): `task_description` and `info["task"]`.
    Info keys: `success` / `is_success` (bool), `task`, `episode_seed` (int), `scene_seed`
    (int: the seed the scene was built from; the next seeds are tried when objects of a
    sampled scene do not settle, as RoboTwin does).

    Assets: construction needs RoboTwin's asset snapshot (embodiments, objects, textures;
    several GB from a model hub, outside PyPI) at `assets_root` / `$ROBOTWIN_ASSETS_ROOT`,
    because the arms' joint counts come from the embodiment files; without it the env raises
    `FileNotFoundError` saying how to download them (`robotwin-download-assets --output DIR`).
    RoboTwin renders with SAPIEN's ray tracer: a Vulkan GPU is strongly advised.

    Example:
        >>> import gymnasium as gym, rpent_envs
        >>> env = gym.make("RPent/RoboTwin-v0", task="beat_block_hammer",
        ...                assets_root="/data/robotwin_assets")
        >>> obs, info = env.reset(seed=0)
        >>> obs["image"].shape, env.action_space.shape
        ((240, 320, 3), (14,))
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(
        self,
        task: str = "beat_block_hammer",
        embodiment: tuple[Any, ...] = ("aloha-agilex",),
        config: str = "demo_clean",
        instruction_type: str = "seen",
        render_mode: str | None = None,
        assets_root: str | Path | None = None,
        python: str | Path | None = None,
        make_timeout_s: float = 900.0,
        call_timeout_s: float = 600.0,
    ) -> None:
        """Start the RoboTwin worker, import the task's code and check the assets.

        Args:
            task: A RoboTwin task module name, e.g. "beat_block_hammer" or "place_shoe".
            embodiment: One robot for both arms, e.g. ("aloha-agilex",), or a pair
                (left, right, distance_m), e.g. ("franka-panda", "franka-panda", 0.6).
            config: A packaged task config: "demo_clean" or "demo_randomized" (cluttered
                table, random backgrounds and lights).
            instruction_type: "seen" (training templates) or "unseen" (held-out templates).
            render_mode: None or "rgb_array" (the head camera image).
            assets_root: Asset snapshot folder (sets `ROBOTWIN_ASSETS_ROOT` in the worker);
                None keeps this process's `$ROBOTWIN_ASSETS_ROOT`.
            python: Interpreter of the RoboTwin venv; default `$RPENT_ROBOTWIN_PYTHON`, else
                the venv `rpent-backend-venv robotwin` made.
            make_timeout_s: Seconds allowed to import RoboTwin (SAPIEN, torch, open3d).
            call_timeout_s: Seconds allowed per reset (builds and settles a scene) or step.

        Raises:
            ValueError: Unknown task, embodiment or argument.
            FileNotFoundError: The RoboTwin venv or the assets are missing (the message says
                how to install them).
        """
        if instruction_type not in ("seen", "unseen"):
            raise ValueError(f"instruction_type={instruction_type!r}: use 'seen' or 'unseen'")
        if config not in ("demo_clean", "demo_randomized"):
            raise ValueError(f"config={config!r}: use 'demo_clean' or 'demo_randomized'")
        task_kwargs = {
            "embodiment": list(embodiment),
            "config": config,
            "instruction_type": instruction_type,
        }
        super().__init__(
            ROBOTWIN_VENV,
            task,
            task_kwargs,
            render_mode=render_mode,
            assets_dir=assets_root,
            python=python,
            make_timeout_s=make_timeout_s,
            call_timeout_s=call_timeout_s,
        )
