"""The human in the loop: the operator's keys, the outcome they give, and the console.

One interface for everything a person at a real arm does (RLinf's keyboard reward wrapper,
LeRobot's gym_manipulator): `b` hands the critical phase to the actor (`KeyboardTrigger`),
`c` and `a` end the episode as a success or a failure (`OperatorOutcome`, RLinf's three pedals
a/b/c), `space` toggles a teleoperation takeover (`wrappers.teleop.HumanTakeover`), the
movement keys drive the keyboard teleop (`wrappers.teleop.KeyboardTeleop`), and `r` says the
scene is reset for the next episode (`wrappers.console.OperatorConsole.wait_for_reset`).
`OperatorKeys` binds them; `OperatorConsole` feeds them all from one key source (one pynput
listener).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any, Literal

import gymnasium as gym

from wrappers.key_source import KeyPressQueue, PynputKeySource

logger = logging.getLogger(__name__)

Outcome = Literal["success", "failure"]
OPERATOR_OUTCOME_KEY = "operator_outcome"
"""None, "success" or "failure": the verdict the operator gave at this step (None: none)."""
MOVEMENT_AXES: dict[str, tuple[int, float]] = {
    "x_plus": (0, 1.0),
    "x_minus": (0, -1.0),
    "y_plus": (1, 1.0),
    "y_minus": (1, -1.0),
    "z_plus": (2, 1.0),
    "z_minus": (2, -1.0),
    "rx_plus": (3, 1.0),
    "rx_minus": (3, -1.0),
    "ry_plus": (4, 1.0),
    "ry_minus": (4, -1.0),
    "rz_plus": (5, 1.0),
    "rz_minus": (5, -1.0),
}
"""`OperatorKeys` movement field -> (action axis, sign) in the Franka env's action layout:
[:3] translation, [3:6] rotation vector (base frame)."""


@dataclass(frozen=True)
class OperatorKeys:
    """The operator's keys: a character, or a pynput key name ("space", "up", "page_up").

    The movement keys drive `KeyboardTeleop` while held, +-1 on their axis of the Franka env's
    action (translation x/y/z, rotation about x/y/z, base frame).

    Raises:
        ValueError: When a key is empty or bound to two fields (naming both fields).
    """

    actor: str = "b"
    """Hands the critical phase to the actor (`KeyboardTrigger`)."""
    success: str = "c"
    """Ends the episode as a success (reward 1)."""
    failure: str = "a"
    """Ends the episode as a failure (reward 0)."""
    reset: str = "r"
    """The scene is reset: the next episode may start."""
    teleop: str = "space"
    """Toggles the teleop takeover, from the next chunk."""
    x_plus: str = "up"
    """+x translation."""
    x_minus: str = "down"
    """-x translation."""
    y_plus: str = "left"
    """+y translation."""
    y_minus: str = "right"
    """-y translation."""
    z_plus: str = "page_up"
    """+z translation."""
    z_minus: str = "page_down"
    """-z translation."""
    rx_plus: str = "i"
    """+ rotation about x."""
    rx_minus: str = "k"
    """- rotation about x."""
    ry_plus: str = "j"
    """+ rotation about y."""
    ry_minus: str = "l"
    """- rotation about y."""
    rz_plus: str = "u"
    """+ rotation about z."""
    rz_minus: str = "o"
    """- rotation about z."""
    gripper: str = "g"
    """Toggles the teleop's gripper command (closed / open)."""

    def __post_init__(self) -> None:
        """Refuse an empty key and a key bound twice."""
        bound: dict[str, str] = {}
        for field in dataclasses.fields(self):
            key = getattr(self, field.name)
            if not isinstance(key, str) or not key:
                raise ValueError(f"OperatorKeys.{field.name}={key!r}: give a key name")
            if key in bound:
                raise ValueError(
                    f"OperatorKeys: key {key!r} is bound to both {bound[key]} and {field.name};"
                    " give each field its own key"
                )
            bound[key] = field.name

    def movement_keys(self) -> dict[str, tuple[int, float]]:
        """Each movement key -> (action axis, sign)."""
        return {getattr(self, name): axis for name, axis in MOVEMENT_AXES.items()}

    def legend(self) -> str:
        """One line naming every key's meaning, for the operator's screen."""
        pairs = " ".join(
            f"{getattr(self, plus)}/{getattr(self, minus)} {plus.removesuffix('_plus')}"
            for plus, minus in zip(list(MOVEMENT_AXES)[::2], list(MOVEMENT_AXES)[1::2], strict=True)
        )
        return (
            f"keys: {self.actor} actor | {self.success} success | {self.failure} failure | "
            f"{self.reset} reset done | {self.teleop} teleop on/off | teleop +/-: {pairs} | "
            f"{self.gripper} gripper"
        )


