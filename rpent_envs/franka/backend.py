"""What the Franka env needs from a robot connection, and the errors a backend raises.

Backends: `FrankyBackend` (a real arm or franky-sim, through franky) and `MemoryFrankaBackend`
(kinematic, in-process, for logic tests and dry runs). Both refuse a target pose holding NaN
or inf (`refuse_non_finite_target`): the arm is commanded to stop and `FrankaCommandError`
raised, so no NaN is ever sent to the arm, whatever computed it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from rpent_envs.franka.pose import Pose


class FrankaControlError(RuntimeError):
    """The robot aborted a motion (reflex, safety function, control error); it needs a recovery."""


class FrankaResetAborted(FrankaControlError):
    """A reset motion stopped on an error the automatic recovery cleared; reset() again goes on.

    The arm holds where the motion stopped.
    """


class FrankaConnectionError(ConnectionError):
    """The connection to the robot is lost; nothing more can be sent until it is re-established."""


class FrankaCommandError(ValueError):
    """A command refused before it was sent (a non-finite target); the arm was told to stop."""


def refuse_non_finite_target(pose: Pose, stop: Callable[[], None], arm: str) -> None:
    """Stop the arm and raise `FrankaCommandError` when `pose` holds NaN or inf.

    Args:
        pose: The target about to be sent.
        stop: Stops the arm's motion in progress.
        arm: Names the arm in the message.
    """
    if np.all(np.isfinite(pose.as_vector())):
        return
    stop()
    raise FrankaCommandError(
        f"refused to send a target pose holding NaN or inf to {arm} (position "
        f"{pose.position_m}, quaternion {pose.quat_xyzw}); the arm was commanded to stop. Check "
        "what computed the target (the measured state, the policy), then reset()"
    )


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
        velocity, acceleration and jerk limits. A pose holding NaN or inf is never sent: the
        arm is stopped and `FrankaCommandError` raised (`refuse_non_finite_target`).
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
