"""Rollout statistics a Stage 2 run logs next to the learner's scalars.

`ChunkStats` gives the `train/replay/...` rates over the chunks stepped since its last report;
`EpisodeStats` gives `env/success_once` and `env/episode_len` (or `eval/...`) over the episodes
finished since its last report. Both read the RLT env's per-chunk info (`record_transition`,
`actor_switch`, `intervention_requested`, `intervene_flag`, `success`, `chunk_len`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from rpent_agents.stage2.replay import RLTTransition

_CHUNK_FLAGS = {
    "record_transition": "record_transition_rate",
    "actor_switch": "actor_switch_rate",
    "intervention_requested": "intervention_requested_rate",
    "intervene_flag": "intervention_rate",
}


def _flag(info: Mapping[str, Any], key: str) -> bool:
    return bool(np.any(info.get(key, False)))


class ChunkStats:
    """Counts chunk flags and stored transitions; `scalars()` reports and restarts.

    Example:
        >>> stats = ChunkStats()
        >>> stats.record({"record_transition": True, "actor_switch": False}, stored=None)
        >>> stats.scalars()["train/replay/record_transition_rate"]
        1.0
    """

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self.chunks = 0
        self.flag_counts = dict.fromkeys(_CHUNK_FLAGS, 0)
        self.transition_count = 0
        self.reward_sum = 0.0

    def record(self, info: Mapping[str, Any], stored: RLTTransition | None) -> None:
        """Count one stepped chunk and, when it was stored, its transition."""
        self.chunks += 1
        for key in _CHUNK_FLAGS:
            self.flag_counts[key] += _flag(info, key)
        if stored is not None:
            self.transition_count += 1
            self.reward_sum += float(np.sum(stored.rewards))

    def scalars(self) -> dict[str, float]:
        """`train/replay/...` scalars since the last call ({} without chunks)."""
        if self.chunks == 0:
            return {}
        scalars = {
            f"train/replay/{name}": self.flag_counts[key] / self.chunks
            for key, name in _CHUNK_FLAGS.items()
        }
        scalars["train/replay/transition_count"] = float(self.transition_count)
        if self.transition_count:
            scalars["train/replay/reward_mean"] = self.reward_sum / self.transition_count
        self._reset()
        return scalars


class EpisodeStats:
    """Per-env success-once and length of running episodes, averaged over finished ones.

    Example:
        >>> stats = EpisodeStats(num_envs=1)
        >>> stats.record(0, {"success": True, "chunk_len": 4}, done=True)
        >>> stats.scalars()
        {'env/success_once': 1.0, 'env/episode_len': 4.0}
    """

    def __init__(self, num_envs: int, prefix: str = "env") -> None:
        self.prefix = prefix
        self.success_once = np.zeros(num_envs, bool)
        self.length_steps = np.zeros(num_envs, int)
        self.finished: list[tuple[bool, int]] = []

    def record(self, env_index: int, info: Mapping[str, Any], done: bool) -> None:
        """Add one chunk of env `env_index`; `done` closes its episode."""
        self.success_once[env_index] |= _flag(info, "success")
        self.length_steps[env_index] += int(info.get("chunk_len", 1))
        if done:
            self.finished.append(
                (bool(self.success_once[env_index]), int(self.length_steps[env_index]))
            )
            self.success_once[env_index] = False
            self.length_steps[env_index] = 0

    def scalars(self) -> dict[str, float]:
        """Means over the episodes finished since the last call ({} when none)."""
        if not self.finished:
            return {}
        successes, lengths = zip(*self.finished, strict=True)
        self.finished = []
        return {
            f"{self.prefix}/success_once": float(np.mean(successes)),
            f"{self.prefix}/episode_len": float(np.mean(lengths)),
        }
