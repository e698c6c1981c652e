"""End-effector poses: a position and an orientation, with the few operations the env needs."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.spatial.transform import Rotation


@dataclass(frozen=True)
class Pose:
    """A rigid pose in the robot base frame.

    Attributes:
        position_m: (3,) translation in metres.
        quat_xyzw: (4,) unit quaternion, scalar last (franky's and scipy's order).

    Example:
        >>> pose = Pose.from_rpy([0.5, 0.0, 0.3], [np.pi, 0.0, 0.0])
        >>> np.round(pose.position_m, 2).tolist()
        [0.5, 0.0, 0.3]
    """

    position_m: np.ndarray
    quat_xyzw: np.ndarray

    def __post_init__(self) -> None:
        object.__setattr__(self, "position_m", np.asarray(self.position_m, np.float64).copy())
        object.__setattr__(self, "quat_xyzw", np.asarray(self.quat_xyzw, np.float64).copy())

    @classmethod
    def from_rpy(cls, position_m: np.ndarray, rpy_rad: np.ndarray) -> Pose:
        """Build a pose from a position and roll, pitch, yaw (extrinsic x-y-z) in radians."""
        return cls(position_m, Rotation.from_euler("xyz", rpy_rad).as_quat())

    @classmethod
    def from_rotation(cls, position_m: np.ndarray, rotation: Rotation) -> Pose:
        """Build a pose from a position and a scipy rotation."""
        return cls(position_m, rotation.as_quat())

    @property
    def rotation(self) -> Rotation:
        """The orientation as a scipy rotation."""
        return Rotation.from_quat(self.quat_xyzw)

    def as_vector(self) -> np.ndarray:
        """Position and quaternion as one (7,) vector: x, y, z, qx, qy, qz, qw."""
        return np.concatenate([self.position_m, self.quat_xyzw])

    def moved_by(self, delta_position_m: np.ndarray, delta_rotvec_rad: np.ndarray) -> Pose:
        """Translate, then rotate about the base-frame axes through the pose's own origin."""
        rotation = Rotation.from_rotvec(delta_rotvec_rad) * self.rotation
        return Pose.from_rotation(self.position_m + delta_position_m, rotation)


def limit_step(start: Pose, goal: Pose, max_step_m: float, max_step_rad: float) -> Pose:
    """Shorten the way from `start` to `goal` to at most `max_step_m` and `max_step_rad`.

    The direction of travel is kept; only its length (translation norm, rotation angle) shrinks.

    Args:
        start: Where the step begins (the measured pose).
        goal: Where the step would end.
        max_step_m: Longest allowed translation, in metres.
        max_step_rad: Largest allowed rotation angle, in radians.

    Returns:
        `goal`, or the pose on the way to it that is within both limits.
    """
    translation_m = goal.position_m - start.position_m
    distance_m = float(np.linalg.norm(translation_m))
    if distance_m > max_step_m:
        translation_m *= max_step_m / distance_m
    rotvec_rad = (start.rotation.inv() * goal.rotation).as_rotvec()
    angle_rad = float(np.linalg.norm(rotvec_rad))
    if angle_rad > max_step_rad:
        rotvec_rad *= max_step_rad / angle_rad
    rotation = start.rotation * Rotation.from_rotvec(rotvec_rad)
    return Pose.from_rotation(start.position_m + translation_m, rotation)
