"""`RPent/PegInsertionSideWideClearance-v1`: one ManiSkill peg-insertion env as plain Gymnasium.

ManiSkill returns batched torch tensors even for one CPU env; this adapter returns unbatched
numpy in the flat Dict convention of DESIGN.md §2 so that Gymnasium's and SB3's checkers pass.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

import gymnasium as gym
import numpy as np

from rpent_envs.action_checks import checked_action
from rpent_envs.episode import episode_seed_of, observation_space, success_info
from rpent_envs.image_demand import ImageDemand
from rpent_envs.state_checks import INVALID_STATE_KEY, LastFiniteState

logger = logging.getLogger(__name__)

INSTRUCTION = "insert the peg in the hole"
ACTION_DIM = 8
STATE_DIM = 9
CONTROL_MODE = "pd_joint_delta_pos"
ObsMode = Literal["rgb", "state"]
RenderBackend = Literal["auto", "cpu", "gpu"]
BaseCameraView = Literal["side", "stock"]


def resolve_render_backend(render_backend: RenderBackend) -> str:
    """Pick SAPIEN's render device: "gpu" with an NVIDIA GPU, else "cpu" (lavapipe).

    Args:
        render_backend: "auto", "cpu" or "gpu".

    Returns:
        "cpu" or "gpu".
    """
    if render_backend != "auto":
        return render_backend
    import torch

    return "gpu" if torch.cuda.is_available() else "cpu"


def _to_numpy(value: Any) -> np.ndarray:
    return value.detach().cpu().numpy()[0] if hasattr(value, "detach") else np.asarray(value)[0]


class PegInsertionEnv(gym.Env[dict[str, np.ndarray], np.ndarray]):
    """ManiSkill peg insertion with a wide hole, joint-delta control, as an unbatched Gymnasium env.

    Observation (Dict): `image` (third-person camera) and `wrist_image` (hand camera), uint8
    HxWx3, only with `obs_mode="rgb"`; `state`, float32 (9,) = arm and finger joint positions.
    Action: float32 (8,) in [-1, 1] = 7 joint deltas (x 0.1 rad) and the gripper target
    (-1 closed, 1 open). Reward: 1.0 on success, else 0.0; the episode terminates on success.
    A step whose simulated state is NaN or inf (a physics blow-up) truncates the episode with
    `info["invalid_state"]` naming the entries; its observation holds the last finite state
    (`rpent_envs.state_checks`).

    Info keys: `success` / `is_success` (bool), `is_grasped` (bool, the gripper holds the peg
    within 20 deg of the closing direction), `peg_head_pos_at_hole` (float32 (3,), peg head in
    the hole frame, x along the hole axis, 0 at the box centre), `hole_radius` (float, m),
    `hole_entry_x` (float, m: the hole-frame x of the box face where the hole begins),
    `task` (the instruction), `episode_seed` (int, the seed of the episode's poses) and
    `scene_seed` (int, the seed the scene, i.e. peg and box sizes, was built from: the episode
    seed itself unless the scene is kept across resets); with `obs_mode="rgb"` also
    `images_rendered` (bool). Infos repeat exactly for a seed and actions, so the seconds
    spent rendering are a clock on the env instead (`rendering_s`).

    Scene reuse: rebuilding the SAPIEN scene is most of a reset's cost. With
    `reconfiguration_freq=k` the scene (and so the peg and box sizes) is rebuilt at every k-th
    reset only, from that reset's seed; the resets in between draw new poses on the kept scene.
    Sizes still vary over a run, as the task defines, every k episodes. A reset with
    `options={"reconfigure": True}` always rebuilds, so the seed alone defines that episode
    (evaluations on held-out seeds do this), and so does an env's first reset. An episode
    replays exactly on an env of the same `reconfiguration_freq` from
    `reset(seed=scene_seed, options={"reconfigure": True})` followed, when the two seeds
    differ, by `reset(seed=episode_seed)`.

    Rendering on demand (`rpent_envs.image_demand`): a chunk executor may mark steps whose
    images it does not read; such steps skip both cameras and return zero images
    (`images_rendered` False), unless a consumer such as `RecordTrajectory` holds the demand.

    Example:
        >>> import gymnasium as gym, rpent_envs
        >>> env = gym.make("RPent/PegInsertionSideWideClearance-v1", obs_mode="state")
        >>> obs, info = env.reset(seed=0)
        >>> obs["state"].shape, info["success"]
        ((9,), False)
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(
        self,
        obs_mode: ObsMode = "rgb",
        image_size: int = 128,
        render_mode: str | None = None,
        render_backend: RenderBackend = "auto",
        show_wrist_mount: bool = False,
        base_camera_view: BaseCameraView = "side",
        reconfiguration_freq: int = 1,
    ) -> None:
        """Build the ManiSkill scene (CPU physics).

        Args:
            obs_mode: "rgb" for both camera images and the state, "state" for the state only.
            image_size: Height and width of both camera images, in pixels.
            render_mode: None or "rgb_array" (a 512x512 third-person view).
            render_backend: SAPIEN render device; "auto" picks "gpu" with CUDA, else "cpu".
            show_wrist_mount: Render the wrist camera's mount mesh (hidden by default).
            base_camera_view: Pose of the `image` camera: "side" (sees peg, box face and
                gripper through the insertion) or "stock" (ManiSkill's, hidden by the arm
                from the grasp on).
            reconfiguration_freq: Resets per scene: 1 (stock) rebuilds the scene, with new
                peg and box sizes, at every reset; k > 1 at every k-th reset (see the class
                doc); `options={"reconfigure": True}` rebuilds at any reset.
        """
        if obs_mode not in ("rgb", "state"):
            raise ValueError(f"obs_mode={obs_mode!r}: use 'rgb' or 'state'")
        if image_size < 16:
            raise ValueError(f"image_size={image_size}: use at least 16 pixels")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode={render_mode!r}: use None or 'rgb_array'")
        if reconfiguration_freq < 1:
            raise ValueError(
                f"reconfiguration_freq={reconfiguration_freq}: use 1 (a new scene every reset) "
                "or more (resets per scene)"
            )
        from rpent_envs.maniskill.task import PegInsertionSideWideClearanceEnv

        self.obs_mode = obs_mode
        self.render_mode = render_mode
        self.task_description = INSTRUCTION
        self._sim = PegInsertionSideWideClearanceEnv(
            obs_mode="rgb" if obs_mode == "rgb" else "state_dict",
            control_mode=CONTROL_MODE,
            reward_mode="sparse",
            render_mode="rgb_array" if render_mode else None,
            sim_backend="physx_cpu",
            render_backend=resolve_render_backend(render_backend),
            sensor_configs=dict(width=image_size, height=image_size),
            show_wrist_mount=show_wrist_mount,
            base_camera_view=base_camera_view,
            reconfiguration_freq=reconfiguration_freq,
            agent_obs_only=True,  # `_observation` reads the joint positions and images only
        )
        self.action_space = gym.spaces.Box(-1.0, 1.0, (ACTION_DIM,), np.float32)
        self.observation_space = observation_space(
            STATE_DIM, image_size if obs_mode == "rgb" else None
        )
        self.episode_seed: int | None = None
        self.scene_seed: int | None = None
        self.image_demand = ImageDemand(self.current_observation)
        self.image_size = image_size
        self._states = LastFiniteState("peg insertion env")

    @property
    def maniskill_env(self) -> Any:
        """The underlying batched ManiSkill env (one CPU sub-env), for privileged access."""
        return self._sim

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Start an episode; an unseeded reset draws its episode seed from `np_random`."""
        super().reset(seed=seed)
        self.episode_seed = episode_seed_of(seed, self.np_random)
        if self.scene_seed is None:  # the scene built with the env came from no reset seed
            options = {**(options or {}), "reconfigure": True}
        raw_obs, raw_info = self._sim.reset(seed=self.episode_seed, options=options)
        if bool(raw_info["reconfigure"]):
            self.scene_seed = self.episode_seed
        obs = self._observation(raw_obs)
        obs["state"] = self._states.start(obs["state"])
        return obs, self._info(raw_info)

    def step(
        self, action: np.ndarray
    ) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        """Apply one joint-delta action for one 0.1 s control step."""
        action = checked_action(action, (ACTION_DIM,), np.float32)
        import torch

        skip_images = self.obs_mode == "rgb" and self.image_demand.skips_rendering()
        self._sim.skip_sensor_data = skip_images
        try:
            raw_obs, _, _, _, raw_info = self._sim.step(torch.from_numpy(action)[None])
        finally:
            self._sim.skip_sensor_data = False
        info = self._info(raw_info)
        if self.obs_mode == "rgb":
            info["images_rendered"] = not skip_images
        obs = self._observation(raw_obs)
        obs["state"], invalid = self._states.check(obs["state"])
        if invalid is not None:
            info[INVALID_STATE_KEY] = invalid
        return obs, float(info["success"]), info["success"], invalid is not None, info

    def current_observation(self) -> dict[str, np.ndarray]:
        """The observation of the current simulator state, rendered now (no step taken)."""
        obs = self._observation(self._sim.get_obs())
        obs["state"], _ = self._states.check(obs["state"])
        return obs

    @property
    def rendering_s(self) -> float:
        """Seconds spent rendering both cameras and reading their images back, since built.

        Resets included; a clock for profiles (the Stage 2 workers' `worker_render_s`).
        """
        return float(self._sim.unwrapped.sensor_data_s)

    def render(self) -> np.ndarray | None:
        """Return the 512x512 third-person RGB view when `render_mode="rgb_array"`."""
        if self.render_mode is None:
            return None
        return _to_numpy(self._sim.render())

    def close(self) -> None:
        """Release the SAPIEN scene."""
        self._sim.close()

    def privileged_state(self) -> dict[str, np.ndarray]:
        """Simulator state a scripted expert may read (never given to a learning policy).

        Returns:
            Poses as 7-vectors (position, quaternion wxyz) in the world frame: `tcp_pose`,
            `peg_pose`, `hole_pose` (x along the hole axis) and `goal_peg_pose` (where the peg
            sits when inserted); `peg_half_size` (3,), `hole_radius` (1,), `qpos` (9,),
            `is_grasped` (bool array of shape ()).
        """
        return self._sim.unwrapped.privileged_state()

    def _observation(self, raw_obs: dict[str, Any]) -> dict[str, np.ndarray]:
        obs = {"state": _to_numpy(raw_obs["agent"]["qpos"])[:STATE_DIM].astype(np.float32)}
        if self.obs_mode == "rgb":
            sensors = raw_obs.get("sensor_data")
            if sensors is None:  # a step that skipped rendering
                blank_shape = (self.image_size, self.image_size, 3)
                obs["image"] = np.zeros(blank_shape, np.uint8)
                obs["wrist_image"] = np.zeros(blank_shape, np.uint8)
            else:
                obs["image"] = _to_numpy(sensors["base_camera"]["rgb"])
                obs["wrist_image"] = _to_numpy(sensors["hand_camera"]["rgb"])
        return obs

    def _info(self, raw_info: dict[str, Any]) -> dict[str, Any]:
        return success_info(
            bool(_to_numpy(raw_info["success"])),
            self.task_description,
            is_grasped=bool(_to_numpy(raw_info["is_grasped"])),
            peg_head_pos_at_hole=_to_numpy(raw_info["peg_head_pos_at_hole"]).astype(np.float32),
            hole_radius=float(_to_numpy(raw_info["hole_radius"])),
            hole_entry_x=float(_to_numpy(raw_info["hole_entry_x"])),
            episode_seed=self.episode_seed,
            scene_seed=self.scene_seed,
        )
