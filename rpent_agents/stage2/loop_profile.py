"""Where a Stage 2 training loop spends its time: the profile written into results.json.

One vector step of `rpent-stage2` is: the learner launches its updates, the loop waits for
the workers (the slowest, or the first `ready_envs` to answer), the learner's process
featurizes the observations that came back, the actor acts on them and the answered workers
get their next chunks, and then the answered chunks become transitions while those workers
simulate. On a GPU the learner's part is the launch of its updates only: the GPU
runs them while the process waits, and a later device read (featurizing) waits for what is
left of them, so their GPU time shows in the wait and the featurizing. `PartTimer` times the
parts of one step; `LoopProfile` adds up the seconds of each part over a run, and from the
workers' own timings (`worker_chunk_s`, `worker_render_s`, `worker_reset_s` in each env's
info) how long the average and the slowest worker were busy, and how much of the average
worker's chunk went into rendering its cameras: the ratio of mean to slowest busy time is the
share of the synchronous step a worker spends waiting for the others.

Example:
    >>> profile = LoopProfile()
    >>> profile.add_step({"act_s": 0.01, "learner_s": 0.05, "wait_s": 0.1},
    ...                  {"worker_chunk_s": np.array([0.1, 0.3]),
    ...                   "worker_reset_s": np.array([0.0, 0.2])})
    >>> round(profile.summary()["worker_busy_share"], 2)
    0.6
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

LOOP_PARTS = ("act_s", "learner_s", "wait_s", "featurize_s", "store_s")
"""The loop's parts, each timed in the learner's process per vector step."""


@dataclass
class LoopProfile:
    """Seconds of each loop part and of the workers, summed over vector steps.

    Attributes:
        vector_steps: Vector steps profiled.
        part_s: Seconds in each of `LOOP_PARTS`.
        worker_mean_busy_s: Sum over steps of the mean worker's chunk + reset seconds.
        worker_max_busy_s: Sum over steps of the slowest worker's chunk + reset seconds.
        worker_mean_reset_s: Sum over steps of the mean worker's reset seconds.
        worker_mean_render_s: Sum over steps of the mean worker's seconds rendering its
            cameras within its chunk (part of the busy seconds).
    """

    vector_steps: int = 0
    part_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys(LOOP_PARTS, 0.0))
    worker_mean_busy_s: float = 0.0
    worker_max_busy_s: float = 0.0
    worker_mean_reset_s: float = 0.0
    worker_mean_render_s: float = 0.0

    def add_step(self, part_s: Mapping[str, float], infos: Mapping[str, Any]) -> None:
        """Add one vector step's part timings and the workers' timings from its infos."""
        self.vector_steps += 1
        for name, seconds in part_s.items():
            self.part_s[name] += float(seconds)
        if "worker_chunk_s" not in infos:  # e.g. a vector env of other workers
            return
        chunk_s = np.asarray(infos["worker_chunk_s"], np.float64)
        reset_s = np.asarray(infos.get("worker_reset_s", np.zeros_like(chunk_s)), np.float64)
        render_s = np.asarray(infos.get("worker_render_s", np.zeros_like(chunk_s)), np.float64)
        # Asynchronous stepping: only the workers that answered report (the info's mask).
        answered = np.asarray(infos.get("_worker_chunk_s", np.ones(chunk_s.shape, bool)), bool)
        chunk_s, reset_s, render_s = chunk_s[answered], reset_s[answered], render_s[answered]
        busy_s = chunk_s + reset_s
        self.worker_mean_busy_s += float(busy_s.mean())
        self.worker_max_busy_s += float(busy_s.max())
        self.worker_mean_reset_s += float(reset_s.mean())
        self.worker_mean_render_s += float(render_s.mean())

    def summary(self) -> dict[str, float]:
        """Totals, per-step means (ms) and the workers' busy share (mean / slowest worker).

        The per-step worker figures are the mean answered worker's: busy (chunk + reset),
        reset and render (its chunk's rendering, inside the busy figure), and the slowest's
        busy.
        """
        summary: dict[str, float] = {"vector_steps": float(self.vector_steps)}
        steps = max(self.vector_steps, 1)
        for name, seconds in self.part_s.items():
            summary[name] = seconds
            summary[name.removesuffix("_s") + "_ms_per_step"] = 1000.0 * seconds / steps
        summary["worker_mean_busy_ms_per_step"] = 1000.0 * self.worker_mean_busy_s / steps
        summary["worker_max_busy_ms_per_step"] = 1000.0 * self.worker_max_busy_s / steps
        summary["worker_reset_ms_per_step"] = 1000.0 * self.worker_mean_reset_s / steps
        summary["worker_render_ms_per_step"] = 1000.0 * self.worker_mean_render_s / steps
        if self.worker_max_busy_s > 0:
            summary["worker_busy_share"] = self.worker_mean_busy_s / self.worker_max_busy_s
        return summary


class PartTimer:
    """Seconds between successive laps, by part name (one vector step of the loop)."""

    def __init__(self) -> None:
        """Start timing now."""
        self.part_s: dict[str, float] = {}
        self.lap_started_s = time.perf_counter()

    def lap(self, name: str, minus_s: dict[str, float] | None = None) -> None:
        """Add the time since the last lap to `name`, less the parts of `minus_s` (booked)."""
        now = time.perf_counter()
        elapsed_s = now - self.lap_started_s
        for part, seconds in (minus_s or {}).items():
            self.part_s[part] = self.part_s.get(part, 0.0) + seconds
            elapsed_s -= seconds
        self.part_s[name] = self.part_s.get(name, 0.0) + elapsed_s
        self.lap_started_s = now
