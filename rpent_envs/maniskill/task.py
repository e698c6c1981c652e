"""The ManiSkill task `PegInsertionSideWideClearance-v1`.

Importing this module imports SAPIEN and ManiSkill and registers the task with ManiSkill's own
registry, so `gym.make("PegInsertionSideWideClearance-v1")` works for ManiSkill-native users
(batched torch tensors, GPU simulation where available).
"""

from __future__ import annotations

import time

import numpy as np
import sapien
import torch
from mani_skill.envs.tasks.tabletop.peg_insertion_side import (
    PegInsertionSideEnv,
    _build_box_with_hole,
)
from mani_skill.sensors.camera import CameraConfig
from mani_skill.utils import common, sapien_utils
from mani_skill.utils.registration import register_env
from mani_skill.utils.scene_builder.table import TableSceneBuilder
from mani_skill.utils.structs import Actor, Pose
from mani_skill.utils.structs.types import SimConfig

from rpent_envs.maniskill import cpu_checks

MANISKILL_TASK_ID = "PegInsertionSideWideClearance-v1"
HOLE_CLEARANCE_M = 0.02
CONTROL_FREQ_HZ = 10
MAX_EPISODE_STEPS = 500
GRASP_MAX_ANGLE_DEG = 20
WRIST_MOUNT_LINK = "camera_link"
BASE_CAMERA_FOV_RAD = 1.35
BASE_CAMERA_VIEWS = {
    # From the side of the table opposite the robot: peg, box face with the hole and gripper
    # stay in view while the arm carries the peg (the arm is behind them).
    "side": ([0.45, -0.2, 0.32], [0.0, 0.05, 0.06]),
    # ManiSkill's PegInsertionSide camera, behind the peg: the arm hides the box from the
    # grasp to the end of the insertion.
    "stock": ([0.0, -0.3, 0.2], [0.0, 0.0, 0.1]),
}


