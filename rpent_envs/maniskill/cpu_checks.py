"""The peg task's success and grasp checks, and its poses, for one CPU scene without torch.

ManiSkill computes them with batched torch pose algebra, built for thousands of GPU-simulated
scenes; on one CPU scene its small-tensor calls took ~2.2 ms of a ~4.6 ms env step (the PhysX
substeps ~0.8 ms). These functions give the same answers from SAPIEN's own poses and contact
list: the task's `evaluate()` and `privileged_state()` use them whenever it simulates on the
CPU (`PegInsertionSideWideClearanceEnv.fast_cpu_checks`).

Example (`task`, a `PegInsertionSideWideClearanceEnv` simulated on the CPU):
    >>> at_hole = peg_head_at_hole(task.peg, task.box, task.cpu_head_offset,
    ...                            task.cpu_hole_offset)
    >>> peg_inserted(at_hole, task.box_hole_radii[0].numpy())
    False
    >>> panda_grasps(task.scene.px, task.agent, task.peg, max_angle_deg=20)
    False
"""

from __future__ import annotations

import numpy as np
import sapien
from mani_skill.agents.robots.panda.panda import Panda
from mani_skill.utils import sapien_utils
from mani_skill.utils.structs import Actor, Link

INSERTED_MIN_X_M = -0.015
"""ManiSkill's `has_peg_inserted`: the head at least this far along the hole's axis."""
GRASP_MIN_FORCE_N = 0.5
"""Panda.is_grasping's default: the least contact force of each finger on the object."""
ZERO_NORM = 1e-6
"""Below this norm a vector has no direction (ManiSkill's `normalize_vector`)."""


def entity_pose(obj: Actor | Link) -> sapien.Pose:
    """The world pose of a one-scene actor or link."""
    return obj._objs[0].entity_pose if isinstance(obj, Link) else obj._objs[0].pose


def pose_vector(pose: sapien.Pose, standardize: bool = False) -> np.ndarray:
    """A pose as ManiSkill's raw 7-vector (position, quaternion wxyz), float64.

    Args:
        pose: The pose.
        standardize: Flip the quaternion to a non-negative w, as ManiSkill does for a
            product of poses (a pose read from the simulator keeps its sign).
    """
    quaternion = np.asarray(pose.q)
    if standardize and quaternion[0] < 0:
        quaternion = -quaternion
    return np.concatenate([pose.p, quaternion]).astype(np.float64)


def peg_head_at_hole(
    peg: Actor, box: Actor, head_offset: sapien.Pose, hole_offset: sapien.Pose
) -> np.ndarray:
    """Position (3,) of the peg's head in the hole's frame (x along the hole's axis)."""
    hole = entity_pose(box) * hole_offset
    head = entity_pose(peg) * head_offset
    return np.asarray((hole.inv() * head).p, np.float32)


def peg_inserted(head_at_hole: np.ndarray, hole_radius: np.float32) -> bool:
    """ManiSkill's `has_peg_inserted`: the head deep enough and inside the hole's radius."""
    x, y, z = head_at_hole
    return bool(
        np.float32(INSERTED_MIN_X_M) <= x and -hole_radius <= y <= hole_radius
        and -hole_radius <= z <= hole_radius
    )  # fmt: skip


def _unit(vector: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(vector)
    return vector if norm < ZERO_NORM else vector / norm


def _finger_holds(
    contacts: list, finger: Link, peg: Actor, open_direction: np.ndarray, max_angle_deg: float,
    timestep: float,
) -> bool:  # fmt: skip
    impulse = sapien_utils.get_pairwise_contact_impulse(
        contacts, finger._bodies[0].entity, peg._bodies[0].entity
    )
    force = impulse.astype(np.float32) / np.float32(timestep)
    cosine = np.clip(np.dot(_unit(open_direction), _unit(force)), -1.0, 1.0)
    angle_deg = np.rad2deg(np.arccos(cosine))
    return bool(np.linalg.norm(force) >= GRASP_MIN_FORCE_N and angle_deg <= max_angle_deg)


def panda_grasps(
    physx_scene: sapien.physx.PhysxCpuSystem, agent: Panda, peg: Actor, max_angle_deg: float
) -> bool:
    """`Panda.is_grasping(peg, max_angle=max_angle_deg)` of one CPU scene.

    Both fingers push on the peg with at least 0.5 N, each within `max_angle_deg` of the
    direction that opens it.
    """
    contacts = physx_scene.get_contacts()
    timestep = physx_scene.timestep
    left_open = entity_pose(agent.finger1_link).to_transformation_matrix()[:3, 1]
    right_open = -entity_pose(agent.finger2_link).to_transformation_matrix()[:3, 1]
    return _finger_holds(
        contacts, agent.finger1_link, peg, left_open, max_angle_deg, timestep
    ) and _finger_holds(contacts, agent.finger2_link, peg, right_open, max_angle_deg, timestep)
