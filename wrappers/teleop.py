"""Teleoperation: a person's device takes over chunks from the policy switch.

A `TeleopDevice` gives the device's current command in the Franka env's action layout
(`rpent_envs.franka.env`): [:3] translation, [3:6] rotation vector (base frame), [-1] the
gripper (< 0 closes), each in [-1, 1], zero motion when untouched. `KeyboardTeleop` reads
held keys, `SpaceMouseTeleop` a 3Dconnexion SpaceMouse (the `spacemouse` extra).
`HumanTakeover` is the takeover `PolicySwitch` asks (as it asks `ExpertTakeover`): the
operator's toggle key engages it from the next chunk and disengages it again; while engaged
the device drives every step of every chunk, whatever the gate says, and its chunks are
interventions (`intervene_flag`), the BC targets of Stage 2.
"""

from __future__ import annotations

import importlib
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from wrappers.chunking import StepPolicy, state_step_policy
from wrappers.key_source import KeyPressQueue
from wrappers.operator import OperatorKeys

logger = logging.getLogger(__name__)

MOTION_AXES = 6
"""Translation x/y/z and rotation about x/y/z: the first entries of a device's action."""
SPACEMOUSE_AXES: tuple[str, ...] = ("-y", "x", "z", "-roll", "-pitch", "-yaw")
"""SpaceMouse state field (with its sign) of each motion axis: SERL's mapping of a SpaceMouse
whose cable points away from the robot's base (`SpaceMouseTeleop(axes=...)` changes it)."""


class TeleopUnavailableError(RuntimeError):
    """A teleoperation device cannot be used here (its package or the device is missing)."""


class TeleopDevice(Protocol):
    """What `HumanTakeover` asks of a device."""

    def action(self) -> np.ndarray:
        """The device's current command, (A,) float32 in [-1, 1]; zero motion when untouched."""
        ...

    def set_gripper(self, closed: bool) -> None:
        """Command this gripper state until the operator changes it."""
        ...

    def close(self) -> None:
        """Release the device."""
        ...


def _check_action_dim(action_dim: int) -> int:
    if action_dim < MOTION_AXES + 1:
        raise ValueError(
            f"action_dim={action_dim}: a teleop device commands {MOTION_AXES} motion axes and "
            f"a gripper, so the action needs at least {MOTION_AXES + 1} entries"
        )
    return action_dim


def _device_action(motion: np.ndarray, gripper_closed: bool, action_dim: int) -> np.ndarray:
    """(action_dim,) float32: `motion` in [:6] clipped to [-1, 1], the gripper in [-1]."""
    action = np.zeros(action_dim, np.float32)
    action[:MOTION_AXES] = np.clip(motion, -1.0, 1.0)
    action[-1] = -1.0 if gripper_closed else 1.0
    return action


class KeyboardTeleop:
    """Held movement keys drive the arm: +-1 on their axis while held.

    The keys are `OperatorKeys`' movement keys (arrows +-x/+-y, page up/down +-z, i/k, j/l,
    u/o rotations about x/y/z); opposite keys cancel. The gripper key toggles the gripper
    command (-1 closed / +1 open); it starts open.

    Example:
        >>> presses = KeyPressQueue()
        >>> teleop = KeyboardTeleop(presses)
        >>> presses.press("up")
        >>> presses.press("g")
        >>> teleop.action().tolist()
        [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0]
    """

    def __init__(
        self,
        key_source: KeyPressQueue,
        keys: OperatorKeys | None = None,
        action_dim: int = 7,
        gripper_closed: bool = False,
    ) -> None:
        """Read `key_source`.

        Args:
            key_source: Held keys and presses (give it a subscriber of the console's source:
                it pops the gripper key's presses).
            keys: The operator's keys; default `OperatorKeys()`.
            action_dim: Entries of the action: the motion axes, zeros, the gripper last.
            gripper_closed: The gripper command at the start.

        Raises:
            ValueError: For an `action_dim` below 7.
        """
        self.key_source = key_source
        self.keys = keys or OperatorKeys()
        self.action_dim = _check_action_dim(action_dim)
        self.gripper_closed = gripper_closed
        self._axes = self.keys.movement_keys()

    def action(self) -> np.ndarray:
        """The command of the keys held now, after the gripper key's presses since the last."""
        for press in self.key_source.pop_presses():
            if press.key == self.keys.gripper:
                self.gripper_closed = not self.gripper_closed
        motion = np.zeros(MOTION_AXES, np.float32)
        for key in self.key_source.held_keys() & self._axes.keys():
            axis, sign = self._axes[key]
            motion[axis] += sign
        return _device_action(motion, self.gripper_closed, self.action_dim)

    def set_gripper(self, closed: bool) -> None:
        """Command `closed` from now on; earlier presses of the gripper key are dropped."""
        self.key_source.pop_presses()
        self.gripper_closed = closed

    def close(self) -> None:
        """Nothing to release (the key source's owner stops it)."""


