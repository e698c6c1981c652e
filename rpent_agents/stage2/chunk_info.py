"""One executed chunk as the RLT env's step info reports it, read once into a typed record.

The policy switch of `RPent/PegInsertion-RLT-v0` (or of an `RLTWorker`) reports per chunk:
`chunk_len` (n, the steps that ran), `executed_action` (n, A) and `chunk_rewards` (n,),
`record_transition` (a critical-phase chunk, stored), `actor_switch` (the actor drove it),
`intervene_flag` (a human or expert drove it), `intervention_requested`, `action_source`,
`invalid_state` (only when the chunk ended on a non-finite state), a training worker's
`critical_phase` (decided inside the reference `AutoGate`'s phase), and the peg task's
`success`, `is_grasped`, `peg_head_pos_at_hole`, `hole_radius` and `hole_entry_x`. A worker
pads `executed_action` and `chunk_rewards` to H rows for the vector API; the record keeps the
first `chunk_len` rows, so a padded info and an unpadded one read the same. Missing flags are
false. The transition builder, the rollout statistics and `rpent-eval-rlt`'s traces all read
chunks through `ChunkInfo.from_info`.

The writers name these keys in `wrappers.info_keys` (the chunk and switch keys) and
`rpent_agents.rollout.worker` (the worker's); this module spells out the ones it reads, since
Stage 2 imports neither (it runs where gymnasium is not installed). The keys written and not
read here are `KEYS_NOT_READ`, each with its reason; a test runs the writers and checks that
every key written is read or listed (`tests/rpent_agents/stage2/test_chunk_info_keys.py`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

INVALID_STATE_KEY = "invalid_state"
"""`rpent_envs.state_checks.INVALID_STATE_KEY` (Stage 2 imports nothing of `rpent_envs`)."""
KEYS_NOT_READ: dict[str, str] = {
    "step_infos": "every step's info, for the switch's gate and takeover and a worker's own "
    "gate; a worker drops it before its pipe",
    "rlt_switch_flags": "the switch's phase for the next chunk, for users and drop-in "
    "libraries; the chunk's own is record_transition",
    "rlt_policy_switch_event": "what the trigger reported, for users and logs",
    "next_action_source": "who drives the next chunk, for users",
    "lost_grasp_ended": "marks the chunks end_lost_grasps ended, for users and tests; "
    "terminated already ends the episode",
    "final_obs": "the ended episode's last observation, read by the vector env "
    "(rpent_agents.rollout.vector)",
    "operator_outcome": "the operator's verdict at the step (wrappers.operator.OperatorOutcome "
    "below the RLT wrapper), for users and logs; success and the reward carry it",
    **dict.fromkeys(
        ("worker_chunk_s", "worker_render_s", "worker_reset_s"),
        "a worker's seconds, read by the loop profile (rpent_agents.stage2.loop_profile)",
    ),
}
"""The keys the RLT stack writes per chunk that `ChunkInfo.from_info` knowingly leaves unread,
each with its reason (the peg env's own keys aside)."""


def _flag(info: Mapping[str, Any], key: str) -> bool:
    return bool(np.any(info.get(key, False)))


def _optional_float(info: Mapping[str, Any], key: str) -> float | None:
    return float(info[key]) if key in info else None


@dataclass(frozen=True)
class ChunkInfo:
    """One chunk's info, typed (see the module docstring for each key).

    Attributes:
        steps: Simulator steps the chunk ran (`chunk_len`; 1 when the info does not say).
        executed_action: The executed actions, (steps, ...) rows; None when not reported.
        rewards: The per-step rewards, (steps,); None when not reported.
        intervened_steps: (steps,) the steps a human or expert drove.
        record_transition: The chunk is a critical-phase transition to store.
        actor_switch: The actor drove the chunk.
        intervention_requested: A takeover (expert or human) was latched for it.
        invalid_state: The chunk ended on a non-finite state (the env's `invalid_state`).
        critical_phase: The chunk was decided inside the critical phase as the reference
            `AutoGate` defines it (a worker's `critical_phase`; else `record_transition`).
        success: The task was solved by the chunk's end.
        is_grasped: The gripper held the peg at the chunk's end.
        action_source: Who drove it ("vla", "actor", "expert", "human"); None when not
            reported.
        peg_head_pos_at_hole: The peg head in the hole frame at the chunk's end (m).
        hole_radius: The hole's radius (m).
        hole_entry_x: x of the box face in the hole frame (m).

    Example:
        >>> chunk = ChunkInfo.from_info({"chunk_len": 2, "chunk_rewards": [0.0, 1.0, 0.0],
        ...                              "record_transition": True})
        >>> chunk.steps, chunk.rewards.tolist(), chunk.actor_switch
        (2, [0.0, 1.0], False)
    """

    steps: int
    executed_action: np.ndarray | None
    rewards: np.ndarray | None
    intervened_steps: np.ndarray
    record_transition: bool
    actor_switch: bool
    intervention_requested: bool
    invalid_state: bool
    critical_phase: bool
    success: bool
    is_grasped: bool
    action_source: str | None
    peg_head_pos_at_hole: np.ndarray | None
    hole_radius: float | None
    hole_entry_x: float | None

    @classmethod
    def from_info(cls, info: Mapping[str, Any]) -> ChunkInfo:
        """Read one chunk's info (padded or not)."""
        executed, rewards = info.get("executed_action"), info.get("chunk_rewards")
        rewards = None if rewards is None else np.asarray(rewards, np.float32).reshape(-1)
        steps = int(info.get("chunk_len", 1 if rewards is None else len(rewards)))
        if executed is not None:
            executed = np.asarray(executed, np.float32)
            executed = executed[:steps] if executed.ndim > 1 else executed
        head = info.get("peg_head_pos_at_hole")
        source = info.get("action_source")
        return cls(
            steps=steps,
            executed_action=executed,
            rewards=None if rewards is None else rewards[:steps],
            intervened_steps=np.zeros(steps, bool) | np.asarray(info.get("intervene_flag", False)),
            record_transition=_flag(info, "record_transition"),
            actor_switch=_flag(info, "actor_switch"),
            intervention_requested=_flag(info, "intervention_requested"),
            invalid_state=INVALID_STATE_KEY in info,
            critical_phase=_flag(
                info, "critical_phase" if "critical_phase" in info else "record_transition"
            ),
            success=_flag(info, "success"),
            is_grasped=_flag(info, "is_grasped"),
            action_source=None if source is None else str(source),
            peg_head_pos_at_hole=None if head is None else np.asarray(head, np.float64),
            hole_radius=_optional_float(info, "hole_radius"),
            hole_entry_x=_optional_float(info, "hole_entry_x"),
        )

    @property
    def intervened(self) -> bool:
        """A human or expert drove at least one step."""
        return bool(self.intervened_steps.any())

    def executed_steps(self, max_steps: int, action_dim: int) -> tuple[np.ndarray, np.ndarray]:
        """The executed actions (n, A) and rewards (n,) of the n = `steps` steps that ran.

        Raises:
            KeyError: When the info reported no `executed_action` or `chunk_rewards`.
            ValueError: When `steps` is outside 1..`max_steps` or the rows do not hold it.
        """
        reported = {"executed_action": self.executed_action, "chunk_rewards": self.rewards}
        for key, value in reported.items():
            if value is None:
                raise KeyError(
                    f"RLT chunk info lacks '{key}'; step the env through the RLT observation "
                    "and policy-switch wrappers (RPent/PegInsertion-RLT-v0)"
                )
        executed = self.executed_action.reshape(-1, action_dim)
        if not 1 <= self.steps <= max_steps or min(len(executed), len(self.rewards)) < self.steps:
            raise ValueError(
                f"chunk info has chunk_len {self.steps}, executed_action {executed.shape} and "
                f"chunk_rewards {self.rewards.shape}; expected 1..{max_steps} steps of "
                f"{action_dim} actions"
            )
        return executed[: self.steps], self.rewards[: self.steps]
