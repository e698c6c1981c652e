"""The control period a run held: the raw env's step-to-step period, measured as it runs.

`ControlPeriods.wrap` puts a `StepClock` right on the raw env (the robot command passes it as
the first of the RLT stack's `raw_wrappers`). The clock notes when each step starts; the time
since the previous step of the same episode is one control period: what the arm saw between
two commands, the work between chunks (featurizing, acting, talking to the learner) included.
A reset starts the count again, so the waits between episodes are not periods.

Example:
    >>> periods = ControlPeriods()
    >>> env = periods.wrap(gym.make("RPent/Franka-v0", backend="memory", period_s=0.05))
    >>> _ = env.reset(seed=0)
    >>> for _ in range(3):
    ...     _ = env.step(np.zeros(7, np.float32))
    >>> periods.nominal_period_s, len(periods.periods_s)
    (0.05, 2)
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import numpy as np

LATE_FACTOR = 1.1
"""A period over this many times the nominal one is late (issue 51's bound for the p99)."""


def nominal_period_of(env: gym.Env) -> float | None:
    """The control period an env keeps (`RPent/Franka-v0`'s `config.period_s`), else None.

    A simulator without a fixed period (the peg env) steps as fast as it can: None.
    """
    period_s = getattr(getattr(env.unwrapped, "config", None), "period_s", None)
    return float(period_s) if isinstance(period_s, int | float) and period_s > 0 else None


class ControlPeriods:
    """The step-to-step periods of a run's raw env, in seconds, and the period it should keep.

    Attributes:
        periods_s: One entry per step after an episode's first, in order.
        nominal_period_s: The env's own control period (None: the env keeps none).
    """

    def __init__(self) -> None:
        """Start with no periods (a clock adds them once `wrap` made it)."""
        self.periods_s: list[float] = []
        self.nominal_period_s: float | None = None

    def wrap(self, env: gym.Env) -> StepClock:
        """`env` under a clock adding its periods here."""
        self.nominal_period_s = nominal_period_of(env)
        return StepClock(env, self)

    def summary(self) -> dict[str, Any]:
        """The figures of results.json: the nominal and the measured periods.

        Returns:
            `control_period_s` (nominal), `control_period_p50_s`, `control_period_p95_s`,
            `control_period_p99_s`, `control_period_max_s` (None before two steps of one
            episode), `control_period_samples` and `control_period_late_steps` (periods over
            `LATE_FACTOR` x the nominal one; None without a nominal period).
        """
        p50_s = p95_s = p99_s = max_s = None
        if self.periods_s:
            p50_s, p95_s, p99_s, max_s = (
                float(value) for value in np.percentile(self.periods_s, [50, 95, 99, 100])
            )
        late_steps = None
        if self.nominal_period_s is not None:
            late_steps = sum(period_s > LATE_FACTOR * self.nominal_period_s
                             for period_s in self.periods_s)  # fmt: skip
        return {
            "control_period_s": self.nominal_period_s,
            "control_period_p50_s": p50_s,
            "control_period_p95_s": p95_s,
            "control_period_p99_s": p99_s,
            "control_period_max_s": max_s,
            "control_period_samples": len(self.periods_s),
            "control_period_late_steps": late_steps,
        }


class StepClock(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Adds the time between the starts of consecutive steps of an episode to `periods`."""

    def __init__(self, env: gym.Env, periods: ControlPeriods) -> None:
        """Time the steps of `env` into `periods`."""
        gym.utils.RecordConstructorArgs.__init__(self, _disable_deepcopy=True, periods=periods)
        gym.Wrapper.__init__(self, env)
        self.periods = periods
        self._last_start_s: float | None = None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset the env; the next step is an episode's first (no period before it)."""
        self._last_start_s = None
        return self.env.reset(seed=seed, options=options)

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        """Note the step's start, then step the env."""
        start_s = time.perf_counter()
        if self._last_start_s is not None:
            self.periods.periods_s.append(start_s - self._last_start_s)
        self._last_start_s = start_s
        return self.env.step(action)
