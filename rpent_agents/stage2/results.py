"""The learning result of a Stage 2 run: `results.json` and a success-rate plot.

A run evaluates the base policy (reference chunks only) once on held-out reset seeds, then the
actor on the same seeds at points of training. `LearningResults` holds those figures with the
env steps and wall time they took; `save` rewrites `results.json` atomically and `plot` draws
success rate against env steps (PNG), so a run stopped at any moment leaves both consistent.

Example:
    >>> results = LearningResults(eval_seeds=list(range(50)), base_success_rate=0.4)
    >>> results.add_eval(EvalPoint(env_steps=20000, success_rate=0.62, updates=9000,
    ...                            wall_time_s=310.0, successful_seeds=[0, 3]))
    >>> round(results.gain_points, 1)
    22.0
    >>> results.save(Path("runs/rlt/results.json")); results.plot(Path("runs/rlt/curve.png"))
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class EvalPoint:
    """One evaluation of the actor during training.

    Attributes:
        env_steps: Training simulator steps before the evaluation.
        success_rate: Fraction of the evaluation seeds that succeeded.
        updates: Learner updates before the evaluation.
        wall_time_s: Run wall time before the evaluation (all resumed parts together).
        successful_seeds: The evaluation seeds that succeeded.
        median_success_len: Median simulator steps of the successful episodes (None: none).
        critical_phase_median_steps: Median critical-phase steps of the successful episodes
            (`EvalResult.critical_phase_median_steps`; None: none).
    """

    env_steps: int
    success_rate: float
    updates: int
    wall_time_s: float
    successful_seeds: list[int]
    median_success_len: float | None = None
    critical_phase_median_steps: float | None = None


@dataclass
class LearningResults:
    """Base policy against the actor on the same seeds, and what the run spent.

    Attributes:
        eval_seeds: Held-out reset seeds of every evaluation.
        base_success_rate: Base policy success rate (None until measured).
        base_successful_seeds: The seeds the base policy solved.
        base_median_success_len: Median simulator steps of the base policy's successes.
        base_critical_phase_median_steps: Median critical-phase steps of the base policy's
            successes (the figure the actor's `critical_phase_median_steps` is compared to).
        evals: Evaluations of the actor, in training order.
        env_steps: Training simulator steps so far.
        eval_env_steps: Simulator steps spent in evaluations (base included).
        transitions: Replay transitions stored so far.
        updates: Learner updates so far.
        wall_time_s: Wall time so far (all resumed parts together).
        train_env_steps_per_s: Training env steps/s of each logging interval
            (`train/env_steps_per_s`; evaluations excluded).
        loop_profile: Where the training loop's time went (`LoopProfile.summary()`; of the
            latest command when the run was resumed).
        wall_time_parts_s: Where the wall time went, summed over resumed parts:
            "workers_start" (the workers and the feature model up), "base_evaluation",
            "evaluations" (the actor's), "checkpoints" and "training" (the rest).
        stop_reason: Why the run stopped ("" while it runs).
        args: The run's arguments.
    """

    eval_seeds: list[int]
    base_success_rate: float | None = None
    base_successful_seeds: list[int] = field(default_factory=list)
    base_median_success_len: float | None = None
    base_critical_phase_median_steps: float | None = None
    evals: list[EvalPoint] = field(default_factory=list)
    env_steps: int = 0
    eval_env_steps: int = 0
    transitions: int = 0
    updates: int = 0
    wall_time_s: float = 0.0
    train_env_steps_per_s: list[float] = field(default_factory=list)
    loop_profile: dict[str, Any] = field(default_factory=dict)
    wall_time_parts_s: dict[str, float] = field(default_factory=dict)
    stop_reason: str = ""
    args: dict[str, Any] = field(default_factory=dict)

    def add_wall_time(self, part: str, seconds: float) -> None:
        """Add `seconds` to one of `wall_time_parts_s` (not "training": the rest)."""
        self.wall_time_parts_s[part] = self.wall_time_parts_s.get(part, 0.0) + seconds

    def set_wall_time(self, wall_time_s: float) -> None:
        """Set the run's wall time; "training" becomes what the other parts leave of it."""
        self.wall_time_s = wall_time_s
        others = sum(s for part, s in self.wall_time_parts_s.items() if part != "training")
        self.wall_time_parts_s["training"] = max(wall_time_s - others, 0.0)

    def add_eval(self, point: EvalPoint) -> None:
        """Append an evaluation of the actor."""
        self.evals.append(point)

    @property
    def final_success_rate(self) -> float | None:
        """Success rate of the latest evaluation of the actor (None before the first)."""
        return self.evals[-1].success_rate if self.evals else None

    @property
    def gain_points(self) -> float | None:
        """Latest actor success minus base success, in percentage points."""
        if self.base_success_rate is None or self.final_success_rate is None:
            return None
        return 100.0 * (self.final_success_rate - self.base_success_rate)

    @property
    def critical_phase_median_steps(self) -> float | None:
        """Median critical-phase steps of the latest evaluation's successes (None: none)."""
        return self.evals[-1].critical_phase_median_steps if self.evals else None

    @property
    def train_env_steps_per_s_median(self) -> float | None:
        """Median training env steps/s over the logging intervals (None before the first)."""
        if not self.train_env_steps_per_s:
            return None
        return float(statistics.median(self.train_env_steps_per_s))

    def to_dict(self) -> dict[str, Any]:
        """The fields plus the derived figures (final success, gain, critical phase, speed)."""
        return dataclasses.asdict(self) | {
            "final_success_rate": self.final_success_rate,
            "gain_points": self.gain_points,
            "critical_phase_median_steps": self.critical_phase_median_steps,
            "train_env_steps_per_s_median": self.train_env_steps_per_s_median,
        }

    def save(self, path: Path) -> None:
        """Write `to_dict()` as JSON to `path` atomically (temp file + rename)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(path.name + ".tmp")
        temporary.write_text(json.dumps(self.to_dict(), indent=2, default=str) + "\n")
        os.replace(temporary, path)

    @classmethod
    def load(cls, path: Path) -> LearningResults:
        """Read a file written by `save`."""
        values = json.loads(Path(path).read_text())
        names = {item.name for item in dataclasses.fields(cls)}
        values = {key: value for key, value in values.items() if key in names}
        values["evals"] = [EvalPoint(**point) for point in values.get("evals", [])]
        return cls(**values)

    def plot(self, path: Path, title: str = "Stage 2 on RPent/PegInsertion-RLT-v0") -> None:
        """Draw success rate against training env steps (PNG at `path`)."""
        from matplotlib.figure import Figure  # plotting is optional for the rest of the module

        figure = Figure(figsize=(6.4, 4.0), dpi=120)
        axes = figure.add_subplot()
        if self.evals:
            steps = [point.env_steps for point in self.evals]
            rates = [point.success_rate for point in self.evals]
            axes.plot(steps, rates, marker="o", label="actor (mean chunk)")
        if self.base_success_rate is not None:
            axes.axhline(self.base_success_rate, linestyle="--", color="gray", label="base policy")
        axes.set(
            xlabel="training env steps",
            ylabel=f"success rate ({len(self.eval_seeds)} held-out seeds)",
            ylim=(-0.02, 1.02),
            title=title,
        )
        axes.grid(alpha=0.3)
        axes.legend(loc="lower right")
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(path.name + ".tmp.png")
        figure.savefig(temporary)
        os.replace(temporary, path)