class OperatorOutcome(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """The operator's success and failure keys end the episode with their verdict.

    Wrap the per-step env (below `RecordTrajectory`, so the record's verdict is the
    operator's). A press of `keys.success` ends the episode at the step it lands on:
    `terminated=True`, reward 1.0, `info["success"] = info["is_success"] = True`; a press of
    `keys.failure` ends it the same way with reward 0.0 and success False. Every step's info
    has `operator_outcome` (None, "success" or "failure"). Without a press the env's own
    reward, termination and success pass through, so an env that judges success itself keeps
    doing so. Presses made before a reset (between episodes, while the arm resets) are
    dropped at the reset; of two outcome presses in one step, the first counts.

    Example:
        >>> presses = KeyPressQueue()
        >>> env = OperatorOutcome(gym.make("RPent/Franka-v0", backend="memory", period_s=0.0),
        ...                       key_source=presses)
        >>> obs, info = env.reset(seed=0)
        >>> presses.press("c")
        >>> obs, reward, terminated, truncated, info = env.step(env.action_space.sample() * 0)
        >>> reward, terminated, info["success"], info["operator_outcome"]
        (1.0, True, True, 'success')
    """

    def __init__(
        self,
        env: gym.Env,
        key_source: KeyPressQueue | None = None,
        keys: OperatorKeys | None = None,
    ) -> None:
        """Wrap `env`; nothing listens before the first `reset()`.

        Args:
            env: A per-step env.
            key_source: Where presses come from (a subscriber of the console's source);
                default: the real keyboard via pynput, started at the first reset.
            keys: The operator's keys (`success`, `failure` are read); default `OperatorKeys()`.
        """
        gym.utils.RecordConstructorArgs.__init__(
            self, _disable_deepcopy=True, key_source=key_source, keys=keys
        )
        gym.Wrapper.__init__(self, env)
        self.keys = keys or OperatorKeys()
        self.key_source = key_source if key_source is not None else PynputKeySource()
        self._outcome_of_key: dict[str, Outcome] = {
            self.keys.success: "success",
            self.keys.failure: "failure",
        }
        self._started = False

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset the env, then drop the presses made until now."""
        if not self._started:
            self.key_source.start()
            self._started = True
        observation, info = self.env.reset(seed=seed, options=options)
        self.key_source.pop_presses()
        return observation, {**info, OPERATOR_OUTCOME_KEY: None}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """Step the env; an outcome press made until the step's end decides the episode."""
        observation, reward, terminated, truncated, info = self.env.step(action)
        outcome = self._pressed_outcome()
        if outcome is not None:
            success = outcome == "success"
            info = {**info, "success": success, "is_success": success}
            reward, terminated = float(success), True
            logger.info("operator: %s", outcome)
        return observation, reward, terminated, truncated, {**info, OPERATOR_OUTCOME_KEY: outcome}

    def close(self) -> None:
        """Stop listening (a subscriber's stop does nothing) and close the env."""
        self.key_source.stop()
        self._started = False
        super().close()

    def _pressed_outcome(self) -> Outcome | None:
        for press in self.key_source.pop_presses():
            if press.key in self._outcome_of_key:
                return self._outcome_of_key[press.key]
        return None
