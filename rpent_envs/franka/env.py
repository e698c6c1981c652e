"""`RPent/Franka-v0`: a real Franka arm as a Gymnasium env, delta end-effector control at 10 Hz."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, Literal

import gymnasium as gym
import numpy as np

from rpent_envs.action_checks import checked_action
from rpent_envs.episode import success_info
from rpent_envs.franka.backend import (
    FrankaBackend,
    FrankaCommandError,
    FrankaConnectionError,
    FrankaControlError,
    FrankaResetAborted,
    RobotSnapshot,
)
from rpent_envs.franka.camera import Camera
from rpent_envs.franka.config import FrankaConfig
from rpent_envs.franka.devices import make_backend, make_cameras
from rpent_envs.franka.pose import Pose, limit_step
from rpent_envs.franka.safety import SafetyBox
from rpent_envs.state_checks import INVALID_STATE_KEY, LastFiniteState

logger = logging.getLogger(__name__)

ACTION_DIM = 7
STATE_DIM = 19
SuccessFn = Callable[[dict[str, np.ndarray]], bool]
"""Decides success from an observation (a real robot has no simulator to ask)."""


def commanded_target(
    measured: Pose, action: np.ndarray, config: FrankaConfig, box: SafetyBox
) -> tuple[Pose, bool]:
    """The absolute pose one step commands: the action's delta, step-clamped, box-clipped.

    The box clip comes last, so no action and no measured pose can yield a target outside it.

    Args:
        measured: The TCP pose measured at the start of the step.
        action: (7,) in [-1, 1]; [:3] position and [3:6] rotation (base-frame rotation vector).
        config: Scales and step limits.
        box: The safety box.

    Returns:
        The pose to send, and whether the box changed it.
    """
    desired = measured.moved_by(
        action[:3] * config.position_scale_m, action[3:6] * config.rotation_scale_rad
    )
    stepped = limit_step(measured, desired, config.max_step_m, config.max_step_rad)
    target = box.clip(stepped)
    return target, not np.allclose(target.as_vector(), stepped.as_vector(), atol=1e-9)


def safety_box(config: FrankaConfig) -> SafetyBox:
    """The safety box a config describes, centred on its target pose."""
    center = Pose.from_rpy(config.target_position_m, config.target_rpy_rad)
    return SafetyBox(center, config.box_half_extent_m, config.box_half_extent_rad)


class FrankaEnv(gym.Env[dict[str, np.ndarray], np.ndarray]):
    """A Franka arm driven by delta end-effector actions through a fixed-period control loop.

    Action: float32 (7,) in [-1, 1]: [:3] TCP translation (x `position_scale_m`, base frame),
    [3:6] TCP rotation vector (x `rotation_scale_rad`, base-frame axes), [6] gripper (< 0
    closes with `gripper_force_n`, >= 0 opens). Each step adds the delta to the *measured* pose,
    shortens it to `max_step_m` / `max_step_rad`, clips it into the safety box, sends it as an
    asynchronous absolute Cartesian target and sleeps out the rest of `period_s`. NaN or inf
    actions are refused with ValueError before anything moves.

    Observation (Dict): `state` float32 (19,) = TCP position (3, m, base frame); TCP roll,
    pitch, yaw relative to the target orientation (3, rad, base axes, `SafetyBox.relative_rpy`);
    TCP linear (3, m/s) and angular (3, rad/s) velocity; gripper width (1, m); external force
    (3, N) and torque (3, Nm). `image` (third-person camera) and `wrist_image` (hand camera)
    uint8 (S, S, 3), each when its camera is configured.

    Reward: 1.0 on success, else 0.0; the episode terminates on success. Success comes from
    `success_fn(observation)`; without one it is always False.

    Info keys: `success` / `is_success` (bool), `task` (the instruction), `commanded_pose`
    (float32 (7,): position and quaternion xyzw last sent), `box_clipped` (the box changed the
    target), `period_overrun_s` (how late the step ended; 0 when on time), `control_error`
    (None, or the report of a reflex/control error: the env ran the automatic recovery and
    truncated the episode).

    Faults: every fault a step meets leaves the arm commanded to stop (where the connection
    still lets a command through) and says so clearly:
    - a NaN or inf action: refused with ValueError before anything moves, the arm stops; the
      episode goes on with the next valid action;
    - a state reading holding NaN or inf (a sensor glitch) at the end of a step: the arm is
      commanded to stop and the episode truncated with `info["invalid_state"]` naming the
      entries; the observation holds the last finite state (`rpent_envs.state_checks`);
      at reset it raises RuntimeError;
    - a target holding NaN or inf (say from a broken state reading at the start of a step):
      the backend refuses it and stops the arm (`FrankaCommandError`); the episode is over;
    - a reflex or control error (also in the middle of an action chunk): the arm's reflex
      stopped it, the env runs the automatic recovery, commands a stop and truncates the
      episode with `info["control_error"]`, so a chunk executor stops there; when the recovery
      fails, `FrankaControlError` says how to clear the error; a reset motion stopped so, and
      recovered from, raises `FrankaResetAborted` (reset() again goes on);
    - a lost connection raises `FrankaConnectionError` naming the arm; nothing can be sent,
      and the arm stops itself when its command stream stops (FCI's communication watchdog;
      franky-sim holds still likewise). The episode is over and `reset()` reconnects.

    Reset: run the automatic error recovery, open the gripper (or grasp, with
    `reset_gripper_closed`), lift straight up to the reset height, then move to
    `reset_height_m` above the target (plus the seeded random offsets), slowly.

    Example:
        >>> import gymnasium as gym, rpent_envs
        >>> env = gym.make("RPent/Franka-v0", backend="memory", period_s=0.0)
        >>> obs, info = env.reset(seed=0)
        >>> obs["state"].shape, info["task"]
        ((19,), 'insert the peg in the hole')
    """

    metadata = {"render_modes": [], "render_fps": 10}

    def __init__(
        self,
        config: FrankaConfig | None = None,
        *,
        backend: Literal["franky", "memory"] | FrankaBackend = "franky",
        camera: Literal["none", "realsense", "blank"] | Camera = "none",
        wrist_camera: Literal["none", "realsense", "blank"] | Camera = "none",
        success_fn: SuccessFn | None = None,
        **overrides: Any,
    ) -> None:
        """Connect to the arm (and cameras) and build the spaces.

        Args:
            config: Settings; None uses the defaults.
            backend: "franky" (a real arm or franky-sim at `config.host`), "memory" (in-process,
                no hardware), or a backend object.
            camera: The third-person camera of `obs["image"]`: "none", "realsense"
                (pyrealsense2, the `realsense` extra), "blank" (a constant grey frame, for dry
                runs of a loop on franky-sim: `BlankCamera`), or a camera object giving
                `image_size` square frames.
            wrist_camera: The hand camera of `obs["wrist_image"]`, the same choices
                (`wrist_camera_serial` picks the RealSense).
            success_fn: Maps an observation to success; None means success is never reported.
            **overrides: FrankaConfig fields replacing those of `config`.
        """
        self.config = replace(config or FrankaConfig(), **overrides)
        self.box = safety_box(self.config)
        self.task_description = self.config.instruction
        self.success_fn = success_fn
        self.backend = make_backend(backend, self.config)
        self.cameras = make_cameras(self.config, camera, wrist_camera)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (ACTION_DIM,), np.float32)
        spaces = {"state": gym.spaces.Box(-np.inf, np.inf, (STATE_DIM,), np.float32)}
        size = self.config.image_size
        for key in self.cameras:
            spaces[key] = gym.spaces.Box(0, 255, (size, size, 3), np.uint8)
        self.observation_space = gym.spaces.Dict(spaces)
        self.commanded_pose = self.box.center
        self._gripper_closed: bool | None = None
        self._episode_active = False
        self._needs_reconnect = False
        self._tick_s = time.monotonic()
        self._states = LastFiniteState("Franka env")

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Recover, set the gripper, move slowly to the (seeded, randomised) reset pose."""
        super().reset(seed=seed)
        self._episode_active = False
        with self._lost_connection_ends_episode():
            if self._needs_reconnect:
                self.backend.connect()
                self._needs_reconnect = False
            self._recover()
            self._gripper_closed = None  # command it whatever the last command was
            self._command_gripper(closed=self.config.reset_gripper_closed)
            lift_pose, reset_pose = self._reset_waypoints()
            for pose in (lift_pose, reset_pose):
                self._move_and_wait(pose)
            snapshot = self.backend.read_state()
        observation = self._observation(snapshot)
        observation["state"] = self._states.start(observation["state"])
        self._episode_active = True
        self._tick_s = time.monotonic()
        return observation, self._info(observation, box_clipped=False, overrun_s=0.0)

    def step(
        self, action: np.ndarray
    ) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        """Send one clipped target, wait out the control period, observe."""
        if not self._episode_active:
            raise gym.error.ResetNeeded(
                "the Franka episode ended with an error (or never started); call reset()"
            )
        with self._lost_connection_ends_episode():
            action = self._checked_action(action)
            try:
                box_clipped = self._send_command(action)
                overrun_s = self._wait_for_tick()
                self.backend.check_motion()
                snapshot = self.backend.read_state()
            except FrankaControlError as error:
                return self._truncate_after_control_error(error)
            except FrankaCommandError:  # the backend stopped the arm
                self._episode_active = False
                raise
        observation = self._observation(snapshot)
        observation["state"], invalid = self._states.check(observation["state"])
        info = self._info(observation, box_clipped, overrun_s)
        if invalid is not None:
            self._stop_after_invalid_state()
            info[INVALID_STATE_KEY] = invalid
        return observation, float(info["success"]), info["success"], invalid is not None, info

    def render(self) -> None:
        """No render modes: the camera image is part of the observation."""
        return None

    def close(self) -> None:
        """Stop the arm and release the connection and the cameras."""
        self.backend.close()
        for camera in self.cameras.values():
            camera.close()
        self.cameras = {}

    @contextmanager
    def _lost_connection_ends_episode(self) -> Iterator[None]:
        try:
            yield
        except FrankaConnectionError:
            self._episode_active = False
            self._needs_reconnect = True
            raise

    def _checked_action(self, action: np.ndarray) -> np.ndarray:
        """The action clipped to [-1, 1]; a malformed one stops the arm and is refused."""
        try:
            checked = checked_action(action, (ACTION_DIM,), np.float64)
        except ValueError:
            self.backend.stop()  # a broken policy: hold still rather than finish the last target
            raise
        return np.clip(checked, -1.0, 1.0)

    def _send_command(self, action: np.ndarray) -> bool:
        """Send the step's pose target and gripper command; True when the box clipped it."""
        self.backend.check_motion()
        measured = self.backend.read_state().tcp_pose
        target, box_clipped = commanded_target(measured, action, self.config, self.box)
        self.backend.move_to(target, self.config.dynamics_factor)
        self.commanded_pose = target
        self._command_gripper(closed=bool(action[6] < 0))
        return box_clipped

    def _command_gripper(self, closed: bool) -> None:
        if closed != self._gripper_closed:  # the hand runs one command at a time: send changes
            config = self.config
            self.backend.set_gripper(closed, config.gripper_speed_m_s, config.gripper_force_n)
            self._gripper_closed = closed

    def _wait_for_tick(self) -> float:
        """Sleep until this step's period is over; returns how late it already was (s)."""
        deadline_s = self._tick_s + self.config.period_s
        now_s = time.monotonic()
        if now_s < deadline_s:
            time.sleep(deadline_s - now_s)
        self._tick_s = max(deadline_s, now_s)
        return max(0.0, now_s - deadline_s)

    def _truncate_after_control_error(
        self, error: FrankaControlError
    ) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        logger.warning("Franka control error, running the automatic recovery: %s", error)
        self._episode_active = False
        self._recover_or_raise(error)
        self.backend.stop()  # recovered and idle; nothing more of the chunk may move it
        observation = self._observation(self.backend.read_state())
        observation["state"], _ = self._states.check(observation["state"])
        info = self._info(observation, box_clipped=False, overrun_s=0.0)
        info["control_error"] = str(error)
        return observation, 0.0, False, True, info

    def _stop_after_invalid_state(self) -> None:
        """Hold the arm still: nothing may act on a broken reading; the episode is over."""
        self._episode_active = False
        with self._lost_connection_ends_episode():
            self._stop_if_possible()

    def _recover(self) -> None:
        """Clear any error, reported or not (a reflex between episodes, a released E-stop)."""
        cause: FrankaControlError | str = "at reset"
        try:
            self.backend.check_motion()
        except FrankaControlError as error:
            logger.warning("Franka reported an error before reset: %s", error)
            cause = error
        self._recover_or_raise(cause)

    def _recover_or_raise(self, cause: FrankaControlError | str) -> None:
        if not self.backend.recover():
            self._stop_if_possible()
            raise FrankaControlError(
                f"automatic error recovery failed ({cause}). Clear the error on the arm "
                "(Desk / pilot buttons), then call reset()"
            )

    def _stop_if_possible(self) -> None:
        """Command a stop to an arm in an error state (it may refuse: that is logged)."""
        try:
            self.backend.stop()
        except FrankaControlError as error:
            logger.warning("the Franka refused the stop command: %s", error)

    def _reset_waypoints(self) -> tuple[Pose, Pose]:
        """Straight up from where the arm is, then the randomised pose above the target."""
        config, rng = self.config, self.np_random
        offset_m = rng.uniform(-config.reset_noise_m, config.reset_noise_m, 3)
        offset_m[2] += config.reset_height_m
        tilt_rad = rng.uniform(-config.reset_noise_rad, config.reset_noise_rad, 3)
        reset_pose = self.box.clip(self.box.center.moved_by(offset_m, tilt_rad))
        measured = self.backend.read_state().tcp_pose
        lift_position_m = measured.position_m.copy()
        lift_position_m[2] = max(lift_position_m[2], reset_pose.position_m[2])
        return Pose(lift_position_m, measured.quat_xyzw), reset_pose

    def _move_and_wait(self, pose: Pose) -> None:
        self.backend.move_to(pose, self.config.reset_dynamics_factor)
        self.commanded_pose = pose
        try:
            settled = self.backend.wait_until_settled(self.config.reset_timeout_s)
        except FrankaControlError as error:
            self._recover_or_raise(error)
            raise FrankaResetAborted(
                f"reset motion aborted: {error}. The arm recovered; call reset() again"
            ) from error
        if not settled:
            self.backend.stop()
            raise TimeoutError(
                f"reset: the arm did not reach {np.round(pose.position_m, 3)} within "
                f"reset_timeout_s={self.config.reset_timeout_s}; raise it or check the arm"
            )

    def _observation(self, snapshot: RobotSnapshot) -> dict[str, np.ndarray]:
        pose = snapshot.tcp_pose
        state = np.concatenate(
            [
                pose.position_m,
                self.box.relative_rpy(pose),
                snapshot.tcp_twist,
                [snapshot.gripper_width_m],
                snapshot.external_wrench,
            ]
        ).astype(np.float32)
        observation = {"state": state}
        for key, camera in self.cameras.items():
            observation[key] = self._camera_frame(key, camera)
        return observation

    def _camera_frame(self, key: str, camera: Camera) -> np.ndarray:
        frame = camera.read_rgb()
        expected = self.observation_space[key].shape
        if frame.shape != expected or frame.dtype != np.uint8:
            raise ValueError(
                f"{key} camera frame is {frame.dtype} {frame.shape}; expected uint8 {expected} "
                "(image_size)"
            )
        return frame

    def _info(
        self, observation: dict[str, np.ndarray], box_clipped: bool, overrun_s: float
    ) -> dict[str, Any]:
        return success_info(
            bool(self.success_fn(observation)) if self.success_fn else False,
            self.task_description,
            commanded_pose=self.commanded_pose.as_vector().astype(np.float32),
            box_clipped=box_clipped,
            period_overrun_s=overrun_s,
            control_error=None,
        )
