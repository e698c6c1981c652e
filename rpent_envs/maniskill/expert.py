"""A closed-loop scripted expert for `RPent/PegInsertionSideWideClearance-v1`.

The expert reads privileged simulator state (peg, hole and gripper poses) every step and
decides from that state alone what to do, so it can take over from any mid-episode state:
reach above the peg, descend, grasp, carry the peg to a stand-off in front of the hole, align,
and push it in. Cartesian targets become `pd_joint_delta_pos` actions through a damped
least-squares step on the arm Jacobian (SAPIEN's Pinocchio model), so no motion planner (and no
mplib, which segfaults under numpy 2) is needed.
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import sapien
from scipy.spatial.transform import Rotation

from rpent_envs.expert_steps import clip_norm
from rpent_envs.maniskill.peg_env import PegInsertionEnv

ARM_DOF = 7
JOINT_DELTA_LIMIT_RAD = 0.1  # pd_joint_delta_pos maps action 1.0 to 0.1 rad
GRIPPER_OPEN, GRIPPER_CLOSED = 1.0, -1.0
TCP_LINK = "panda_hand_tcp"


@dataclass(frozen=True)
class PegExpertConfig:
    """Gains and tolerances of the scripted peg-insertion expert.

    Attributes:
        max_step_m: Largest TCP translation commanded per control step.
        max_rot_step_rad: Largest TCP rotation commanded per control step.
        insert_step_m: TCP translation per step while pushing the peg into the hole.
        pregrasp_height_m: Height above the grasp point from which the gripper descends.
        standoff_m: Distance of the peg head in front of the hole entry before insertion.
        align_tol_m: Largest lateral offset of peg head and centre from the hole axis that
            counts as aligned.
        align_tol_rad: Largest angle between peg axis and hole axis that counts as aligned.
        reach_tol_m: Distance under which a Cartesian target counts as reached.
        ik_damping: Damping of the least-squares Jacobian step.
    """

    max_step_m: float = 0.03
    max_rot_step_rad: float = 0.2
    insert_step_m: float = 0.015
    pregrasp_height_m: float = 0.07
    standoff_m: float = 0.03
    align_tol_m: float = 0.006
    align_tol_rad: float = 0.05
    reach_tol_m: float = 0.006
    ik_damping: float = 1e-4


def _pose(vector7: np.ndarray) -> sapien.Pose:
    return sapien.Pose(p=vector7[:3], q=vector7[3:])


def _axis(pose: sapien.Pose, column: int) -> np.ndarray:
    return pose.to_transformation_matrix()[:3, column]


def _rotation_error(target: sapien.Pose, current: sapien.Pose) -> np.ndarray:
    """Rotation vector (world frame) that turns `current` into `target`."""
    target_rot = Rotation.from_quat(target.q, scalar_first=True)
    current_rot = Rotation.from_quat(current.q, scalar_first=True)
    return (target_rot * current_rot.inv()).as_rotvec()


class PegInsertionExpert:
    """Closed-loop expert: call `act()` once per step of the env it was given.

    Example:
        >>> env = gym.make("RPent/PegInsertionSideWideClearance-v1", obs_mode="state")
        >>> expert = PegInsertionExpert(env)
        >>> obs, info = env.reset(seed=0)
        >>> while not info["success"]:
        ...     obs, reward, terminated, truncated, info = env.step(expert.act())
    """

    def __init__(self, env: gym.Env, config: PegExpertConfig | None = None) -> None:
        """Attach to a peg env (any wrapper stack around `PegInsertionEnv`).

        Args:
            env: The env whose simulator state the expert reads.
            config: Gains and tolerances; defaults when None.
        """
        base_env = env.unwrapped
        if not isinstance(base_env, PegInsertionEnv):
            raise TypeError(
                f"PegInsertionExpert needs an RPent peg env, got {type(base_env).__name__}"
            )
        self.env = base_env
        self.config = config or PegExpertConfig()
        self._articulation = None
        self._kinematics = None
        self._tcp_index = -1

    def act(self) -> np.ndarray:
        """The next `pd_joint_delta_pos` action (float32, shape (8,)) for the current state."""
        state = self.env.privileged_state()
        target_tcp, gripper = self._decide(state)
        action = np.empty(ARM_DOF + 1, dtype=np.float32)
        action[:ARM_DOF] = self._joint_step(state, target_tcp)
        action[ARM_DOF] = gripper
        return action

    def _decide(self, state: dict[str, np.ndarray]) -> tuple[sapien.Pose, float]:
        if self._is_holding(state):
            return self._carry_target(state), GRIPPER_CLOSED
        return self._grasp_target(state)

    def _is_holding(self, state: dict[str, np.ndarray]) -> bool:
        """Grasp flag, robust to the contact-angle flicker of `is_grasping` during insertion."""
        if bool(state["is_grasped"]):
            return True
        peg_radius = state["peg_half_size"][1]
        finger_gap = state["qpos"][7] + state["qpos"][8]
        peg, tcp = _pose(state["peg_pose"]), _pose(state["tcp_pose"])
        tcp_in_peg = (peg.inv() * tcp).p
        between_fingers = np.linalg.norm(tcp_in_peg[1:]) < peg_radius
        return bool(between_fingers and finger_gap < 2 * peg_radius + 0.004)

    def _grasp_pose(self, state: dict[str, np.ndarray]) -> sapien.Pose:
        """Top-down grasp on the tail half of the peg, closing across the peg axis."""
        peg, tcp = _pose(state["peg_pose"]), _pose(state["tcp_pose"])
        half_length = state["peg_half_size"][0]
        peg_axis = _axis(peg, 0)
        grasp_point = peg.p - peg_axis * max(0.05, half_length / 2 + 0.01)
        along = np.array([peg_axis[0], peg_axis[1], 0.0])
        along /= np.linalg.norm(along)
        if np.dot(along, _axis(tcp, 0)) < 0:  # of the two symmetric grasps, the nearer
            along = -along
        down = np.array([0.0, 0.0, -1.0])
        closing = np.cross(down, along)
        rotation = np.column_stack([along, closing, down])
        quat = Rotation.from_matrix(rotation).as_quat(scalar_first=True)
        return sapien.Pose(p=grasp_point, q=quat)

    def _grasp_target(self, state: dict[str, np.ndarray]) -> tuple[sapien.Pose, float]:
        cfg = self.config
        grasp = self._grasp_pose(state)
        tcp = _pose(state["tcp_pose"])
        pregrasp = sapien.Pose(p=grasp.p + [0, 0, cfg.pregrasp_height_m], q=grasp.q)
        horizontal_error = np.linalg.norm((grasp.p - tcp.p)[:2])
        angle_error = np.linalg.norm(_rotation_error(grasp, tcp))
        if horizontal_error > cfg.reach_tol_m * 2 or angle_error > 0.1:
            if tcp.p[2] < pregrasp.p[2] - 0.02 and horizontal_error > 0.02:
                # Rise before moving sideways so the fingers do not sweep the peg away.
                return sapien.Pose(p=[*tcp.p[:2], pregrasp.p[2]], q=grasp.q), GRIPPER_OPEN
            return pregrasp, GRIPPER_OPEN
        finger_gap = state["qpos"][7] + state["qpos"][8]
        peg_radius = state["peg_half_size"][1]
        if tcp.p[2] - grasp.p[2] > cfg.reach_tol_m:
            gripper = GRIPPER_OPEN
        elif finger_gap < 2 * peg_radius - 0.006:  # closed on nothing: open and retry
            gripper = GRIPPER_OPEN
        else:
            gripper = GRIPPER_CLOSED
        return grasp, gripper

    def _carry_target(self, state: dict[str, np.ndarray]) -> sapien.Pose:
        """TCP target that moves the held peg to the stand-off, then along the hole axis."""
        cfg = self.config
        peg, tcp = _pose(state["peg_pose"]), _pose(state["tcp_pose"])
        hole, goal = _pose(state["hole_pose"]), _pose(state["goal_peg_pose"])
        half_length = state["peg_half_size"][0]
        peg_in_hole = hole.inv() * peg
        head_in_hole = (peg_in_hole * sapien.Pose([half_length, 0, 0])).p
        lateral_error = max(np.linalg.norm(head_in_hole[1:]), np.linalg.norm(peg_in_hole.p[1:]))
        axis_error = np.arccos(np.clip(_axis(peg_in_hole, 0)[0], -1.0, 1.0))
        aligned = lateral_error < cfg.align_tol_m and axis_error < cfg.align_tol_rad
        entering = head_in_hole[0] > -half_length - 0.005
        if aligned or entering:
            goal_x = min(head_in_hole[0] + cfg.insert_step_m, 0.01)
        else:
            goal_x = -(half_length + cfg.standoff_m)
        target_peg = goal * sapien.Pose([goal_x, 0, 0])
        return target_peg * (peg.inv() * tcp)

    def _joint_step(self, state: dict[str, np.ndarray], target_tcp: sapien.Pose) -> np.ndarray:
        """Damped least-squares joint delta towards `target_tcp`, scaled into [-1, 1]."""
        cfg = self.config
        tcp = _pose(state["tcp_pose"])
        twist = np.concatenate(
            [
                clip_norm(target_tcp.p - tcp.p, cfg.max_step_m),
                clip_norm(_rotation_error(target_tcp, tcp), cfg.max_rot_step_rad),
            ]
        )
        jacobian = self._world_jacobian(state["qpos"])
        gram = jacobian @ jacobian.T + cfg.ik_damping * np.eye(6)
        joint_delta = jacobian.T @ np.linalg.solve(gram, twist)
        scaled = joint_delta / JOINT_DELTA_LIMIT_RAD
        return (scaled / max(1.0, float(np.max(np.abs(scaled))))).astype(np.float32)

    def _world_jacobian(self, qpos: np.ndarray) -> np.ndarray:
        """6x7 Jacobian of the TCP (linear; angular) in world-aligned axes."""
        articulation = self.env.maniskill_env.agent.robot._objs[0]
        if articulation is not self._articulation:  # the scene is rebuilt on every reset
            self._articulation = articulation
            self._kinematics = articulation.create_pinocchio_model()
            self._tcp_index = [link.name.endswith(TCP_LINK) for link in articulation.links].index(
                True
            )
        self._kinematics.compute_forward_kinematics(qpos)
        tcp_pose = self._kinematics.get_link_pose(self._tcp_index)
        rotation = tcp_pose.to_transformation_matrix()[:3, :3]
        local = self._kinematics.compute_single_link_local_jacobian(qpos, self._tcp_index)
        jacobian = np.vstack([rotation @ local[:3], rotation @ local[3:]])
        return jacobian[:, :ARM_DOF]
