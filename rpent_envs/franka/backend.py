"""What the Franka env needs from a robot connection, and the two errors a backend raises.

Backends: `FrankyBackend` (a real arm or franky-sim, through franky) and `MemoryFrankaBackend`
(kinematic, in-process, for logic tests and dry runs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from rpent_envs.franka.pose import Pose


class FrankaControlError(RuntimeError):
    """The robot aborted a motion (reflex, safety function, control error); it needs a recovery."""


class FrankaConnectionError(ConnectionError):
    """The connection to the robot is lost; nothing more can be sent until it is re-established."""


@dataclass(frozen=True)
class RobotSnapshot:
    """One reading of the robot's state, all in the robot base frame.

    Attributes:
        tcp_pose: End-effector (TCP) pose.
        tcp_twist: (6,) TCP linear (m/s) and angular (rad/s) velocity.
        external_wrench: (6,) estimated external force (N) and torque (Nm) on the TCP.
        gripper_width_m: Distance between the fingers, in metres.
    """

    tcp_pose: Pose
    tcp_twist: np.ndarray
    external_wrench: np.ndarray
    gripper_width_m: float


class FrankaBackend(Protocol):
    """A connection to one Franka arm and its gripper.

    Every method may raise `FrankaConnectionError`; motion methods may raise `FrankaControlError`.
    """

    def connect(self) -> None:
        """Open the connection (again, after it was lost)."""
        ...

    def read_state(self) -> RobotSnapshot:
        """Read the current state."""
        ...

    def move_to(self, pose: Pose, dynamics_factor: float) -> None:
        """Start moving the TCP to an absolute pose; returns at once.

        A motion in progress is replaced smoothly. `dynamics_factor` in (0, 1] scales the arm's
        velocity, acceleration and jerk limits.
        """
        ...

    def check_motion(self) -> None:
        """Raise `FrankaControlError` if the last motion was aborted since the previous check."""
        ...

    def wait_until_settled(self, timeout_s: float) -> bool:
        """Wait for the motion in progress to finish; False when `timeout_s` ran out first."""
        ...

    def set_gripper(self, closed: bool, speed_m_s: float, force_n: float) -> None:
        """Start closing (grasping with `force_n`) or opening the gripper; returns at once."""
        ...

    def recover(self) -> bool:
        """Run the arm's automatic error recovery; True when the arm can move again."""
        ...

    def stop(self) -> None:
        """Stop any motion in progress."""
        ...

    def close(self) -> None:
        """Stop motion and release the connection."""
        ...
