"""Switch triggers: who decides that the learning actor takes over from the VLA reference.

A trigger is asked once per action chunk, after the chunk ran, whether the actor drives the next
chunk. `KeyboardTrigger` listens for an operator's key press (real robot or simulation);
`AutoGate` opens on the peg-insertion critical phase computed from the env's info signals
(`is_grasped`, `success`, `peg_head_pos_at_hole`, `hole_radius`), never from simulator
internals, so any env that reports those signals can use it; the peg task reads them and
holds the geometry of its window, which the gate takes as a value
(`rpent_envs.maniskill.critical_phase.PegWindow`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np

from rpent_envs.maniskill.critical_phase import (
    GraspStreak,
    HoleSignals,
    PegWindow,
    require_info_keys,
)
from wrappers.key_source import KeyPressQueue, PynputKeySource

logger = logging.getLogger(__name__)

SwitchEvent = Literal["enter_actor", "actor_already_active"]
TriggerMode = Literal["auto", "always_on"]


@dataclass(frozen=True)
class SwitchUpdate:
    """A trigger's answer for the next chunk.

    Attributes:
        active: The actor is in control (critical phase) from now on.
        event: "enter_actor" when control passed to the actor in this update,
            "actor_already_active" when an operator asked for it again, else None.
    """

    active: bool
    event: SwitchEvent | None = None


class SwitchTrigger(Protocol):
    """What `PolicySwitch` asks: one update per executed chunk, a reset per episode."""

    def reset(self) -> SwitchUpdate:
        """Start an episode; returns whether the actor drives the first chunk."""
        ...

    def update(self, step_infos: Sequence[Mapping[str, Any]]) -> SwitchUpdate:
        """Decide for the next chunk from the infos of every step of the chunk just executed."""
        ...

    def close(self) -> None:
        """Release listeners or other resources."""
        ...


class KeyboardTrigger:
    """An operator's key press (`b`) hands control to the actor until the episode ends.

    The first accepted press latches actor control (event "enter_actor"); later presses report
    "actor_already_active". A press within `debounce_s` of the previous accepted press is a
    bounce and ignored. Presses made before a reset are dropped at the reset.

    Example:
        >>> presses = KeyPressQueue()
        >>> trigger = KeyboardTrigger(key_source=presses)
        >>> trigger.reset().active
        False
        >>> presses.press("b")
        >>> trigger.update([])
        SwitchUpdate(active=True, event='enter_actor')
    """

    def __init__(
        self,
        key: str = "b",
        debounce_s: float = 0.2,
        key_source: KeyPressQueue | None = None,
    ) -> None:
        """Configure the trigger; nothing listens before the first `reset()`.

        Args:
            key: The key that switches to the actor.
            debounce_s: Presses closer than this to the last accepted press are ignored.
            key_source: Where presses come from; default: the real keyboard via pynput.
        """
        self.key = key
        self.debounce_s = debounce_s
        self.key_source = key_source if key_source is not None else PynputKeySource()
        self.active = False
        self._started = False
        self._last_accepted_s = -np.inf

    def reset(self) -> SwitchUpdate:
        """Start listening (first call), drop pending presses, give control to the reference."""
        if not self._started:
            self.key_source.start()
            self._started = True
        self.key_source.pop_presses()
        self.active = False
        return SwitchUpdate(active=False)

    def update(self, step_infos: Sequence[Mapping[str, Any]]) -> SwitchUpdate:
        """Apply the presses since the last update (the infos are not needed)."""
        entered = repeated = False
        for press in self.key_source.pop_presses():
            if press.key != self.key or press.time_s - self._last_accepted_s < self.debounce_s:
                continue
            self._last_accepted_s = press.time_s
            if self.active:
                repeated = True
            else:
                self.active = entered = True
                logger.info("key %r pressed: the actor takes control", self.key)
        event: SwitchEvent | None = (
            "enter_actor" if entered else "actor_already_active" if repeated else None
        )
        return SwitchUpdate(active=self.active, event=event)

    def close(self) -> None:
        """Stop listening."""
        self.key_source.stop()
        self._started = False


class AutoGate:
    """Automatic critical-phase gate of peg insertion (reference RLT defaults).

    Opens when, at the end of a chunk, the peg is inside its `window`
    (`rpent_envs.maniskill.critical_phase.PegWindow`; by default the reference's: grasped for
    at least 5 consecutive steps, the peg head at x (hole frame) >= -0.16 m and |y|, |z| <=
    1.5 x hole radius) and the task is not yet solved. With `latch_until_done` it stays open
    until the episode ends; otherwise it follows the conditions chunk by chunk.
    `trigger_mode="always_on"` gives the actor every chunk from the start of the episode.

    A second entry, off by default: with `missed_grasp_chunks` set, the gate also opens when
    that many chunks in a row have ended without the peg held (a missed or lost grasp), so the
    actor can redo the grasp where the reference failed it, while the reference keeps every
    approach that works (on the embedded default, 4 chunks open it in 24 of the 35 failed
    episodes of held-out seeds 0..99 and in 6 of the 65 successful ones).

    Example:
        >>> gate = AutoGate()
        >>> gate.reset().active
        False
        >>> info = dict(is_grasped=True, success=False, hole_radius=0.04,
        ...             peg_head_pos_at_hole=[-0.1, 0.0, 0.0])
        >>> gate.update([info] * 5)
        SwitchUpdate(active=True, event='enter_actor')
    """

    def __init__(
        self,
        *,
        window: PegWindow | None = None,
        require_not_success: bool = True,
        latch_until_done: bool = True,
        trigger_mode: TriggerMode = "auto",
        missed_grasp_chunks: int | None = None,
        **window_keywords: Any,
    ) -> None:
        """Configure the gate.

        Args:
            window: Where the peg must be, and held, at a chunk's end for the gate to open;
                None: `PegWindow.gate_reference()`.
            require_not_success: Never open once the task is solved.
            latch_until_done: Stay open until the episode ends once opened.
            trigger_mode: "auto" (the conditions above) or "always_on".
            missed_grasp_chunks: Also open after this many chunks in a row ending without
                the peg held (for the window's `min_grasp_steps`), the task not solved; None:
                never.
            **window_keywords: Fields of `window` to change (`PegWindow.KEYWORDS`):
                `near_hole_x_min` (smallest peg-head x in the hole frame, m),
                `near_hole_yz_margin` (largest |y| and |z| of the peg head, in hole radii),
                `require_grasp` (open only while the peg is held) and `min_grasp_steps`
                (consecutive grasped steps that count as held).

        Raises:
            ValueError: For an unknown `trigger_mode` or `missed_grasp_chunks` below 1.
            TypeError: For a keyword that is not one of `PegWindow.KEYWORDS`.
        """
        if trigger_mode not in ("auto", "always_on"):
            raise ValueError(f"trigger_mode={trigger_mode!r}: use 'auto' or 'always_on'")
        if missed_grasp_chunks is not None and missed_grasp_chunks < 1:
            raise ValueError(
                f"missed_grasp_chunks={missed_grasp_chunks}: use None (off) or at least 1 chunk"
            )
        window = window or PegWindow.gate_reference()
        self.window = window.with_keywords("AutoGate", **window_keywords)
        self.require_not_success = require_not_success
        self.latch_until_done = latch_until_done
        self.trigger_mode = trigger_mode
        self.missed_grasp_chunks = missed_grasp_chunks
        self.grasp_streak = GraspStreak()
        self.ungrasped_chunks = 0
        self.active = False

    def reset(self) -> SwitchUpdate:
        """Close the gate (open it for "always_on") and forget the grasp streak."""
        self.grasp_streak.reset()
        self.ungrasped_chunks = 0
        self.active = self.trigger_mode == "always_on"
        return SwitchUpdate(self.active, "enter_actor" if self.active else None)

    def update(self, step_infos: Sequence[Mapping[str, Any]]) -> SwitchUpdate:
        """Count the chunk's grasped steps, then test the conditions on its last step."""
        grasp_steps = self.grasp_streak.observe(step_infos, "AutoGate")
        if self.trigger_mode == "always_on":
            return SwitchUpdate(True)
        self.ungrasped_chunks = 0 if self.window.held(grasp_steps) else self.ungrasped_chunks + 1
        enter = self.conditions_hold(step_infos[-1], grasp_steps) or self.grasp_missed(
            step_infos[-1]
        )
        was_active = self.active
        self.active = (was_active or enter) if self.latch_until_done else enter
        entered = self.active and not was_active
        if entered:
            logger.info("critical phase reached: the actor takes control")
        return SwitchUpdate(self.active, "enter_actor" if entered else None)

    def conditions_hold(self, info: Mapping[str, Any], grasp_steps: int) -> bool:
        """The entry conditions for one step's info and the grasp streak up to that step."""
        signals = HoleSignals.from_info(info, "AutoGate")
        if self.require_not_success and signals.success:
            return False
        return self.window.contains(signals, grasp_steps)

    def grasp_missed(self, info: Mapping[str, Any]) -> bool:
        """The missed-grasp entry: `missed_grasp_chunks` ungrasped chunks, not yet solved."""
        if self.missed_grasp_chunks is None or self.ungrasped_chunks < self.missed_grasp_chunks:
            return False
        require_info_keys(info, ("success",), "AutoGate")
        return not bool(info["success"])

    def close(self) -> None:
        """Nothing to release."""
