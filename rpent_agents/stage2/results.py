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
import math
import os
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def wilson_interval(successes: int, trials: int, z: float = 1.959964) -> list[float]:
    """The Wilson score interval of a success rate, [low, high] (95% by default).

    Example:
        >>> [round(bound, 3) for bound in wilson_interval(192, 256)]
        [0.694, 0.799]
    """
    if trials <= 0:
        raise ValueError(f"wilson_interval needs at least one trial, got {trials}")
    rate, z_squared = successes / trials, z * z
    centre = rate + z_squared / (2 * trials)
    half_width = z * math.sqrt(rate * (1 - rate) / trials + z_squared / (4 * trials * trials))
    denominator = 1.0 + z_squared / trials
    return [
        max((centre - half_width) / denominator, 0.0),
        min((centre + half_width) / denominator, 1.0),
    ]


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
    actor_ready: bool = True
    """Whether the actor drove where the gate opens (False: its warm-up had not ended, so
    the reference drove and the point measures the base policy)."""


@dataclass
class TestEvaluation:
    """The base policy and the final actor on the fixed test seeds, nothing chosen on them.

    Attributes:
        seeds: The test seeds (one episode each, for the base and for the actor).
        base_success_rate: The base policy's success rate on them.
        base_success_ci95: Its Wilson 95% interval, [low, high].
        base_successful_seeds: The seeds the base policy solved.
        base_critical_phase_median_steps: Median critical-phase steps of its successes.
        success_rate: The actor's success rate on them (the run's final figure).
        success_ci95: Its Wilson 95% interval, [low, high].
        successful_seeds: The seeds the actor solved.
        critical_phase_median_steps: Median critical-phase steps of its successes.
        actor_ready: Whether the actor drove (False: not ready, the reference drove).
    """

    seeds: list[int]
    base_success_rate: float
    base_success_ci95: list[float]
    base_successful_seeds: list[int]
    base_critical_phase_median_steps: float | None
    success_rate: float
    success_ci95: list[float]
    successful_seeds: list[int]
    critical_phase_median_steps: float | None
    actor_ready: bool = True


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
        train_seed: Seed of the first training episode (episode k uses train_seed + k).
        intervention_env_steps: Training env steps an expert (or a human) drove.
        test: The final evaluation on the fixed test seeds (None: the run has none); the
            final figures (`final_success_rate`, `final_success_ci95`, the critical phase)
            are then its.
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
    train_seed: int | None = None
    intervention_env_steps: int = 0
    test: TestEvaluation | None = None

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
        """The actor's success on the test seeds, else at its latest evaluation (None: none)."""
        if self.test is not None:
            return self.test.success_rate
        return self.evals[-1].success_rate if self.evals else None

    @property
    def final_success_ci95(self) -> list[float] | None:
        """The Wilson 95% interval of `final_success_rate` (None before the first)."""
        if self.test is not None:
            return self.test.success_ci95
        if not self.evals:
            return None
        point = self.evals[-1]
        return wilson_interval(len(point.successful_seeds), len(self.eval_seeds))

    @property
    def base_success_ci95(self) -> list[float] | None:
        """The Wilson 95% interval of `base_success_rate` (the held-out seeds' base)."""
        if self.base_success_rate is None:
            return None
        return wilson_interval(len(self.base_successful_seeds), len(self.eval_seeds))

    @property
    def final_base_success_rate(self) -> float | None:
        """The base's success on the seeds of `final_success_rate` (the test seeds if any)."""
        return self.test.base_success_rate if self.test is not None else self.base_success_rate

    @property
    def final_seeds_note(self) -> str:
        """Where the final figures were measured, for a line a person reads."""
        if self.test is not None:
            return f", {len(self.test.seeds)} test seeds from {self.test.seeds[0]}"
        return f", {len(self.eval_seeds)} held-out seeds"

    @property
    def gain_points(self) -> float | None:
        """Final actor success minus the base's on the same seeds, in percentage points."""
        if self.final_base_success_rate is None or self.final_success_rate is None:
            return None
        return 100.0 * (self.final_success_rate - self.final_base_success_rate)

    @property
    def critical_phase_median_steps(self) -> float | None:
        """Median critical-phase steps of the final evaluation's successes (None: none)."""
        if self.test is not None:
            return self.test.critical_phase_median_steps
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
            "final_success_ci95": self.final_success_ci95,
            "base_success_ci95": self.base_success_ci95,
            "test_seeds": self.test.seeds if self.test is not None else None,
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
        if values.get("test") is not None:
            values["test"] = TestEvaluation(**values["test"])
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
        if self.test is not None:
            self._plot_test(axes)
        axes.set(
            xlabel="training env steps",
            ylabel=f"success rate ({len(self.eval_seeds)} validation seeds)",
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

    def _plot_test(self, axes: Any) -> None:
        """The final actor and the base on the test seeds, with their 95% intervals.

        The two stand a little apart on the steps axis, so equal rates do not hide each other.
        """
        test, offset = self.test, 0.015 * self.env_steps
        for rate, interval, steps, colour, label in (
            (test.success_rate, test.success_ci95, self.env_steps - offset, "tab:red",
             "actor, test seeds"),
            (test.base_success_rate, test.base_success_ci95, self.env_steps + offset, "black",
             "base, test seeds"),
        ):  # fmt: skip
            error = [[rate - interval[0]], [interval[1] - rate]]
            axes.errorbar([steps], [rate], yerr=error, fmt="s", color=colour, capsize=4,
                          label=f"{label} ({len(test.seeds)})")  # fmt: skip
