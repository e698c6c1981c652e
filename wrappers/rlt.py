"""RLTObservation: featurize observations for RL-token agents and execute whole action chunks.

The wrapped env is a raw per-step env (DESIGN.md §2: `image`, `wrist_image`, `state`, the
instruction as `info["task"]` or `env.unwrapped.task_description`). Once per chunk a feature
model turns the raw observation into `z_rl` and a reference chunk; the agent answers with a
chunk of H actions that runs step by step.

The feature model is any object with `rlt_features(observations, instructions)` returning
`z_rl` (B, D) and `ref_chunk` (B, H_ref, A) numpy arrays, plus the attributes `z_dim`,
`chunk_len` (H_ref) and `action_dim` (`rpent_agents.features.RLTFeaturizer` or a remote client).
It runs its network under no_grad on its own device; this module imports neither torch nor
`rpent_agents`.
"""

from __future__ import annotations

from typing import Any, Protocol

import gymnasium as gym
import numpy as np

from rpent_envs.state_checks import non_finite_entries
from wrappers.chunking import StepPolicy, execute_chunk


class RLTFeatureSource(Protocol):
    """What RLTObservation needs from a feature model (see the module doc)."""

    z_dim: int
    chunk_len: int
    action_dim: int

    def rlt_features(self, observations: list[Any], instructions: list[str]) -> Any:
        """An object with `z_rl` (B, D) and `ref_chunk` (B, H_ref, A) numpy arrays."""
        ...


class RLTObservation(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Observation Dict(`z_rl`, `proprio`, `ref_chunk`); action = one chunk of H actions.

    `step(action)` takes the chunk flat (H*A,) in [-1, 1] and runs it with `step_chunk`.
    `step_chunk(chunk)` runs an (>= H, A) array in env action units, or a closed-loop step
    policy (raw observation -> one action), for at most H steps, stopping at termination or
    truncation; wrappers above (the policy switch) call it with the reference chunk, the actor's
    chunk or an expert. The reward is the sum over the executed steps.

    Observation: `z_rl` float32 (D,), `proprio` float32 (P,) = the raw `state`, `ref_chunk`
    float32 (H_ref, A) = the feature model's reference chunk clipped to the action bounds.
    `raw_observation` holds the latest raw observation (for step policies and recorders).

    Info of a step: the last executed step's info (e.g. `success`, `is_grasped`,
    `peg_head_pos_at_hole`, `hole_radius`, `task`) plus `chunk_rewards` (per-step rewards, for
    chunked TD), `chunk_len` (steps executed), `executed_action` ((chunk_len, A) as executed)
    and `step_infos` (the info of every executed step).

    It never emits NaN or inf: a raw observation holding one ends the chunk and the episode
    (`truncated`, `info["invalid_state"]` names the entries, the observation is featurized from
    the last finite one: `wrappers.chunking`), and a feature model returning one is refused
    with ValueError (as is a non-finite first observation at reset).

    Example:
        >>> env = gym.make("RPent/PegInsertionSideWideClearance-v1", image_size=64)
        >>> env = RLTObservation(env, load_featurizer(), chunk_len=10)
        >>> obs, info = env.reset(seed=0)
        >>> obs, reward, terminated, truncated, info = env.step_chunk(obs["ref_chunk"])
        >>> info["chunk_len"], len(info["chunk_rewards"])
        (10, 10)
    """

    def __init__(self, env: gym.Env, feature_model: RLTFeatureSource, chunk_len: int = 10):
        """Wrap a raw per-step env.

        Args:
            env: Raw env with a Dict observation holding `state`, and a [-1, 1] Box action.
            feature_model: Source of `z_rl` and the reference chunk (see the module doc).
            chunk_len: Actor chunk length H; at most the feature model's `chunk_len` (H_ref).

        Raises:
            ValueError: When the spaces do not fit the feature model or the chunk length.
        """
        gym.utils.RecordConstructorArgs.__init__(
            self, _disable_deepcopy=True, feature_model=feature_model, chunk_len=chunk_len
        )
        gym.Wrapper.__init__(self, env)
        self.feature_model = feature_model
        self.chunk_len = chunk_len
        self.step_action_space = _check_action_space(env.action_space, feature_model.action_dim)
        if not 1 <= chunk_len <= feature_model.chunk_len:
            raise ValueError(
                f"chunk_len={chunk_len} must be between 1 and the feature model's reference"
                f" chunk length {feature_model.chunk_len}"
            )
        state_space = getattr(env.observation_space, "spaces", {}).get("state")
        if state_space is None:
            raise ValueError(f"RLTObservation needs a Dict observation with 'state', got {env}")
        self.observation_space = rlt_observation_space(feature_model, state_space, env.action_space)
        flat_size = chunk_len * feature_model.action_dim
        self.action_space = gym.spaces.Box(-1.0, 1.0, (flat_size,), np.float32)
        self.raw_observation: Any = None
        self.instruction = ""

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Reset the env and featurize its first observation."""
        self.raw_observation, info = self.env.reset(seed=seed, options=options)
        task = info["task"] if "task" in info else self.env.unwrapped.task_description
        self.instruction = str(task)
        return self._featurize(self.raw_observation), info

    def step(self, action: np.ndarray) -> tuple[dict[str, np.ndarray], float, bool, bool, dict]:
        """Execute the flat chunk `action` (H*A,) in [-1, 1]; see `step_chunk`."""
        action = np.asarray(action, dtype=np.float32)
        if action.size != self.action_space.shape[0]:
            raise ValueError(
                f"action has shape {action.shape}; expected ({self.action_space.shape[0]},)"
            )
        return self.step_chunk(action.reshape(self.chunk_len, self.feature_model.action_dim))

    def step_chunk(
        self, chunk: np.ndarray | StepPolicy
    ) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        """Run up to H steps of `chunk` ((>= H, A) env-unit array, or a step policy).

        Returns:
            The featurized observation after the chunk, the summed reward, terminated,
            truncated, and the info described in the class doc.
        """
        result = execute_chunk(self.env, self.raw_observation, chunk, self.chunk_len)
        self.raw_observation = result.observation
        observation = self._featurize(result.observation)
        return observation, result.reward, result.terminated, result.truncated, result.chunk_info()

    def _featurize(self, raw_observation: Any) -> dict[str, np.ndarray]:
        batch = rlt_observations(
            self.feature_model, [raw_observation], [self.instruction], self.observation_space
        )
        return {key: value[0] for key, value in batch.items()}


