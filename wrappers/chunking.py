"""Executing an action chunk on a per-step env: the one loop every chunked wrapper shares.

A chunk is either an open-loop array of actions (H, A), or a closed-loop step policy that maps
the current raw observation to one action (a scripted expert, a human teleoperator). Both run
for at most `horizon` steps and stop at termination or truncation.

Rendering on demand (`rpent_envs.image_demand`): an open-loop chunk reads no observation until
its end, so on an env with an `ImageDemand` its intermediate steps may skip rendering; the
chunk's final observation always has its images. A step policy reads every observation and
renders every step, unless it says otherwise (`reads_images = False`, as `state_step_policy`
policies do).

Non-finite observations (`rpent_envs.state_checks`): a step whose observation holds NaN or inf
ends the chunk and the episode (`truncated`, `info["invalid_state"]` naming the entries), and
the chunk's observation is the last finite one, so no wrapper above ever sees the broken one.
An env that checks itself (the in-process RPent envs) reports the same key with a finite
observation; a chunk ending that way is not rendered again.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from rpent_envs.image_demand import image_demand_of
from rpent_envs.state_checks import INVALID_STATE_KEY, non_finite_entries
from wrappers.info_keys import (
    CHUNK_LEN_KEY,
    CHUNK_REWARDS_KEY,
    EXECUTED_ACTION_KEY,
    STEP_INFOS_KEY,
)

logger = logging.getLogger(__name__)
StepPolicy = Callable[[Any], np.ndarray]
"""Closed-loop source of actions: current raw observation -> one action."""


def state_step_policy(act: Callable[[], Any]) -> StepPolicy:
    """A step policy from `act()` that reads simulator state itself, not the observation.

    Such a policy (e.g. a scripted expert on privileged state) needs no rendered images, so a
    chunk it drives may skip rendering like an open-loop chunk.
    """

    def policy(observation: Any) -> np.ndarray:
        return np.asarray(act(), dtype=np.float32)

    policy.reads_images = False
    return policy


def reads_images(chunk: np.ndarray | StepPolicy) -> bool:
    """Whether executing `chunk` reads the images of intermediate observations."""
    return callable(chunk) and getattr(chunk, "reads_images", True)


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
        step_infos: The info of every executed step, in order (per-step gate signals).
    """

    observation: Any
    rewards: list[float] = field(default_factory=list)
    terminated: bool = False
    truncated: bool = False
    info: dict[str, Any] = field(default_factory=dict)
    executed_actions: np.ndarray | None = None
    step_infos: list[Mapping[str, Any]] = field(default_factory=list)

    @property
    def done(self) -> bool:
        """The episode ended inside the chunk."""
        return self.terminated or self.truncated

    @property
    def reward(self) -> float:
        """Sum of the per-step rewards."""
        return float(sum(self.rewards))

    def chunk_info(self) -> dict[str, Any]:
        """The last step's info plus the chunk keys every chunked wrapper reports.

        `chunk_rewards` (per-step rewards, for chunked TD), `chunk_len` (steps executed),
        `executed_action` ((chunk_len, A) as executed) and `step_infos` (every step's info);
        `wrappers.info_keys` names them.
        """
        return {
            **self.info,
            CHUNK_REWARDS_KEY: np.asarray(self.rewards, dtype=np.float32),
            CHUNK_LEN_KEY: len(self.rewards),
            EXECUTED_ACTION_KEY: self.executed_actions,
            STEP_INFOS_KEY: self.step_infos,
        }

    @classmethod
    def from_chunk_info(
        cls, observation: Any, terminated: bool, truncated: bool, info: Mapping[str, Any]
    ) -> ChunkResult:
        """The result of a chunk that an executor below reported with `chunk_info()`.

        Args:
            observation: The observation the executor returned after the chunk.
            terminated: Whether the chunk ended the episode by termination.
            truncated: Whether the chunk ended the episode by truncation.
            info: The executor's info: a `chunk_info()`.

        Raises:
            KeyError: When `info` lacks the executed actions, the step infos or the rewards.
        """
        missing = {EXECUTED_ACTION_KEY, STEP_INFOS_KEY, CHUNK_REWARDS_KEY} - set(info)
        if missing:
            raise KeyError(
                f"the chunk executor below returned no {sorted(missing)} in its info; a chunked "
                "wrapper above it needs the executed actions and every step's info "
                "(ChunkResult.chunk_info)"
            )
        return cls(
            observation,
            rewards=[float(reward) for reward in info[CHUNK_REWARDS_KEY]],
            terminated=bool(terminated),
            truncated=bool(truncated),
            info=dict(info),
            executed_actions=np.asarray(info[EXECUTED_ACTION_KEY], dtype=np.float32),
            step_infos=info[STEP_INFOS_KEY],
        )


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
        The per-step rewards and infos, executed actions and the final step's outputs; the
        final observation has its images even where intermediate steps skipped rendering. A
        step observing NaN or inf ends the chunk truncated with `info["invalid_state"]`, the
        observation before it standing as the final one (see the module doc).

    Raises:
        ValueError: When an array chunk has fewer than `horizon` rows or is not 2-D.
    """
    if not callable(chunk):
        chunk = np.asarray(chunk, dtype=np.float32)
        if chunk.ndim != 2 or chunk.shape[0] < horizon:
            raise ValueError(
                f"action chunk has shape {chunk.shape}; expected ({horizon}, action_dim)"
            )
    demand = None if reads_images(chunk) else image_demand_of(env)
    result = ChunkResult(observation=observation)
    executed = []
    for step_index in range(horizon):
        action = chunk(observation) if callable(chunk) else chunk[step_index]
        action = np.asarray(action, dtype=np.float32)
        last_step = step_index == horizon - 1
        skippable = demand.optional() if demand and not last_step else contextlib.nullcontext()
        with skippable:
            next_observation, reward, terminated, truncated, info = env.step(action)
        invalid = non_finite_entries(next_observation)
        if invalid is None:
            observation = next_observation
        else:
            logger.warning("%s observed NaN or inf (%s); the episode ends", env, invalid)
            info, truncated = {**info, INVALID_STATE_KEY: invalid}, True
        executed.append(action)
        result.rewards.append(float(reward))
        result.step_infos.append(info)
        if terminated or truncated:
            break
    rerender = demand is not None and INVALID_STATE_KEY not in info
    if rerender and info.get("images_rendered") is False:  # ended on a skipped step
        observation = demand.observe_now()
    result.observation, result.info = observation, info
    result.terminated, result.truncated = bool(terminated), bool(truncated)
    result.executed_actions = np.stack(executed)
    return result
