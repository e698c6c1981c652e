"""What every in-process RPent env does the same way: episode seeds, success info, spaces.

An unseeded `reset()` draws its episode seed from the env's `np_random`, so that every episode
can be replayed from `info["episode_seed"]`; every step's info starts with `success`, its copy
`is_success` (what SB3 logs as the success rate) and `task` (the instruction, DESIGN.md §2);
observations hold `image` and `wrist_image` (HxWx3 uint8, with cameras) and `state` (float32).
The RoboCasa and RoboTwin backends, loaded by path in another interpreter, cannot import this
module and follow the same rules in their own code.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

MAX_EPISODE_SEED = 2**31 - 1  # exclusive bound of a drawn seed: fits every simulator's int32


def episode_seed_of(seed: int | None, np_random: np.random.Generator) -> int:
    """The seed of the episode a `reset(seed=seed)` starts: `seed`, else one drawn.

    Example:
        >>> episode_seed_of(7, np.random.default_rng(0))
        7
    """
    return int(seed) if seed is not None else int(np_random.integers(MAX_EPISODE_SEED))


def success_info(success: bool, task: str, **extra: Any) -> dict[str, Any]:
    """A step's info: `success`, `is_success` (the same), `task`, then the env's own `extra`.

    Example:
        >>> success_info(True, "insert the peg", episode_seed=7)
        {'success': True, 'is_success': True, 'task': 'insert the peg', 'episode_seed': 7}
    """
    return {"success": success, "is_success": success, "task": task, **extra}


def observation_space(state_dim: int, image_size: int | None) -> gym.spaces.Dict:
    """The convention's observation space: both cameras (when `image_size` is given) and state.

    Args:
        state_dim: Entries of the float32 `state` vector.
        image_size: Height and width of `image` and `wrist_image` (uint8, 3 channels); None
            for state-only observations.

    Example:
        >>> sorted(observation_space(9, 64).spaces), observation_space(9, None)["state"].shape
        (['image', 'state', 'wrist_image'], (9,))
    """
    spaces = {"state": gym.spaces.Box(-np.inf, np.inf, (state_dim,), np.float32)}
    if image_size is not None:
        image_space = gym.spaces.Box(0, 255, (image_size, image_size, 3), np.uint8)
        spaces = {"image": image_space, "wrist_image": image_space, **spaces}
    return gym.spaces.Dict(spaces)
