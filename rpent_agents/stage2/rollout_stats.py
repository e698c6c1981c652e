"""Rollout statistics a Stage 2 run logs next to the learner's scalars.

`ChunkStats` gives the `train/replay/...` rates over the chunks stepped since its last report;
`EpisodeStats` gives `env/success_once` and `env/episode_len` (or `eval/...`) over the episodes
finished since its last report; `RolloutDiagnostics` gives the `diag/...` scalars (Q of
successful against failed episodes, the actor's distance from the reference, where critical
chunks end). All read the RLT env's per-chunk info through `ChunkInfo` (`record_transition`,
`actor_switch`, `intervention_requested`, `intervene_flag`, `invalid_state`, `success`,
`chunk_len`, `critical_phase`, `peg_head_pos_at_hole`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from rpent_agents.stage2.chunk_info import ChunkInfo
from rpent_agents.stage2.replay import RLTTransition

# ChunkInfo flag -> the rate's scalar name
_CHUNK_FLAGS = {
    "record_transition": "record_transition_rate",
    "actor_switch": "actor_switch_rate",
    "intervention_requested": "intervention_requested_rate",
    "intervened": "intervention_rate",
    "invalid_state": "invalid_state_rate",  # the chunk ended on a non-finite state
}


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
        chunk = ChunkInfo.from_info(info)
        for key in _CHUNK_FLAGS:
            self.flag_counts[key] += getattr(chunk, key)
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


class FinishedEpisode(NamedTuple):
    """One finished episode: success at any step, simulator steps, critical-phase steps.

    `critical_steps` counts the steps of the chunks decided inside the critical phase (the
    worker's `critical_phase` info key, else `record_transition`).
    """

    success: bool
    length_steps: int
    critical_steps: int


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
        self.critical_steps = np.zeros(num_envs, int)
        self.finished: list[FinishedEpisode] = []

    def record(self, env_index: int, info: Mapping[str, Any], done: bool) -> None:
        """Add one chunk of env `env_index`; `done` closes its episode."""
        chunk = ChunkInfo.from_info(info)
        self.success_once[env_index] |= chunk.success
        self.length_steps[env_index] += chunk.steps
        if chunk.critical_phase:
            self.critical_steps[env_index] += chunk.steps
        if done:
            self.finished.append(
                FinishedEpisode(
                    bool(self.success_once[env_index]),
                    int(self.length_steps[env_index]),
                    int(self.critical_steps[env_index]),
                )
            )
            self.abandon(env_index)

    def abandon(self, env_index: int) -> None:
        """Forget the running episode of env `env_index` (it never finishes)."""
        self.success_once[env_index] = False
        self.length_steps[env_index] = 0
        self.critical_steps[env_index] = 0

    def scalars(self) -> dict[str, float]:
        """Means over the episodes finished since the last call ({} when none)."""
        if not self.finished:
            return {}
        successes = [episode.success for episode in self.finished]
        lengths = [episode.length_steps for episode in self.finished]
        self.finished = []
        return {
            f"{self.prefix}/success_once": float(np.mean(successes)),
            f"{self.prefix}/episode_len": float(np.mean(lengths)),
        }


class RolloutDiagnostics:
    """What the critic and the actor do on training episodes: `diag/...` scalars.

    - `diag/q_success_episodes`, `diag/q_failed_episodes`: mean Q (first head) of the stored
      transitions of finished episodes that succeeded, or failed: a critic that learns
      separates them.
    - `diag/actor_ref_rms`: RMS distance of the actor's chunks (where the actor drove) from the
      reference chunk the VLA gave for the same observation.
    - `diag/critical_head_past_face_m`, `diag/critical_head_yz_radii`: where critical-phase
      chunks end (peg head past the box face, max(|y|, |z|) in hole radii).

    Example:
        >>> diagnostics = RolloutDiagnostics(num_envs=1)
        >>> info = {"actor_switch": False, "record_transition": False, "success": True}
        >>> diagnostics.record(0, info, {}, np.zeros(80), q_value=0.5, done=True)
        >>> diagnostics.scalars()["diag/q_success_episodes"]
        0.5
    """

    def __init__(self, num_envs: int) -> None:
        self.episode_q: list[list[float]] = [[] for _ in range(num_envs)]
        self.episode_success = np.zeros(num_envs, bool)
        self._reset()

    def _reset(self) -> None:
        self.q_by_outcome: dict[bool, list[float]] = {True: [], False: []}
        self.actor_ref_sq: list[float] = []
        self.past_face_m: list[float] = []
        self.yz_radii: list[float] = []

    def abandon_episodes(self) -> None:
        """Forget the running episodes (the trainer restarts every env)."""
        for env_index in range(len(self.episode_q)):
            self.abandon_episode(env_index)

    def abandon_episode(self, env_index: int) -> None:
        """Forget the running episode of env `env_index` (it never finishes)."""
        self.episode_q[env_index] = []
        self.episode_success[env_index] = False

    def record(
        self,
        env_index: int,
        info: Mapping[str, Any],
        obs: Mapping[str, np.ndarray],
        action: np.ndarray,
        q_value: float | None,
        done: bool,
    ) -> None:
        """Add one chunk of env `env_index`.

        Args:
            env_index: The env.
            info: The chunk's info.
            obs: The RLT observation the chunk was decided from.
            action: The actor's chunk sent for it (flat).
            q_value: Q of its stored transition (None: not stored).
            done: The chunk ended the episode.
        """
        chunk = ChunkInfo.from_info(info)
        if chunk.actor_switch:
            ref = np.asarray(obs["ref_chunk"])
            actor_chunk = np.asarray(action).reshape(-1, ref.shape[-1])
            self.actor_ref_sq.append(float(np.mean((actor_chunk - ref[: len(actor_chunk)]) ** 2)))
        head = chunk.peg_head_pos_at_hole
        if chunk.record_transition and head is not None:
            self.past_face_m.append(float(head[0] - chunk.hole_entry_x))
            self.yz_radii.append(float(np.max(np.abs(head[1:]))) / chunk.hole_radius)
        if q_value is not None:
            self.episode_q[env_index].append(q_value)
        self.episode_success[env_index] |= chunk.success
        if done:
            success = bool(self.episode_success[env_index])
            if self.episode_q[env_index]:
                self.q_by_outcome[success].append(float(np.mean(self.episode_q[env_index])))
            self.episode_q[env_index] = []
            self.episode_success[env_index] = False

    def scalars(self) -> dict[str, float]:
        """The `diag/...` scalars since the last call (those with data)."""
        values = {
            "diag/q_success_episodes": self.q_by_outcome[True],
            "diag/q_failed_episodes": self.q_by_outcome[False],
            "diag/critical_head_past_face_m": self.past_face_m,
            "diag/critical_head_yz_radii": self.yz_radii,
        }
        scalars = {name: float(np.mean(data)) for name, data in values.items() if data}
        if self.actor_ref_sq:
            scalars["diag/actor_ref_rms"] = float(np.sqrt(np.mean(self.actor_ref_sq)))
        self._reset()
        return scalars
