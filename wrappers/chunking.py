"""Executing an action chunk on a per-step env: the one loop every chunked wrapper shares.

A chunk is either an open-loop array of actions (H, A), or a closed-loop step policy that maps
the current raw observation to one action (a scripted expert, a human teleoperator). Both run
for at most `horizon` steps and stop at termination or truncation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

StepPolicy = Callable[[Any], np.ndarray]
"""Closed-loop source of actions: current raw observation -> one action."""


@dataclass
class ChunkResult:
    """What executing one chunk produced.

    Attributes:
        observation: The raw observation after the last executed step.
        rewards: Reward of each executed step, in order.
        terminated: Whether the last executed step terminated the episode.
        truncated: Whether the last executed step truncated the episode.
        info: The info of the last executed step.
        executed_actions: The actions actually executed, shape (len(rewards), A).
        pre_action_observations: The raw observation before each executed step.
    """

    observation: Any
    rewards: list[float] = field(default_factory=list)
    terminated: bool = False
    truncated: bool = False
    info: dict[str, Any] = field(default_factory=dict)
    executed_actions: np.ndarray | None = None
    pre_action_observations: list[Any] = field(default_factory=list)

    @property
    def done(self) -> bool:
        """The episode ended inside the chunk."""
        return self.terminated or self.truncated


def execute_chunk(
    env: gym.Env,
    observation: Any,
    chunk: np.ndarray | StepPolicy,
    horizon: int,
) -> ChunkResult:
    """Step `env` through one chunk, stopping early when the episode ends.

    Args:
        env: The per-step env (raw actions).
        observation: The current raw observation (what the chunk was decided from).
        chunk: Actions of shape (>= horizon, A), or a closed-loop step policy.
        horizon: Most steps to execute.

    Returns:
        The per-step rewards, executed actions and the final step's outputs.

    Raises:
        ValueError: When an array chunk has fewer than `horizon` rows or is not 2-D.
    """
    if not callable(chunk):
        chunk = np.asarray(chunk, dtype=np.float32)
        if chunk.ndim != 2 or chunk.shape[0] < horizon:
            raise ValueError(
                f"action chunk has shape {chunk.shape}; expected ({horizon}, action_dim)"
            )
    result = ChunkResult(observation=observation)
    executed = []
    for step_index in range(horizon):
        action = chunk(observation) if callable(chunk) else chunk[step_index]
        action = np.asarray(action, dtype=np.float32)
        result.pre_action_observations.append(observation)
        observation, reward, terminated, truncated, info = env.step(action)
        executed.append(action)
        result.rewards.append(float(reward))
        result.observation, result.terminated, result.truncated, result.info = (
            observation,
            bool(terminated),
            bool(truncated),
            info,
        )
        if terminated or truncated:
            break
    result.executed_actions = np.stack(executed)
    return result
