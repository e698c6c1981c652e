"""The settings of a Franka episode: where the task is, how far the arm may go, how fast."""

from __future__ import annotations

import math
from dataclasses import dataclass

Vector3 = tuple[float, float, float]
VECTOR_FIELDS = ("target_position_m", "target_rpy_rad", "box_half_extent_m", "box_half_extent_rad")


@dataclass(frozen=True)
class FrankaConfig:
    """Settings of `RPent/Franka-v0`; every field is a plain value so a run can be replayed.

    Attributes:
        host: FCI address of the arm (a franky-sim loopback address in simulation).
        realtime: Require a realtime kernel (libfranka's RealtimeConfig.Enforce).
        instruction: The language instruction (`task_description`, `info["task"]`).
        target_position_m: Task target position in the robot base frame (e.g. the hole).
        target_rpy_rad: Target orientation as extrinsic roll, pitch, yaw; (pi, 0, 0) points
            the gripper straight down.
        box_half_extent_m: Safety box half size along base x, y, z around the target.
        box_half_extent_rad: Allowed roll, pitch, yaw relative to the target orientation.
        position_scale_m: Translation of a full (+-1) position action, per axis and step.
        rotation_scale_rad: Rotation of a full rotation action, per axis and step.
        max_step_m: Longest translation one step may command from the measured pose.
        max_step_rad: Largest rotation one step may command from the measured pose.
        period_s: Control period (0.1 = 10 Hz); 0 steps as fast as the backend answers.
        dynamics_factor: Fraction of the arm's velocity, acceleration and jerk limits in steps.
        reset_height_m: Reset pose height above the target.
        reset_noise_m: Uniform random offset (+-, per axis) added to the reset position.
        reset_noise_rad: Uniform random offset (+-, per angle) added to the reset orientation.
        reset_dynamics_factor: Dynamics fraction of the (slow) reset motions.
        reset_timeout_s: How long a reset motion may take before the reset fails.
        reset_gripper_closed: Gripper state set at reset (before moving): False opens it, True
            grasps (an object kept in hand across episodes, such as a peg).
        gripper_speed_m_s: Finger speed when opening or closing.
        gripper_force_n: Grasp force when closing.
        torque_threshold_nm: Joint torque that stops the arm with a reflex.
        force_threshold_n: Cartesian force that stops the arm with a reflex.
        camera_serial: RealSense serial number (camera="realsense"); None takes the first one.
        wrist_camera_serial: Serial number of the wrist RealSense (wrist_camera="realsense").
        image_size: Height and width of `obs["image"]` and `obs["wrist_image"]`, in pixels.

    Example:
        >>> FrankaConfig(host="127.0.0.2", period_s=0.05).period_s
        0.05
    """

    host: str = "172.16.0.2"
    realtime: bool = False
    instruction: str = "insert the peg in the hole"
    target_position_m: Vector3 = (0.5, 0.0, 0.2)
    target_rpy_rad: Vector3 = (math.pi, 0.0, 0.0)
    box_half_extent_m: Vector3 = (0.1, 0.1, 0.1)
    box_half_extent_rad: Vector3 = (0.3, 0.3, 0.5)
    position_scale_m: float = 0.02
    rotation_scale_rad: float = 0.1
    max_step_m: float = 0.03
    max_step_rad: float = 0.15
    period_s: float = 0.1
    dynamics_factor: float = 0.2
    reset_height_m: float = 0.05
    reset_noise_m: float = 0.0
    reset_noise_rad: float = 0.0
    reset_dynamics_factor: float = 0.1
    reset_timeout_s: float = 30.0
    reset_gripper_closed: bool = False
    gripper_speed_m_s: float = 0.1
    gripper_force_n: float = 20.0
    torque_threshold_nm: float = 20.0
    force_threshold_n: float = 30.0
    camera_serial: str | None = None
    wrist_camera_serial: str | None = None
    image_size: int = 128

    def __post_init__(self) -> None:
        for name in VECTOR_FIELDS:  # lists from JSON or gym.make kwargs become tuples
            values = tuple(float(value) for value in getattr(self, name))
            if len(values) != 3:
                raise ValueError(f"{name}={values}: give 3 numbers")
            object.__setattr__(self, name, values)
        self._check_ranges()

    def _check_ranges(self) -> None:
        positive = ("position_scale_m", "rotation_scale_rad", "max_step_m", "max_step_rad")
        for name in (*positive, "reset_timeout_s", "gripper_speed_m_s", "gripper_force_n"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}={getattr(self, name)}: must be > 0")
        for name in ("dynamics_factor", "reset_dynamics_factor"):
            if not 0 < getattr(self, name) <= 1:
                raise ValueError(f"{name}={getattr(self, name)}: must be in (0, 1]")
        if self.period_s < 0:
            raise ValueError(f"period_s={self.period_s}: must be >= 0")
        if self.image_size < 16:
            raise ValueError(f"image_size={self.image_size}: use at least 16 pixels")
        if not 0 <= self.reset_height_m <= self.box_half_extent_m[2]:
            raise ValueError(
                f"reset_height_m={self.reset_height_m}: the reset pose must lie in the safety "
                f"box; use a value in [0, box_half_extent_m[2]={self.box_half_extent_m[2]}]"
            )
        if self.reset_noise_m < 0 or self.reset_noise_rad < 0:
            raise ValueError("reset_noise_m and reset_noise_rad must be >= 0")
