"""The peg task's critical-phase signals, read from its step infos: grasp and hole geometry.

The peg env reports `is_grasped`, `success`, `peg_head_pos_at_hole` (the peg head in the hole
frame: x along the hole axis, larger is deeper; y, z across it; m) and `hole_radius` in every
step's info. `GraspStreak` counts the grasped steps, `HoleSignals` reads where the head is,
`HoleWindow` is a region near the hole and `PegWindow` adds the grasp requirement: the value
`wrappers.AutoGate` opens the critical phase in, and the one `wrappers.ExpertTakeover` watches
for stalls, with the reference values as its named constructors. These read infos only (numpy,
no simulator), so any env that reports the same keys can be gated the same way, and the
wrappers that use them stay light: the task's geometry lives here, the wrappers take it as a
value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np


def require_info_keys(info: Mapping[str, Any], keys: Sequence[str], reader: str) -> None:
    """Refuse an info without `keys`; `reader` names the component in the message.

    Raises:
        KeyError: Naming the missing keys and the trigger for envs without them.
    """
    missing = [key for key in keys if key not in info]
    if missing:
        raise KeyError(
            f"{reader} needs info keys {missing} from the env; envs that do not report them "
            "(e.g. a real robot) switch with KeyboardTrigger instead"
        )


@dataclass(frozen=True)
class HoleSignals:
    """Peg-head position relative to the hole, read from one step's info.

    Attributes:
        head_x_m: Peg head along the hole axis (hole frame; larger is deeper).
        head_abs_y_m: |y| of the peg head in the hole frame.
        head_abs_z_m: |z| of the peg head in the hole frame.
        hole_radius_m: Radius of the hole.
        success: The task is solved.
    """

    head_x_m: float
    head_abs_y_m: float
    head_abs_z_m: float
    hole_radius_m: float
    success: bool

    @classmethod
    def from_info(cls, info: Mapping[str, Any], reader: str) -> HoleSignals:
        """Read the signals; `reader` names the component in the error for missing keys.

        Raises:
            KeyError: When the info lacks `peg_head_pos_at_hole`, `hole_radius` or `success`.
        """
        require_info_keys(info, ("peg_head_pos_at_hole", "hole_radius", "success"), reader)
        head_x, head_y, head_z = np.asarray(info["peg_head_pos_at_hole"], dtype=np.float64)
        return cls(
            float(head_x),
            abs(float(head_y)),
            abs(float(head_z)),
            float(info["hole_radius"]),
            bool(info["success"]),
        )


@dataclass(frozen=True)
class HoleWindow:
    """The peg head near the hole: x at or past `x_min_m`, |y| and |z| within `yz_margin` radii.

    A bound of None is no bound.

    Example:
        >>> signals = HoleSignals(-0.1, 0.0, 0.05, hole_radius_m=0.04, success=False)
        >>> HoleWindow(-0.16, 1.5).contains(signals), HoleWindow(-0.16, None).contains(signals)
        (True, True)
    """

    x_min_m: float | None
    yz_margin: float | None

    def contains(self, signals: HoleSignals) -> bool:
        """Whether the peg head of `signals` lies in the window."""
        if self.x_min_m is not None and signals.head_x_m < self.x_min_m:
            return False
        if self.yz_margin is None:
            return True
        yz_limit_m = self.yz_margin * signals.hole_radius_m
        return signals.head_abs_y_m <= yz_limit_m and signals.head_abs_z_m <= yz_limit_m


@dataclass(frozen=True)
class PegWindow:
    """Where the peg must be at a chunk's end: its head in a `HoleWindow`, held or not.

    Built once by a gate or a takeover; the named constructors hold the reference RLT values.

    Attributes:
        hole: The region of the peg head near the hole.
        require_grasp: The peg must also be held.
        min_grasp_steps: Consecutive grasped steps that count as held.

    Example:
        >>> window = PegWindow.gate_reference()
        >>> signals = HoleSignals(-0.1, 0.0, 0.05, hole_radius_m=0.04, success=False)
        >>> window.contains(signals, grasp_steps=5), window.contains(signals, grasp_steps=4)
        (True, False)
    """

    hole: HoleWindow
    require_grasp: bool = True
    min_grasp_steps: int = 5

    KEYWORDS: ClassVar[tuple[str, ...]] = (
        "near_hole_x_min",
        "near_hole_yz_margin",
        "require_grasp",
        "min_grasp_steps",
    )
    """The loose keywords of `AutoGate` and `ExpertTakeover` that change a window's fields."""

    @classmethod
    def gate_reference(cls) -> PegWindow:
        """The reference gate's: x >= -0.16 m, |y|, |z| <= 1.5 radii, held for 5 steps."""
        return cls(HoleWindow(-0.16, 1.5))

    @classmethod
    def takeover_reference(cls) -> PegWindow:
        """The reference takeover's: x >= -0.10 m, |y|, |z| <= 2 radii, held for 5 steps."""
        return cls(HoleWindow(-0.10, 2.0))

    @classmethod
    def anywhere(cls) -> PegWindow:
        """No bound and no grasp needed (held still means `min_grasp_steps` steps)."""
        return cls(HoleWindow(None, None), require_grasp=False)

    def with_keywords(self, reader: str, **keywords: Any) -> PegWindow:
        """This window with the fields named by the loose keywords (`KEYWORDS`) changed.

        `near_hole_x_min` is the hole window's `x_min_m`, `near_hole_yz_margin` its
        `yz_margin`; `reader` names the component in the error.

        Raises:
            TypeError: For a keyword that is not one of `KEYWORDS`.
        """
        unknown = sorted(set(keywords) - set(self.KEYWORDS))
        if unknown:
            raise TypeError(f"{reader} got unexpected keyword arguments {unknown}")
        hole = HoleWindow(
            keywords.get("near_hole_x_min", self.hole.x_min_m),
            keywords.get("near_hole_yz_margin", self.hole.yz_margin),
        )
        return PegWindow(
            hole,
            keywords.get("require_grasp", self.require_grasp),
            keywords.get("min_grasp_steps", self.min_grasp_steps),
        )

    def held(self, grasp_steps: int) -> bool:
        """Whether a grasp streak of `grasp_steps` steps counts as holding the peg."""
        return grasp_steps >= self.min_grasp_steps

    def contains(self, signals: HoleSignals, grasp_steps: int) -> bool:
        """Whether the peg head of `signals`, after a grasp streak of `grasp_steps`, is in."""
        if self.require_grasp and not self.held(grasp_steps):
            return False
        return self.hole.contains(signals)


class GraspStreak:
    """Counts the consecutive steps (up to now) in which `info["is_grasped"]` was true."""

    def __init__(self) -> None:
        """Start at zero."""
        self.steps = 0

    def reset(self) -> None:
        """Forget the streak (a new episode)."""
        self.steps = 0

    def observe(self, step_infos: Sequence[Mapping[str, Any]], reader: str) -> int:
        """Extend the streak with each step's grasp flag, in order; returns the streak."""
        for info in step_infos:
            require_info_keys(info, ("is_grasped",), reader)
            self.steps = self.steps + 1 if bool(info["is_grasped"]) else 0
        return self.steps
