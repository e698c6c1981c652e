"""`OperatorConsole`: one key source feeding every consumer of the operator's keys.

The trigger (`b`), the outcome keys (`c`, `a`), the teleop toggle (`space`), the keyboard
teleop's movement keys and the reset key (`r`) each read a subscriber of one key source
(`wrappers.key_source`), so a single pynput listener serves them all; `wrappers.operator`
describes the keys.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import gymnasium as gym

from wrappers.key_source import KeyPressQueue, PynputKeySource
from wrappers.operator import OperatorKeys, OperatorOutcome
from wrappers.teleop import HumanTakeover, KeyboardTeleop, TeleopDevice
from wrappers.triggers import KeyboardTrigger

logger = logging.getLogger(__name__)


class OperatorConsole:
    """One key source feeding every consumer of the operator's keys.

    It starts the source when made (the real keyboard by default: a missing display fails
    here, before anything moves) and hands each consumer a subscriber of the keys it reads,
    so one pynput listener serves the trigger, the outcome keys, the teleop and the reset key.

    Example:
        >>> console = OperatorConsole(key_source=KeyPressQueue())  # the keyboard by default
        >>> trigger = console.trigger()  # b
        >>> env = console.outcome(gym.make("RPent/Franka-v0", backend="memory", period_s=0.0))
        >>> takeover = console.takeover(console.keyboard_teleop())  # space, arrows, ...
        >>> console.wait_for_reset(should_stop=lambda: True)  # between episodes: r
        False
        >>> console.close()
    """

    def __init__(
        self, keys: OperatorKeys | None = None, key_source: KeyPressQueue | None = None
    ) -> None:
        """Start the key source.

        Args:
            keys: The operator's keys; default `OperatorKeys()`.
            key_source: Where presses come from; default: the real keyboard via pynput.

        Raises:
            KeyboardUnavailableError: When the keyboard cannot be listened to here.
        """
        self.keys = keys or OperatorKeys()
        self.key_source = key_source if key_source is not None else PynputKeySource()
        self.key_source.start()
        self._reset_presses = self.key_source.subscribe([self.keys.reset])

    def legend(self) -> str:
        """One line naming every key's meaning (`OperatorKeys.legend`)."""
        return self.keys.legend()

    def trigger(self, debounce_s: float = 0.2) -> KeyboardTrigger:
        """A `KeyboardTrigger` on the actor key."""
        source = self.key_source.subscribe([self.keys.actor])
        return KeyboardTrigger(self.keys.actor, debounce_s, key_source=source)

    def outcome(self, env: gym.Env) -> OperatorOutcome:
        """`env` under `OperatorOutcome` on the success and failure keys."""
        source = self.key_source.subscribe([self.keys.success, self.keys.failure])
        return OperatorOutcome(env, key_source=source, keys=self.keys)

    def keyboard_teleop(self, action_dim: int = 7) -> KeyboardTeleop:
        """A `KeyboardTeleop` on the movement and gripper keys."""
        source = self.key_source.subscribe([*self.keys.movement_keys(), self.keys.gripper])
        return KeyboardTeleop(source, self.keys, action_dim)

    def takeover(self, device: TeleopDevice) -> HumanTakeover:
        """A `HumanTakeover` of `device`, toggled by the teleop key."""
        source = self.key_source.subscribe([self.keys.teleop])
        return HumanTakeover(device, source, toggle_key=self.keys.teleop)

    def wait_for_reset(
        self, poll_s: float = 0.05, should_stop: Callable[[], bool] | None = None
    ) -> bool:
        """Block until the operator presses the reset key (the scene is ready).

        Presses made before the call are dropped: the press must come after the episode
        ended. This wait is the operator's time, not the robot's.

        Args:
            poll_s: Seconds between looks at the key source.
            should_stop: Asked every poll; True ends the wait (e.g. a stop signal).

        Returns:
            True when the key was pressed, False when `should_stop` ended the wait.
        """
        self._reset_presses.pop_presses()
        logger.info("waiting for the operator: press %r once the scene is reset", self.keys.reset)
        while not self._reset_presses.pop_presses():
            if should_stop is not None and should_stop():
                return False
            time.sleep(poll_s)
        return True

    def close(self) -> None:
        """Stop the key source."""
        self.key_source.stop()
