"""A kinematic in-process Franka for logic tests and dry runs: no network, no dynamics."""

from __future__ import annotations

import numpy as np

from rpent_envs.franka.backend import (
    FrankaConnectionError,
    FrankaControlError,
    RobotSnapshot,
    refuse_non_finite_target,
)
from rpent_envs.franka.pose import Pose

# franky-sim's FR3 at its initial joint positions: TCP 0.554 m ahead, 0.521 m up, pointing down.
HOME_POSE = Pose.from_rpy([0.554, 0.0, 0.521], [np.pi, 0.0, 0.0])
GRIPPER_MAX_WIDTH_M = 0.08


class MemoryFrankaBackend:
    """A Franka whose TCP and gripper reach every command at once.

    It keeps every command (`commanded_poses`, `gripper_commands`: True = close, `stops`: how
    many stop commands it got) so tests and dry runs can inspect what a real arm would have
    been sent, and has three fault switches that behave like the real faults:
    `inject_control_error` (the next motion check raises, as after a reflex, until `recover`),
    `inject_sensor_glitch` (the force estimate reads NaN until `recover`) and
    `drop_connection` (every call raises until `connect`).

    Example:
        >>> backend = MemoryFrankaBackend()
        >>> backend.move_to(HOME_POSE, dynamics_factor=0.2)
        >>> backend.read_state().gripper_width_m
        0.08
    """

    def __init__(self, initial_pose: Pose = HOME_POSE) -> None:
        """Start at `initial_pose` with the gripper open.

        Args:
            initial_pose: The TCP pose before the first command.
        """
        self.tcp_pose = initial_pose
        self.gripper_width_m = GRIPPER_MAX_WIDTH_M
        self.commanded_poses: list[Pose] = []
        self.gripper_commands: list[bool] = []
        self.stops = 0
        self.recoveries = 0
        self._pending_error: str | None = None
        self._error_active = False
        self._recoverable = True
        self._connected = True
        self._glitching = False

    def inject_control_error(
        self, message: str = "motion aborted by reflex", recoverable: bool = True
    ) -> None:
        """Make the next motion check fail as if the arm had triggered a reflex.

        Args:
            message: The error report.
            recoverable: False models an error the automatic recovery cannot clear (an
                emergency stop still pressed): `recover()` then returns False.
        """
        self._pending_error = message
        self._error_active = True
        self._recoverable = recoverable

    def inject_sensor_glitch(self) -> None:
        """Make every state reading report a NaN external force, until `recover()`."""
        self._glitching = True

    def drop_connection(self) -> None:
        """Make every call fail as if the network cable were pulled, until `connect()`."""
        self._connected = False

    def connect(self) -> None:
        """Re-establish the connection."""
        self._connected = True

    def read_state(self) -> RobotSnapshot:
        """The current (commanded) pose, at rest, with no external force (NaN: a glitch)."""
        self._require_connection()
        wrench = np.full(6, np.nan) if self._glitching else np.zeros(6)
        return RobotSnapshot(self.tcp_pose, np.zeros(6), wrench, self.gripper_width_m)

    def move_to(self, pose: Pose, dynamics_factor: float) -> None:
        """Record the target and jump to it; refused while a control error is active.

        Raises:
            FrankaCommandError: For a pose holding NaN or inf (a stop is recorded instead).
        """
        self._require_connection()
        refuse_non_finite_target(pose, self.stop, "the in-memory Franka")
        if self._error_active:
            raise FrankaControlError("the arm is in an error state; call recover() first")
        self.commanded_poses.append(pose)
        self.tcp_pose = pose

    def check_motion(self) -> None:
        """Raise the injected control error once."""
        self._require_connection()
        if self._pending_error is not None:
            message, self._pending_error = self._pending_error, None
            raise FrankaControlError(message)

    def wait_until_settled(self, timeout_s: float) -> bool:
        """Motions finish at once."""
        self.check_motion()
        return True

    def set_gripper(self, closed: bool, speed_m_s: float, force_n: float) -> None:
        """Close fully or open fully at once."""
        self._require_connection()
        self.gripper_commands.append(closed)
        self.gripper_width_m = 0.0 if closed else GRIPPER_MAX_WIDTH_M

    def recover(self) -> bool:
        """Clear the injected error, unless it was injected as unrecoverable."""
        self._require_connection()
        self.recoveries += 1
        self._glitching = False
        if not self._recoverable:
            return False
        self._pending_error = None
        self._error_active = False
        return True

    def stop(self) -> None:
        """Count the stop (nothing moves between calls)."""
        self._require_connection()
        self.stops += 1

    def close(self) -> None:
        """Nothing to release."""

    def _require_connection(self) -> None:
        if not self._connected:
            raise FrankaConnectionError("in-memory Franka: connection dropped by drop_connection()")