def rlt_observations(
    feature_model: RLTFeatureSource,
    raw_observations: list[Any],
    instructions: list[str],
    space: gym.spaces.Dict,
) -> dict[str, np.ndarray]:
    """Batched RLT observations (`z_rl`, `proprio`, `ref_chunk`) of raw observations.

    One feature-model call for the whole batch; the reference chunks are clipped to
    `space["ref_chunk"]` (the action bounds).

    Args:
        feature_model: Source of `z_rl` and the reference chunk.
        raw_observations: Raw Dict observations (with `state` and what the model reads).
        instructions: The instruction of each observation.
        space: The single RLT observation space (`rlt_observation_space`).

    Returns:
        `z_rl` (B, D), `proprio` (B, P) and `ref_chunk` (B, H_ref, A), float32.

    Raises:
        ValueError: When one of them holds NaN or inf (the first index is the observation's).
    """
    features = feature_model.rlt_features(raw_observations, instructions)
    ref_space = space["ref_chunk"]
    batch = {
        "z_rl": np.asarray(features.z_rl, dtype=np.float32),
        "proprio": np.stack([np.asarray(obs["state"], np.float32) for obs in raw_observations]),
        "ref_chunk": np.clip(features.ref_chunk, ref_space.low, ref_space.high).astype(np.float32),
    }
    invalid = non_finite_entries(batch)
    if invalid is not None:
        raise ValueError(
            f"RLT observations would hold NaN or inf ({invalid}; the first index is the "
            "observation's): a raw state or the feature model's output is broken; check the "
            "env's state and the feature model (checkpoint, precision)"
        )
    return batch


def _check_action_space(space: gym.Space, action_dim: int) -> gym.spaces.Box:
    if not (
        isinstance(space, gym.spaces.Box)
        and space.shape == (action_dim,)
        and np.all(space.low == -1.0)
        and np.all(space.high == 1.0)
    ):
        raise ValueError(
            f"RLTObservation needs a Box(-1, 1, ({action_dim},)) action space matching the"
            f" feature model's action_dim; the env has {space}"
        )
    return space


def rlt_observation_space(
    feature_model: RLTFeatureSource, state_space: gym.spaces.Box, action_space: gym.spaces.Box
) -> gym.spaces.Dict:
    """The RLT observation space of `feature_model` over a raw env.

    Dict(`z_rl` (D,), `proprio` (the shape of `state_space`), `ref_chunk` (H_ref, A) within
    the bounds of the per-step `action_space`).
    """
    ref_shape = (feature_model.chunk_len, feature_model.action_dim)
    return gym.spaces.Dict(
        {
            "z_rl": gym.spaces.Box(-np.inf, np.inf, (feature_model.z_dim,), np.float32),
            "proprio": gym.spaces.Box(-np.inf, np.inf, state_space.shape, np.float32),
            "ref_chunk": gym.spaces.Box(
                np.broadcast_to(action_space.low, ref_shape).astype(np.float32),
                np.broadcast_to(action_space.high, ref_shape).astype(np.float32),
                dtype=np.float32,
            ),
        }
    )


def rlt_chunk_shape(env: gym.Env, horizon: int | None) -> tuple[int, int]:
    """(H, A) of an RLT wrapper, for a chunked wrapper above it.

    H comes from its flat (H*A,) action space and A from its `ref_chunk` (else `horizon`).

    Raises:
        ValueError: When `horizon` is given and does not fit, or A cannot be known.
    """
    flat_size = int(np.prod(env.action_space.shape))
    spaces = getattr(env.observation_space, "spaces", {})
    if "ref_chunk" in spaces:
        action_dim = int(spaces["ref_chunk"].shape[-1])
    elif horizon:
        action_dim = flat_size // horizon
    else:
        raise ValueError("the RLT wrapper below has no ref_chunk observation; pass horizon=H")
    inner_horizon = flat_size // action_dim
    if horizon not in (None, inner_horizon) or inner_horizon * action_dim != flat_size:
        raise ValueError(
            f"horizon={horizon} does not fit the RLT action space {env.action_space} with "
            f"action dim {action_dim}; leave horizon unset"
        )
    return inner_horizon, action_dim