class SpaceMouseTeleop:
    """A 3Dconnexion SpaceMouse drives the arm (pyspacemouse: the `spacemouse` extra).

    A thread reads the device continuously (it reports far faster than a 10 Hz loop asks) and
    keeps its latest state. Each motion axis is one state field with a sign (`axes`); readings
    within `deadband` of zero count as zero, the rest is rescaled to start from zero at the
    deadband, multiplied by `scale` and clipped to [-1, 1]. Pressing `close_button` closes the
    gripper, `open_button` opens it; the command holds until the other is pressed (it starts
    open).

    Linux needs read access to the device's hidraw node (a udev rule giving the `plugdev`
    group access, as pyspacemouse's documentation shows) and the `libhidapi` library.
    """

    def __init__(
        self,
        action_dim: int = 7,
        *,
        scale: float = 1.0,
        deadband: float = 0.1,
        axes: Sequence[str] = SPACEMOUSE_AXES,
        close_button: int = 0,
        open_button: int = 1,
        gripper_closed: bool = False,
        read_period_s: float = 0.002,
    ) -> None:
        """Open the first SpaceMouse found and start reading it.

        Args:
            action_dim: Entries of the action: the motion axes, zeros, the gripper last.
            scale: Multiplies the deadbanded readings (before the clip to [-1, 1]).
            deadband: Readings of smaller magnitude count as zero, in [0, 1).
            axes: The state field of each motion axis, "-" first to flip it (fields: x, y,
                z, roll, pitch, yaw).
            close_button: Index of the button that closes the gripper.
            open_button: Index of the button that opens it.
            gripper_closed: The gripper command at the start.
            read_period_s: Pause between two reads of the device.

        Raises:
            TeleopUnavailableError: Without pyspacemouse or without a device.
            ValueError: For a bad `action_dim`, `deadband` or axis.
        """
        self.action_dim = _check_action_dim(action_dim)
        if not 0.0 <= deadband < 1.0:
            raise ValueError(f"deadband={deadband}: use a value in [0, 1)")
        self.scale, self.deadband = scale, deadband
        self.fields = [_axis_field(axis) for axis in axes]
        if len(self.fields) != MOTION_AXES:
            raise ValueError(f"axes={list(axes)}: give one field for each of {MOTION_AXES} axes")
        self.close_button, self.open_button = close_button, open_button
        self.gripper_closed = gripper_closed
        self.read_period_s = read_period_s
        self._device = _open_spacemouse()
        self._lock = threading.Lock()
        self._state: Any = None
        self._stop = threading.Event()
        self._reader = threading.Thread(target=self._read_loop, name="spacemouse", daemon=True)
        self._reader.start()

    def action(self) -> np.ndarray:
        """The command of the latest reading (zero motion before the first)."""
        with self._lock:
            state, gripper_closed = self._state, self.gripper_closed
        motion = np.zeros(MOTION_AXES, np.float32)
        if state is not None:
            for axis, (field, sign) in enumerate(self.fields):
                motion[axis] = sign * self._deadbanded(float(getattr(state, field)))
        return _device_action(motion * self.scale, gripper_closed, self.action_dim)

    def set_gripper(self, closed: bool) -> None:
        """Command `closed` until a gripper button is pressed."""
        with self._lock:
            self.gripper_closed = closed

    def close(self) -> None:
        """Stop reading and close the device."""
        if not self._stop.is_set():
            self._stop.set()
            self._reader.join(timeout=1.0)
            self._device.close()

    def _deadbanded(self, reading: float) -> float:
        magnitude = abs(reading) - self.deadband
        return 0.0 if magnitude <= 0 else float(np.sign(reading)) * magnitude / (1 - self.deadband)

    def _read_loop(self) -> None:
        while not self._stop.is_set():
            state = self._device.read()
            if state is not None:
                buttons = list(getattr(state, "buttons", ()))
                with self._lock:
                    self._state = state
                    if _pressed(buttons, self.close_button):
                        self.gripper_closed = True
                    elif _pressed(buttons, self.open_button):
                        self.gripper_closed = False
            time.sleep(self.read_period_s)


