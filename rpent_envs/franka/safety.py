"""The safety box: every pose the env commands lies inside it.

The box is centred on the task's target pose. Positions are bounded per base-frame axis;
orientations are bounded per roll, pitch and yaw (extrinsic x-y-z, about the base axes) of the
rotation that turns the target orientation into the pose's, `pose * target^-1`. Relative angles
stay near 0 and continuous for a gripper pointing down, whose absolute roll sits at the +-pi
wrap, and they turn about the same base axes as the env's rotation actions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.spatial.transform import Rotation

from rpent_envs.franka.pose import Pose

# Relative pitch at +-pi/2 is the gimbal-lock singularity of x-y-z angles: bounds must stay below.
MAX_HALF_EXTENT_RAD = 1.5


@dataclass(frozen=True)
class SafetyBox:
    """Axis-aligned position bounds and relative-orientation bounds around a centre pose.

    Attributes:
        center: The target pose the box is centred on.
        half_extent_m: (3,) allowed distance from the centre along base x, y, z, in metres.
        half_extent_rad: (3,) allowed relative roll, pitch, yaw, in radians (< 1.5 each).

    Example:
        >>> center = Pose.from_rpy([0.5, 0.0, 0.2], [np.pi, 0.0, 0.0])
        >>> box = SafetyBox(center, np.full(3, 0.05), np.full(3, 0.3))
        >>> far = Pose.from_rpy([0.9, 0.0, 0.2], [np.pi, 0.0, 0.0])
        >>> np.round(box.clip(far).position_m, 3).tolist()
        [0.55, 0.0, 0.2]
    """

    center: Pose
    half_extent_m: np.ndarray
    half_extent_rad: np.ndarray

    def __post_init__(self) -> None:
        half_extent_m = np.asarray(self.half_extent_m, np.float64).copy()
        half_extent_rad = np.asarray(self.half_extent_rad, np.float64).copy()
        if half_extent_m.shape != (3,) or np.any(half_extent_m < 0):
            raise ValueError(f"box_half_extent_m={half_extent_m}: give 3 values >= 0 (metres)")
        if (
            half_extent_rad.shape != (3,)
            or np.any(half_extent_rad < 0)
            or np.any(half_extent_rad > MAX_HALF_EXTENT_RAD)
        ):
            raise ValueError(
                f"box_half_extent_rad={half_extent_rad}: give 3 values in [0, "
                f"{MAX_HALF_EXTENT_RAD}] radians (roll, pitch, yaw around the target)"
            )
        object.__setattr__(self, "half_extent_m", half_extent_m)
        object.__setattr__(self, "half_extent_rad", half_extent_rad)

    def relative_rpy(self, pose: Pose) -> np.ndarray:
        """Roll, pitch, yaw (rad, base axes) turning the centre's orientation into `pose`'s."""
        return (pose.rotation * self.center.rotation.inv()).as_euler("xyz")

    def clip(self, pose: Pose) -> Pose:
        """The pose moved into the box: each position axis and relative angle clamped."""
        low_m = self.center.position_m - self.half_extent_m
        high_m = self.center.position_m + self.half_extent_m
        position_m = np.clip(pose.position_m, low_m, high_m)
        rpy_rad = np.clip(self.relative_rpy(pose), -self.half_extent_rad, self.half_extent_rad)
        rotation = Rotation.from_euler("xyz", rpy_rad) * self.center.rotation
        return Pose.from_rotation(position_m, rotation)

    def contains(self, pose: Pose, tolerance: float = 1e-9) -> bool:
        """Whether the pose is inside the box, up to `tolerance` (m and rad)."""
        offset_m = np.abs(pose.position_m - self.center.position_m)
        offset_rad = np.abs(self.relative_rpy(pose))
        return bool(
            np.all(offset_m <= self.half_extent_m + tolerance)
            and np.all(offset_rad <= self.half_extent_rad + tolerance)
        )
