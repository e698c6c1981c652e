"""Expert takeover on stalled progress: a scripted expert finishes what the actor got stuck on.

Training-only help for peg insertion (reference RLT "stalled_progress" mode, off by default):
once the actor is in control near the hole, each chunk's end is scored for progress; three
chunks in a row without progress latch the expert in control until success or the episode's
end. The expert's chunks are flagged as interventions, so a learner can use them as BC targets.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rpent_envs.maniskill.critical_phase import GraspStreak, HoleSignals, PegWindow
from wrappers.chunking import StepPolicy, state_step_policy

logger = logging.getLogger(__name__)


def as_step_policy(expert: Any) -> StepPolicy:
    """A closed-loop step policy from an object with `act()` or a callable obs -> action.

    An object with `act()` reads its own (simulator) state, so its chunks need no rendered
    images (`wrappers.chunking.state_step_policy`); a callable reads the observation.

    Raises:
        TypeError: When `expert` is neither.
    """
    if hasattr(expert, "act"):
        return state_step_policy(expert.act)
    if callable(expert):
        return expert
    raise TypeError(
        f"expert of type {type(expert).__name__} has no act() and is not callable; pass an "
        "object with act() -> action or a function observation -> action"
    )


@dataclass
class ProgressRecord:
    """Best progress seen since the current eligible stretch began (hole frame, m)."""

    head_x_m: float
    yz_distance_m: float
    score_m: float


class ExpertTakeover:
    """Latch a closed-loop expert in control after `stuck_chunks_before_takeover` stalled chunks.

    A chunk is eligible when the actor's critical phase is on, the task is not solved and the
    peg is inside the takeover's `window` (`rpent_envs.maniskill.critical_phase.PegWindow`; by
    default the reference's: grasped for at least 5 steps, the peg head at x >= -0.10 m and
    |y|, |z| <= 2 x radius). `ExpertTakeover.whole_critical_phase(expert)` makes every stalled
    chunk of the critical phase eligible (`PegWindow.anywhere()`: no bound, no grasp needed).
    The first eligible chunk records the best progress; every later one makes progress when its
    head x beats the best by `min_x_progress_m`, its yz distance sqrt(y^2 + z^2) by
    `min_yz_progress_m`, or its score x - `progress_yz_weight` x yz by `min_score_progress_m`.
    A chunk that is not eligible restarts the count. With `ungrasped_chunks_before_takeover`
    set, an eligible chunk that ends with the peg not held (grasped for fewer than the
    window's `min_grasp_steps` steps) is judged by that deadline instead of by progress (a peg
    lying on the table does not move while the gripper approaches it): that many ungrasped
    chunks in a row latch the expert (a missed grasp, a dropped peg). Once latched, the expert
    drives until success or the episode ends.

    Example:
        >>> from rpent_envs.maniskill.expert import PegInsertionExpert  # any object with act()
        >>> takeover = ExpertTakeover(PegInsertionExpert(env))
        >>> switch = PolicySwitch(env, AutoGate(), reference=vla, expert_takeover=takeover)
    """

    def __init__(
        self,
        expert: Any,
        *,
        window: PegWindow | None = None,
        stuck_chunks_before_takeover: int = 3,
        min_x_progress_m: float = 0.003,
        min_yz_progress_m: float = 0.0015,
        min_score_progress_m: float = 0.002,
        progress_yz_weight: float = 1.0,
        ungrasped_chunks_before_takeover: int | None = None,
        **window_keywords: Any,
    ) -> None:
        """Configure the takeover.

        Args:
            expert: Object with `act()` -> action (reads its own state, e.g. the scripted peg
                expert) or a step policy observation -> action.
            window: Where the peg must be, and held, for a chunk to be eligible; None:
                `PegWindow.takeover_reference()`.
            stuck_chunks_before_takeover: Consecutive stalled chunks that latch the expert.
            min_x_progress_m: Gain in head x over the best that counts as progress.
            min_yz_progress_m: Drop in yz distance below the best that counts as progress.
            min_score_progress_m: Gain in the combined score that counts as progress.
            progress_yz_weight: Weight of the yz distance in the score.
            ungrasped_chunks_before_takeover: Consecutive eligible chunks ending with the peg
                not held that latch the expert (None: held or not, progress decides).
            **window_keywords: Fields of `window` to change (`PegWindow.KEYWORDS`):
                `near_hole_x_min` (smallest peg-head x in the hole frame, m; None: no bound),
                `near_hole_yz_margin` (largest |y| and |z| of the peg head, in hole radii;
                None: no bound), `require_grasp` (eligible only while the peg is held) and
                `min_grasp_steps` (consecutive grasped steps that count as held).

        Raises:
            TypeError: For a keyword that is not one of `PegWindow.KEYWORDS`.
        """
        self.step_policy: StepPolicy = as_step_policy(expert)
        window = window or PegWindow.takeover_reference()
        self.window = window.with_keywords("ExpertTakeover", **window_keywords)
        self.stuck_chunks_before_takeover = max(1, stuck_chunks_before_takeover)
        self.min_x_progress_m = min_x_progress_m
        self.min_yz_progress_m = min_yz_progress_m
        self.min_score_progress_m = min_score_progress_m
        self.progress_yz_weight = progress_yz_weight
        self.ungrasped_chunks_before_takeover = ungrasped_chunks_before_takeover
        self.grasp_streak = GraspStreak()
        self.reset()

    @classmethod
    def whole_critical_phase(cls, expert: Any, **kwargs: Any) -> ExpertTakeover:
        """A takeover for every stall of the critical phase, wherever the peg is.

        The reference window (`PegWindow.takeover_reference()`: x >= -0.10 m in the hole
        frame, |y|, |z| <= 2 radii, grasped) misses most stalls of peg insertion: for boxes
        longer than 0.10 m the face of the box lies below -0.10 m, and a jammed or dropped peg
        drifts out of the y/z margin. A peg not held is judged by
        `ungrasped_chunks_before_takeover` (default 3 chunks): a dropped peg, or a missed grasp
        when the phase starts before the grasp.
        """
        defaults = {"window": PegWindow.anywhere(), "ungrasped_chunks_before_takeover": 3}
        return cls(expert, **(defaults | kwargs))

    def reset(self) -> None:
        """Release the expert and forget progress (a new episode)."""
        self.grasp_streak.reset()
        self.active = False
        self.stalled_chunks = 0
        self.ungrasped_chunks = 0
        self.best: ProgressRecord | None = None

    def update(self, step_infos: Sequence[Mapping[str, Any]], in_critical_phase: bool) -> bool:
        """Score the chunk just executed; returns whether the expert drives the next chunk.

        Args:
            step_infos: The info of every step of the chunk, in order.
            in_critical_phase: The switch gives control to the actor (after this chunk).
        """
        grasp_steps = self.grasp_streak.observe(step_infos, "ExpertTakeover")
        signals = HoleSignals.from_info(step_infos[-1], "ExpertTakeover")
        if self.active and in_critical_phase and not signals.success:
            return True
        self.active = False
        if not self._eligible(signals, grasp_steps, in_critical_phase):
            self.stalled_chunks, self.best, self.ungrasped_chunks = 0, None, 0
            return False
        deadline = self.ungrasped_chunks_before_takeover
        if deadline is not None and not self.window.held(grasp_steps):
            self.stalled_chunks, self.best = 0, None  # progress restarts at the next grasp
            self.ungrasped_chunks += 1
            self.active = self.ungrasped_chunks >= deadline
            if self.active:
                logger.info("peg not held for %d chunks: the expert takes over", deadline)
            return self.active
        self.ungrasped_chunks = 0
        progress = self._progress_of(signals)
        if self.best is None:
            self.best, self.stalled_chunks = progress, 0
        elif self._improves(progress):
            self.best = ProgressRecord(
                max(self.best.head_x_m, progress.head_x_m),
                min(self.best.yz_distance_m, progress.yz_distance_m),
                max(self.best.score_m, progress.score_m),
            )
            self.stalled_chunks = 0
        else:
            self.stalled_chunks += 1
            self.active = self.stalled_chunks >= self.stuck_chunks_before_takeover
            if self.active:
                logger.info("no progress for %d chunks: the expert takes over", self.stalled_chunks)
        return self.active

    def _eligible(self, signals: HoleSignals, grasp_steps: int, in_critical_phase: bool) -> bool:
        if not in_critical_phase or signals.success:
            return False
        return self.window.contains(signals, grasp_steps)

    def _progress_of(self, signals: HoleSignals) -> ProgressRecord:
        yz_distance_m = math.hypot(signals.head_abs_y_m, signals.head_abs_z_m)
        score_m = signals.head_x_m - self.progress_yz_weight * yz_distance_m
        return ProgressRecord(signals.head_x_m, yz_distance_m, score_m)

    def _improves(self, progress: ProgressRecord) -> bool:
        best = self.best
        return (
            progress.head_x_m > best.head_x_m + self.min_x_progress_m
            or progress.yz_distance_m < best.yz_distance_m - self.min_yz_progress_m
            or progress.score_m > best.score_m + self.min_score_progress_m
        )