@register_env(MANISKILL_TASK_ID, max_episode_steps=MAX_EPISODE_STEPS)
class PegInsertionSideWideClearanceEnv(PegInsertionSideEnv):
    """Peg insertion from the side with a wide, centred hole.

    **Task Description:**
    Pick up an orange-white peg lying on the table and insert its orange end into the hole of a
    box standing on the table.

    **Randomizations:**
    - Peg half length in [0.085, 0.125] m and radius in [0.015, 0.025] m (stock, at
      reconfiguration); the box is as deep as the peg is long.
    - The hole radius is the peg radius + 0.02 m (stock: + 0.003 m) and the hole is centred on
      the box face (stock: randomly offset).
    - Peg and box positions on the table and yaw angles (stock).

    **Success Conditions:**
    - The peg head is at least at the box centre minus 0.015 m along the hole axis and within the
      hole radius (peg radius + clearance) across it.

    **Cameras:** `base_camera` looks from the side of the table opposite the robot
    (`base_camera_view="side"`, the default), or from ManiSkill's stock pose behind the peg
    (`"stock"`), where the arm hides the box during the whole carry; `hand_camera` is the
    wrist camera.

    Control runs at 10 Hz (stock 20 Hz); ManiSkill's registry limits episodes to 500 steps.
    """

    _clearance = HOLE_CLEARANCE_M

    def __init__(
        self,
        *args,
        show_wrist_mount: bool = False,
        base_camera_view: str = "side",
        agent_obs_only: bool = False,
        **kwargs,
    ) -> None:
        if base_camera_view not in BASE_CAMERA_VIEWS:
            raise ValueError(
                f"base_camera_view={base_camera_view!r}: use one of {sorted(BASE_CAMERA_VIEWS)}"
            )
        self.base_camera_view = base_camera_view
        self.show_wrist_mount = show_wrist_mount
        self.skip_sensor_data = False
        """While True, observations carry no sensor data (nothing is rendered)."""
        self.sensor_data_s = 0.0
        """Seconds spent on observations' sensor data since the env was built: rendering both
        cameras and reading their images back (a clock for profiles)."""
        self.agent_obs_only = agent_obs_only
        """Observations hold the robot's state and sensor data but no task extras (poses of
        the TCP, peg and hole): for a consumer that reads only the robot's joints."""
        self.fast_cpu_checks = True
        """Compute success and grasp of one CPU scene with `cpu_checks` (False: ManiSkill's
        batched torch code, as on the GPU; the answers are the same, ~8x slower)."""
        super().__init__(*args, **kwargs)

    @property
    def _default_sim_config(self) -> SimConfig:
        return SimConfig(sim_freq=100, control_freq=CONTROL_FREQ_HZ)

    @property
    def _default_sensor_configs(self) -> list[CameraConfig]:
        eye, target = BASE_CAMERA_VIEWS[self.base_camera_view]
        pose = sapien_utils.look_at(eye, target)
        return [CameraConfig("base_camera", pose, 128, 128, BASE_CAMERA_FOV_RAD, 0.01, 100)]

    def _load_scene(self, options: dict) -> None:
        # Stock `_load_scene` draws a random hole centre; rebuilding the scene here with the same
        # random draws keeps the peg sizes identical to stock for a given seed.
        with torch.device(self.device):
            self.table_scene = TableSceneBuilder(self)
            self.table_scene.build()
            lengths = self._batched_episode_rng.uniform(0.085, 0.125)
            radii = self._batched_episode_rng.uniform(0.015, 0.025)
            self.peg_half_sizes = common.to_tensor(np.vstack([lengths, radii, radii])).T
            peg_head_offsets = torch.zeros((self.num_envs, 3))
            peg_head_offsets[:, 0] = self.peg_half_sizes[:, 0]
            self.peg_head_offsets = Pose.create_from_pq(p=peg_head_offsets)
            self.box_hole_offsets = Pose.create_from_pq(p=torch.zeros((self.num_envs, 3)))
            # The same offsets of the first scene, for the CPU checks (one scene on the CPU).
            self.cpu_head_offset = sapien.Pose(p=peg_head_offsets[0].numpy())
            self.cpu_hole_offset = sapien.Pose()
            self.box_hole_radii = common.to_tensor(radii + self._clearance)
            pegs, boxes = [], []
            for env_index in range(self.num_envs):
                pegs.append(self._build_peg(env_index, lengths[env_index], radii[env_index]))
                boxes.append(self._build_box(env_index, lengths[env_index], radii[env_index]))
            self.peg = Actor.merge(pegs, "peg")
            self.box = Actor.merge(boxes, "box_with_hole")
            self.add_to_state_dict_registry(self.peg)
            self.add_to_state_dict_registry(self.box)

    def _build_peg(self, env_index: int, half_length: float, radius: float) -> Actor:
        builder = self.scene.create_actor_builder()
        builder.add_box_collision(half_size=[half_length, radius, radius])
        for sign, color in ((1, "#EC7357"), (-1, "#EDF6F9")):  # head orange, tail white
            material = sapien.render.RenderMaterial(
                base_color=sapien_utils.hex2rgba(color), roughness=0.5, specular=0.5
            )
            builder.add_box_visual(
                sapien.Pose([sign * half_length / 2, 0, 0]),
                half_size=[half_length / 2, radius, radius],
                material=material,
            )
        builder.initial_pose = sapien.Pose(p=[0, 0, 0.1])
        builder.set_scene_idxs([env_index])
        peg = builder.build(f"peg_{env_index}")
        self.remove_from_state_dict_registry(peg)
        return peg

    def _build_box(self, env_index: int, half_length: float, radius: float) -> Actor:
        builder = _build_box_with_hole(
            self.scene,
            inner_radius=radius + self._clearance,
            outer_radius=half_length,
            depth=half_length,
            center=(0.0, 0.0),
        )
        builder.initial_pose = sapien.Pose(p=[0, 1, 0.1])
        builder.set_scene_idxs([env_index])
        box = builder.build_kinematic(f"box_with_hole_{env_index}")
        self.remove_from_state_dict_registry(box)
        return box

    def _get_obs_with_sensor_data(self, info: dict, apply_texture_transforms: bool = True) -> dict:
        if self.skip_sensor_data:  # the caller reads no image of this step (ImageDemand)
            return dict(agent=self._get_obs_agent(), extra=self._get_obs_extra(info))
        started_s = time.perf_counter()
        obs = super()._get_obs_with_sensor_data(info, apply_texture_transforms)
        self.sensor_data_s += time.perf_counter() - started_s
        return obs

    @property
    def _one_cpu_scene_checks(self) -> bool:
        """Whether `evaluate` and `privileged_state` use `cpu_checks` (CPU physics, allowed)."""
        return self.fast_cpu_checks and not self.gpu_sim_enabled

    def _get_obs_extra(self, info: dict) -> dict:
        return {} if self.agent_obs_only else super()._get_obs_extra(info)

    def evaluate(self) -> dict[str, torch.Tensor]:
        """Success, peg-head position in the hole frame, grasp flag, hole radius and entry.

        On the CPU (one scene) the checks run on SAPIEN's poses and contacts (`cpu_checks`,
        the same answers as ManiSkill's batched torch code in a fraction of its time).
        """
        if not self._one_cpu_scene_checks:
            info = super().evaluate()
            info["is_grasped"] = self.agent.is_grasping(self.peg, max_angle=GRASP_MAX_ANGLE_DEG)
        else:
            info = self._evaluate_one_cpu_scene()
        info["hole_radius"] = self.box_hole_radii.clone()
        # The box is as deep as the peg is long: its face (the hole's entry) is at -half length.
        info["hole_entry_x"] = -self.peg_half_sizes[:, 0]
        return info

    def _evaluate_one_cpu_scene(self) -> dict[str, torch.Tensor]:
        at_hole = cpu_checks.peg_head_at_hole(
            self.peg, self.box, self.cpu_head_offset, self.cpu_hole_offset
        )
        grasped = cpu_checks.panda_grasps(self.scene.px, self.agent, self.peg, GRASP_MAX_ANGLE_DEG)
        return {
            "success": torch.tensor(
                [cpu_checks.peg_inserted(at_hole, self.box_hole_radii[0].numpy())]
            ),
            "peg_head_pos_at_hole": torch.from_numpy(at_hole[None]),
            "is_grasped": torch.tensor([grasped]),
        }

    def privileged_state(self) -> dict[str, np.ndarray]:
        """The first scene's state for a scripted expert (`PegInsertionEnv.privileged_state`).

        Poses as 7-vectors (position, quaternion wxyz, float64): `tcp_pose`, `peg_pose`,
        `hole_pose`, `goal_peg_pose`; `peg_half_size` (3,), `hole_radius` (1,), `qpos` (9,),
        `is_grasped` (bool, shape ()). On the CPU from SAPIEN's poses (`cpu_checks`).
        """
        if not self._one_cpu_scene_checks:
            poses = {
                "tcp_pose": self.agent.tcp.pose, "peg_pose": self.peg.pose,
                "hole_pose": self.box_hole_pose, "goal_peg_pose": self.goal_pose,
            }  # fmt: skip
            state = {name: pose.raw_pose[0].cpu().numpy().astype(np.float64)
                     for name, pose in poses.items()}  # fmt: skip
            grasped = bool(self.agent.is_grasping(self.peg, max_angle=GRASP_MAX_ANGLE_DEG)[0])
        else:
            hole = cpu_checks.entity_pose(self.box) * self.cpu_hole_offset
            state = {
                "tcp_pose": cpu_checks.pose_vector(cpu_checks.entity_pose(self.agent.tcp)),
                "peg_pose": cpu_checks.pose_vector(cpu_checks.entity_pose(self.peg)),
                "hole_pose": cpu_checks.pose_vector(hole, standardize=True),
                "goal_peg_pose": cpu_checks.pose_vector(
                    hole * self.cpu_head_offset.inv(), standardize=True
                ),
            }
            grasped = cpu_checks.panda_grasps(
                self.scene.px, self.agent, self.peg, GRASP_MAX_ANGLE_DEG
            )
        first = {
            "peg_half_size": self.peg_half_sizes[0],
            "hole_radius": self.box_hole_radii[:1],
            "qpos": self.agent.robot.get_qpos()[0],
        }
        state |= {name: value.cpu().numpy().astype(np.float64) for name, value in first.items()}
        return state | {"is_grasped": np.asarray(grasped)}

    def compute_sparse_reward(self, obs, action, info) -> torch.Tensor:  # noqa: D102
        return info["success"].float()

    def _after_reconfigure(self, options: dict) -> None:
        super()._after_reconfigure(options)
        # The mount mesh is ~425k of the scene's ~581k triangles: hidden, CPU rendering is ~3x
        # faster and images do not depend on the mesh asset a machine has.
        visibility = 1.0 if self.show_wrist_mount else 0.0
        for link_obj in self.agent.robot.links_map[WRIST_MOUNT_LINK]._objs:
            for component in link_obj.entity.components:
                if isinstance(component, sapien.render.RenderBodyComponent):
                    component.visibility = visibility
