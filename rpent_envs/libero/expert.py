"""A scripted pick-and-place expert for LIBERO tasks whose goal is one `On` predicate.

It reads privileged simulator state every step (object meshes, poses, contacts) and decides
mostly from that state alone: grasp the object (top-down across its narrow side, or by the rim
when it is wider than the open gripper, like a bowl), lift it above the target, carry it there,
lower it until it touches something, release and back off. A slipped or missed grasp is
retried. Only the closing of the gripper is timed by a counter.

Solves e.g. libero_goal "put the bowl on the stove", "put the bowl on the plate", "put the
cream cheese in the bowl" (`On cream_cheese_1 akita_black_bowl_1`), and their LIBERO-PRO
variants; success rates are in bench/RESULTS.md.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
from scipy.spatial.transform import Rotation

from rpent_envs.expert_steps import clip_norm
from rpent_envs.libero.env import ACTION_DIM, GRIPPER_CLOSED, GRIPPER_OPEN, LiberoEnv
from rpent_envs.libero.scene import TABLE_TOP_Z_M, Extent, SceneView

POS_ACTION_SCALE_M = 0.05  # OSC_POSE maps action 1.0 to 0.05 m
ROT_ACTION_SCALE_RAD = 0.5  # and to 0.5 rad
DOWN = np.array([0.0, 0.0, -1.0])


@dataclass(frozen=True)
class LiberoExpertConfig:
    """Gains and tolerances of the scripted LIBERO expert.

    Attributes:
        max_step_m: Largest eef translation commanded per control step.
        carry_step_m: Largest eef translation per step while holding the object.
        gain: Proportional gain from position error to commanded translation.
        rot_gain: Proportional gain from orientation error to commanded rotation.
        pregrasp_height_m: Height above the grasp point from which the gripper descends.
        carry_clearance_m: Height of the held object's bottom above the target's top.
        min_carry_height_m: Lowest carry height of the held object's bottom above the table.
        lower_step_m: Commanded descent per step while lowering the object onto the target.
        xy_tol_m: Horizontal error under which a position counts as reached.
        z_tol_m: Vertical error under which a height counts as reached.
        rot_tol_rad: Orientation error under which the gripper counts as aligned.
        close_steps: Steps the gripper gets to close before the grasp is judged.
        gripper_max_opening_m: Widest object side a top-down grasp can span.
        rim_inset_m: How far inside the outer edge a rim grasp holds a wide object.
        rim_depth_m: How far below the rim the grip site goes for a rim grasp.
        hand_half_width_m: Half the open hand's length along the closing axis.
        hand_clearance_m: Clearance from other objects beyond which rim grasps rank equal.
        retreat_height_m: Height above the released object the gripper backs off to.
    """

    max_step_m: float = 0.05
    carry_step_m: float = 0.03
    gain: float = 1.0
    rot_gain: float = 1.0
    pregrasp_height_m: float = 0.08
    carry_clearance_m: float = 0.05
    min_carry_height_m: float = 0.17
    lower_step_m: float = 0.03
    xy_tol_m: float = 0.008
    z_tol_m: float = 0.008
    rot_tol_rad: float = 0.08
    close_steps: int = 12
    gripper_max_opening_m: float = 0.07
    rim_inset_m: float = 0.006
    rim_depth_m: float = 0.018
    hand_half_width_m: float = 0.09
    hand_clearance_m: float = 0.04
    retreat_height_m: float = 0.12


@dataclass(frozen=True)
class PickPlaceGoal:
    """What to move where: object `obj` onto `target` (an object, a fixture or a region site)."""

    obj: str
    target: str


def pick_place_goal(goal_state: list[list[str]], movable_objects: Collection[str]) -> PickPlaceGoal:
    """Read what to move where from a task's parsed BDDL goal.

    Args:
        goal_state: The parsed goal, e.g. `[["on", "akita_black_bowl_1", "plate_1"]]`.
        movable_objects: Names of the task's movable objects.

    Raises:
        ValueError: When the goal is not one `On`/`In` predicate on a movable object.
    """
    if len(goal_state) != 1 or goal_state[0][0].lower() not in ("on", "in"):
        raise ValueError(
            f"LiberoExpert solves goals of one On/In predicate; this task's goal is {goal_state}:"
            " choose a pick-and-place task (e.g. libero_goal task 1, 2, 4, 6, 8 or 9)"
        )
    _, obj, target = goal_state[0]
    if obj not in movable_objects:
        raise ValueError(f"goal object {obj!r} is not a movable object of this task")
    return PickPlaceGoal(obj=obj, target=target)


def _rotation_error(target: np.ndarray, current: np.ndarray) -> np.ndarray:
    """World-frame rotation vector that turns `current` into `target` (3x3 matrices)."""
    return Rotation.from_matrix(target @ current.T).as_rotvec()


def _grip_rotation(closing_axis: np.ndarray) -> np.ndarray:
    """Top-down grip-site orientation whose fingers close along the horizontal `closing_axis`."""
    x_axis = np.array([closing_axis[0], closing_axis[1], 0.0])
    x_axis /= np.linalg.norm(x_axis)
    return np.column_stack([x_axis, np.cross(DOWN, x_axis), DOWN])


def _xy_distance(point: np.ndarray, extent: Extent) -> float:
    """Horizontal distance from a point to an extent's footprint (0 inside it)."""
    outside = np.maximum(np.maximum(extent.low[:2] - point, point - extent.high[:2]), 0.0)
    return float(np.linalg.norm(outside))


