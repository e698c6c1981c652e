"""The Franka backend for a real arm (or franky-sim on loopback), through franky-control.

franky is imported when a backend is built, never at package import. Its exceptions are
translated into the two the env understands: `FrankaConnectionError` (the state stream or the
command socket is gone) and `FrankaControlError` (the arm aborted a motion, or franky's planner
could not plan one, and needs a recovery).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import numpy as np

from rpent_envs.franka.backend import (
    FrankaConnectionError,
    FrankaControlError,
    RobotSnapshot,
    refuse_non_finite_target,
)
from rpent_envs.franka.franky_gripper import SerialGripper
from rpent_envs.franka.pose import Pose

logger = logging.getLogger(__name__)

# A hand command takes ~1 s; one on a dead connection fails after libfranka's 1 s UDP timeout.
GRIPPER_RELEASE_TIMEOUT_S = 10.0


def import_franky() -> ModuleType:
    """Import franky, or explain which extra installs it."""
    try:
        import franky
    except ImportError as error:
        raise ImportError(
            "the Franka backend needs franky-control: pip install -e '.[franka]'"
        ) from error
    return franky


class FrankyBackend:
    """A Franka arm and hand reached over FCI (libfranka's protocol) through franky.

    Example:
        >>> backend = FrankyBackend("172.16.0.2")  # doctest: +SKIP
        >>> backend.read_state().tcp_pose.position_m  # doctest: +SKIP
        array([0.307, 0.   , 0.487])
    """

    def __init__(
        self,
        host: str,
        realtime: bool = False,
        torque_threshold_nm: float = 20.0,
        force_threshold_n: float = 30.0,
    ) -> None:
        """Connect to the arm and its gripper.

        Args:
            host: FCI address of the arm (or a franky-sim loopback address such as 127.0.0.2).
            realtime: Require a realtime kernel (libfranka's `RealtimeConfig.Enforce`); leave
                False on ordinary kernels and for franky-sim.
            torque_threshold_nm: Joint torque above which the arm stops with a reflex.
            force_threshold_n: Cartesian force above which the arm stops with a reflex.
        """
        self.host = host
        self._franky = import_franky()
        self._robot_kwargs: dict[str, Any] = {
            "realtime_config": self._franky.RealtimeConfig.Enforce
            if realtime
            else self._franky.RealtimeConfig.Ignore,
            "default_torque_threshold": torque_threshold_nm,
            "default_force_threshold": force_threshold_n,
        }
        self._robot: Any = None
        self._gripper: SerialGripper | None = None
        self._connection_lost = False
        self.connect()

    def connect(self) -> None:
        """Open a fresh connection, dropping the previous one (one client per arm)."""
        self._release()
        try:
            self._robot = self._franky.Robot(self.host, **self._robot_kwargs)
            self._gripper = SerialGripper(self._franky.Gripper(self.host))
        except self._franky.Exception as error:
            raise FrankaConnectionError(
                f"cannot connect to the Franka at {self.host}: {error}. Check the address, that "
                "FCI is activated in Desk (real arm) or that franky-sim serves it (simulation)"
            ) from error
        self._connection_lost = False

    def read_state(self) -> RobotSnapshot:
        """Read pose, twist, external wrench and gripper width."""
        with self._translated_errors("reading the state"):
            try:
                cartesian_state = self._robot.current_cartesian_state
                wrench = np.asarray(self._robot.state.O_F_ext_hat_K, np.float64).copy()
                self._gripper.pump()
                gripper_width_m = self._gripper.width_m()
            except RuntimeError as error:  # franky reports a dead state stream this way
                self._connection_lost = True
                raise self._connection_error("reading the state", error) from error
        end_effector = cartesian_state.pose.end_effector_pose
        twist = cartesian_state.velocity.end_effector_twist
        return RobotSnapshot(
            tcp_pose=Pose(end_effector.translation, end_effector.quaternion),
            tcp_twist=np.concatenate([twist.linear, twist.angular]).astype(np.float64),
            external_wrench=wrench,
            gripper_width_m=gripper_width_m,
        )

    def move_to(self, pose: Pose, dynamics_factor: float) -> None:
        """Queue an absolute Cartesian motion; it takes over from the one in progress.

        Raises:
            FrankaCommandError: For a pose holding NaN or inf (the arm is stopped instead).
        """
        refuse_non_finite_target(pose, self.stop, f"the Franka at {self.host}")
        franky = self._franky
        target = franky.Affine(pose.position_m, pose.quat_xyzw)
        motion = franky.CartesianMotion(
            target, franky.ReferenceType.Absolute, relative_dynamics_factor=dynamics_factor
        )
        with self._translated_errors("starting a motion"):
            self._robot.move(motion, asynchronous=True)

    def check_motion(self) -> None:
        """Raise the error of an aborted motion, if any."""
        with self._translated_errors("checking the motion"):
            self._robot.poll_motion()

    def wait_until_settled(self, timeout_s: float) -> bool:
        """Join the motion in progress."""
        with self._translated_errors("waiting for the motion"):
            return bool(self._robot.join_motion(timeout=timeout_s))

    def set_gripper(self, closed: bool, speed_m_s: float, force_n: float) -> None:
        """Grasp (close until blocked) or open fully, after the hand's command in progress."""
        with self._translated_errors("commanding the gripper"):
            self._gripper.request(closed, speed_m_s, force_n)

    def recover(self) -> bool:
        """Run libfranka's automatic error recovery."""
        with self._translated_errors("recovering from an error"):
            return bool(self._robot.recover_from_errors())

    def stop(self) -> None:
        """Stop the arm's motion and wait until it is stopped (the gripper keeps its grasp)."""
        with self._translated_errors("stopping"):
            self._robot.stop()
            try:
                self._robot.join_motion()
            except self._franky.ControlException as error:
                if "preempted" not in str(error):  # the stopped motion reports that it was
                    raise

    def close(self) -> None:
        """Stop the arm if the connection still stands, then release it in any case."""
        if self._robot is not None and not self._connection_lost:
            try:
                self.stop()
            except (FrankaConnectionError, FrankaControlError) as error:
                logger.warning("could not stop the Franka at %s on close: %s", self.host, error)
        self._release()

    def _release(self) -> None:
        if self._gripper is not None:
            self._gripper.release(GRIPPER_RELEASE_TIMEOUT_S)
        self._robot = self._gripper = None

    @contextmanager
    def _translated_errors(self, activity: str) -> Iterator[None]:
        franky = self._franky
        try:
            yield
        except franky.NetworkException as error:
            self._connection_lost = True
            raise self._connection_error(activity, error) from error
        # franky reports a motion its planner (Ruckig) could not plan as a plain RuntimeError:
        # like a reflex, the arm stops that motion and the episode ends with a recovery.
        except (franky.Exception, franky.GripperException, RuntimeError) as error:
            if self._connection_lost:  # libfranka's follow-up errors on a dead connection
                raise self._connection_error(activity, error) from error
            raise FrankaControlError(
                f"the Franka at {self.host} reported an error while {activity}: {error}"
            ) from error

    def _connection_error(self, activity: str, error: BaseException) -> FrankaConnectionError:
        return FrankaConnectionError(
            f"lost the connection to the Franka at {self.host} while {activity}: {error}. "
            "Check the network and the arm, then reset() the env to reconnect"
        )