def _pressed(buttons: Sequence[int], index: int) -> bool:
    return index < len(buttons) and bool(buttons[index])


def _axis_field(axis: str) -> tuple[str, float]:
    field = axis.removeprefix("-")
    if field not in ("x", "y", "z", "roll", "pitch", "yaw"):
        raise ValueError(f"SpaceMouse axis {axis!r}: use x, y, z, roll, pitch or yaw, '-' first")
    return field, -1.0 if axis.startswith("-") else 1.0


def _open_spacemouse() -> Any:
    """The first SpaceMouse found, open (an object with `read()` and `close()`)."""
    try:
        module = importlib.import_module("pyspacemouse")
    except (ImportError, OSError) as error:  # OSError: libhidapi missing
        raise TeleopUnavailableError(
            f"SpaceMouseTeleop needs pyspacemouse and libhidapi ({error}): install the "
            "spacemouse extra (pip install 'rpent[spacemouse]') and libhidapi "
            "(apt install libhidapi-dev)"
        ) from error
    try:
        device = module.open()  # pyspacemouse 1.x returns None without a device, 2.x raises
    except RuntimeError as error:
        device, reason = None, f" ({error})"
    else:
        reason = ""
    if device is None:
        raise TeleopUnavailableError(
            f"no SpaceMouse found{reason}: plug it in and give your user read access to its "
            "hidraw node (a udev rule for the plugdev group, see pyspacemouse's README)"
        )
    return device


class HumanTakeover:
    """The operator's toggle key hands chunks to a teleop device, and takes them back.

    The takeover `PolicySwitch(human_takeover=...)` asks, as it asks `ExpertTakeover`: after
    each chunk `update` reads the toggle key's presses; each accepted press flips the
    takeover, effective from the next chunk (presses within `debounce_s` of the last accepted
    one are bounces). While engaged the device drives every step (`step_policy`: the device's
    command, read each step; it reads no images), whatever the gate and the actor's readiness
    say. A reset disengages it and drops earlier presses. When it engages, the switch hands
    over the last executed action (`hand_over`): the device keeps that gripper command, so
    taking over does not drop what the gripper holds.

    Example:
        >>> presses = KeyPressQueue()
        >>> takeover = HumanTakeover(KeyboardTeleop(presses.subscribe()), presses)
        >>> takeover.reset()
        >>> presses.press("space")
        >>> takeover.update([{}], critical_phase=False)
        True
    """

    def __init__(
        self,
        device: TeleopDevice,
        key_source: KeyPressQueue,
        toggle_key: str = "space",
        debounce_s: float = 0.2,
    ) -> None:
        """Configure the takeover; it starts disengaged.

        Args:
            device: The teleop device that drives while engaged.
            key_source: Presses of the toggle key (a subscriber of the console's source).
            toggle_key: The key that engages and disengages it.
            debounce_s: Presses closer than this to the last accepted press are ignored.
        """
        self.device = device
        self.key_source = key_source
        self.toggle_key = toggle_key
        self.debounce_s = debounce_s
        self.step_policy: StepPolicy = state_step_policy(device.action)
        self.active = False
        self._last_accepted_s = -np.inf

    def reset(self) -> None:
        """Disengage and drop earlier presses (a new episode)."""
        self.key_source.pop_presses()
        self.active = False

    def update(self, step_infos: Sequence[Mapping[str, Any]], critical_phase: bool) -> bool:
        """Apply the toggle presses since the last update; returns whether the human drives next.

        Args:
            step_infos: The infos of the chunk just executed (not needed).
            critical_phase: Whether the switch's critical phase is on (not needed: the
                operator's override holds everywhere).
        """
        for press in self.key_source.pop_presses():
            if (
                press.key != self.toggle_key
                or press.time_s - self._last_accepted_s < self.debounce_s
            ):
                continue
            self._last_accepted_s = press.time_s
            self.active = not self.active
            words = "takes over" if self.active else "hands back control"
            logger.info("key %r: the operator %s", self.toggle_key, words)
        return self.active

    def hand_over(self, last_action: np.ndarray | None) -> None:
        """The human takes the arm after `last_action` ran: keep its gripper command."""
        if last_action is not None and len(last_action):
            self.device.set_gripper(bool(np.asarray(last_action)[-1] < 0))

    def close(self) -> None:
        """Release the device."""
        self.device.close()