def _hand_clearance(
    grasp_xy: np.ndarray, closing_axis_xy: np.ndarray, half_width_m: float, obstacles: list[Extent]
) -> float:
    """Smallest horizontal distance from the open hand (a segment along the closing axis)."""
    offsets = np.linspace(-half_width_m, half_width_m, 7)
    return min(
        (_xy_distance(grasp_xy + closing_axis_xy * t, box) for t in offsets for box in obstacles),
        default=np.inf,
    )


class LiberoExpert:
    """Scripted pick-and-place expert: call `act()` once per step of the env it was given.

    Example:
        >>> env = gym.make("RPent/Libero-v0", suite="libero_goal", task_id=8, obs_mode="state")
        >>> expert = LiberoExpert(env)
        >>> obs, info = env.reset(seed=0)
        >>> while not info["success"]:
        ...     obs, reward, terminated, truncated, info = env.step(expert.act())
    """

    def __init__(self, env: gym.Env, config: LiberoExpertConfig | None = None) -> None:
        """Attach to a LIBERO env (any wrapper stack around `LiberoEnv`).

        Args:
            env: The env whose simulator state the expert reads.
            config: Gains and tolerances; defaults when None.

        Raises:
            TypeError: When `env` is not an RPent LIBERO env.
            ValueError: When the task is not a single-predicate pick-and-place.
        """
        base_env = env.unwrapped
        if not isinstance(base_env, LiberoEnv):
            raise TypeError(
                f"LiberoExpert needs an RPent LIBERO env, got {type(base_env).__name__}"
            )
        self.env = base_env
        self.config = config or LiberoExpertConfig()
        robosuite_env = base_env.libero_env.env
        self.scene = SceneView(robosuite_env)
        self.goal = pick_place_goal(
            robosuite_env.parsed_problem["goal_state"], robosuite_env.objects_dict
        )
        self._closing_steps = 0
        self._episode_seed: int | None = None

    def act(self) -> np.ndarray:
        """The next action (float32, shape (7,)) for the current state."""
        if self.env.episode_seed != self._episode_seed or self.env.elapsed_steps == 0:
            self._episode_seed, self._closing_steps = self.env.episode_seed, 0
        target_pos, target_rot, gripper = self._decide()
        return self._servo(target_pos, target_rot, gripper)

    def is_holding(self) -> bool:
        """The gripper holds the goal object (both pads touch it)."""
        return self.scene.is_grasped(self.goal.obj)

    def is_lifted(self) -> bool:
        """The goal object is held and clear of every other surface."""
        return self.is_holding() and not self.scene.touches_other_than_gripper(self.goal.obj)

    def _decide(self) -> tuple[np.ndarray, np.ndarray, float]:
        if self._closing_steps:
            return self._close()
        if self.is_holding():
            return self._carry_or_place()
        if self._released_on_target():
            return self._retreat()
        return self._approach_grasp()

    # grasping ---------------------------------------------------------------------------

    def _grasp_pose(self) -> tuple[np.ndarray, np.ndarray]:
        """Grip-site position and orientation that grasp the goal object."""
        cfg, name = self.config, self.goal.obj
        extent = self.scene.extent(name)
        center = np.array([*extent.center_xy, 0.0])
        footprint = extent.high[:2] - extent.low[:2]
        if footprint.min() > cfg.gripper_max_opening_m:  # wider than the hand: hold the rim
            grasp_z = extent.high[2] - cfg.rim_depth_m
            radius = footprint.min() / 2 - cfg.rim_inset_m
            radial = self._free_rim_direction(center, radius, grasp_z)
            position = center + radial * radius
            position[2] = grasp_z
            return position, self._nearest_grip(radial)
        narrow_axis = self.scene.body_rotation(name)[
            :, int(np.argmin(self.scene.local_footprint(name)))
        ]
        position = center.copy()
        position[2] = max(extent.high[2] - 0.01, extent.low[2] + 0.01)
        position[2] = max(position[2], TABLE_TOP_Z_M + 0.012)
        return position, self._nearest_grip(narrow_axis)

    def _free_rim_direction(self, center: np.ndarray, radius: float, grasp_z: float) -> np.ndarray:
        """Horizontal direction of the rim point whose grasp keeps the hand clearest of others.

        Obstacles are the footprints of every other body that reaches above the grasp. Among
        equally clear directions, the one facing the robot is preferred (reachability).
        """
        cfg = self.config
        others = [self.scene.extent(n) for n in self.scene.body_names() if n != self.goal.obj]
        obstacles = [extent for extent in others if extent.high[2] > grasp_z - 0.02]
        toward_robot = self.scene.robot.base_pos[:2] - center[:2]
        toward_robot /= np.linalg.norm(toward_robot)
        best_direction, best_score = DOWN, -np.inf
        for angle in np.linspace(0.0, 2 * np.pi, 16, endpoint=False):
            radial = np.array([np.cos(angle), np.sin(angle), 0.0])
            grasp_xy = center[:2] + radial[:2] * radius
            clearance = _hand_clearance(grasp_xy, radial[:2], cfg.hand_half_width_m, obstacles)
            score = min(clearance, cfg.hand_clearance_m) + 0.01 * float(radial[:2] @ toward_robot)
            if score > best_score:
                best_direction, best_score = radial, score
        return best_direction

    def _nearest_grip(self, closing_axis: np.ndarray) -> np.ndarray:
        """Of the two symmetric top-down grips along `closing_axis`, the one nearer the hand."""
        rotation = _grip_rotation(closing_axis)
        flipped = _grip_rotation(-closing_axis)
        current = self.scene.eef_rotation()
        error = np.linalg.norm(_rotation_error(rotation, current))
        return rotation if error <= np.linalg.norm(_rotation_error(flipped, current)) else flipped

    def _approach_grasp(self) -> tuple[np.ndarray, np.ndarray, float]:
        cfg = self.config
        grasp_pos, grasp_rot = self._grasp_pose()
        eef = self.scene.eef_pos()
        pregrasp = grasp_pos + [0.0, 0.0, cfg.pregrasp_height_m]
        xy_error = np.linalg.norm((grasp_pos - eef)[:2])
        rot_error = np.linalg.norm(_rotation_error(grasp_rot, self.scene.eef_rotation()))
        if xy_error > cfg.xy_tol_m or rot_error > cfg.rot_tol_rad:
            if eef[2] < pregrasp[2] - 0.02 and xy_error > 0.02:
                # Rise before moving sideways so the fingers do not sweep objects away.
                return np.array([*eef[:2], pregrasp[2]]), grasp_rot, GRIPPER_OPEN
            return pregrasp, grasp_rot, GRIPPER_OPEN
        if eef[2] - grasp_pos[2] > cfg.z_tol_m:
            return grasp_pos, grasp_rot, GRIPPER_OPEN
        self._closing_steps = 1
        return self._close()

    def _close(self) -> tuple[np.ndarray, np.ndarray, float]:
        """Hold still and close; after `close_steps` a grasp that missed is released."""
        cfg = self.config
        eef, rotation = self.scene.eef_pos(), self.scene.eef_rotation()
        if self._closing_steps < cfg.close_steps:
            self._closing_steps += 1
            return eef, rotation, GRIPPER_CLOSED
        self._closing_steps = 0
        if self.is_holding():
            return self._carry_or_place()
        return eef + [0.0, 0.0, cfg.pregrasp_height_m], rotation, GRIPPER_OPEN

    # carrying and placing ---------------------------------------------------------------

    def _target_xy(self) -> np.ndarray:
        target = self.goal.target
        position = self.scene.site_pos(target) if self.scene.is_site(target) else None
        if position is None:
            position = self.scene.body_pos(target)
        return position[:2]

    def _target_body(self) -> str:
        target = self.goal.target
        return self.scene.site_parent(target) if self.scene.is_site(target) else target

    def _carry_height(self) -> float:
        """Height of the held object's bottom while it travels."""
        cfg = self.config
        target_top = self.scene.extent(self._target_body()).high[2]
        return max(target_top + cfg.carry_clearance_m, TABLE_TOP_Z_M + cfg.min_carry_height_m)

    def _carry_or_place(self) -> tuple[np.ndarray, np.ndarray, float]:
        cfg = self.config
        eef, rotation = self.scene.eef_pos(), self.scene.eef_rotation()
        obj = self.goal.obj
        obj_extent = self.scene.extent(obj)
        obj_xy = self.scene.body_pos(obj)[:2]
        xy_offset = self._target_xy() - obj_xy
        carry_eef_z = eef[2] + self._carry_height() - obj_extent.low[2]
        if np.linalg.norm(xy_offset) > cfg.xy_tol_m:
            if eef[2] < carry_eef_z - 0.02 and np.linalg.norm(xy_offset) > 0.02:
                return np.array([*eef[:2], carry_eef_z]), rotation, GRIPPER_CLOSED
            return np.array([*(eef[:2] + xy_offset), carry_eef_z]), rotation, GRIPPER_CLOSED
        if self.scene.touches_other_than_gripper(obj):
            return eef, rotation, GRIPPER_OPEN
        lowered = np.array([*(eef[:2] + xy_offset), eef[2] - cfg.lower_step_m])
        return lowered, rotation, GRIPPER_CLOSED

    def _released_on_target(self) -> bool:
        """The object was let go above the target (it rests there or is falling onto it)."""
        obj_xy = self.scene.body_pos(self.goal.obj)[:2]
        near_target = np.linalg.norm(obj_xy - self._target_xy()) < 0.03
        above_table = self.scene.extent(self.goal.obj).low[2] > TABLE_TOP_Z_M + 0.005
        return bool(near_target and above_table)

    def _retreat(self) -> tuple[np.ndarray, np.ndarray, float]:
        eef, rotation = self.scene.eef_pos(), self.scene.eef_rotation()
        top = self.scene.extent(self.goal.obj).high[2]
        return np.array([*eef[:2], top + self.config.retreat_height_m]), rotation, GRIPPER_OPEN

    # control ----------------------------------------------------------------------------

    def _servo(self, target_pos: np.ndarray, target_rot: np.ndarray, gripper: float) -> np.ndarray:
        """Delta-eef action towards a grip-site pose, scaled into [-1, 1]."""
        cfg = self.config
        max_step_m = cfg.carry_step_m if gripper == GRIPPER_CLOSED else cfg.max_step_m
        translation = clip_norm((target_pos - self.scene.eef_pos()) * cfg.gain, max_step_m)
        rotation = _rotation_error(target_rot, self.scene.eef_rotation()) * cfg.rot_gain
        action = np.empty(ACTION_DIM, dtype=np.float32)
        action[:3] = translation / POS_ACTION_SCALE_M
        action[3:6] = rotation / ROT_ACTION_SCALE_RAD
        action[6] = gripper
        return np.clip(action, -1.0, 1.0)
