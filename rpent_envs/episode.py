"""What every in-process RPent env reports the same way: an episode's seed and its success info.

An unseeded `reset()` draws its episode seed from the env's `np_random`, so that every episode
can be replayed from `info["episode_seed"]`; every step's info starts with `success`, its copy
`is_success` (what SB3 logs as the success rate) and `task` (the instruction, DESIGN.md §2).
The RoboCasa and RoboTwin backends, loaded by path in another interpreter, cannot import this
module and follow the same two rules in their own code.
"""

from __future__ import annotations

from typing import Any

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
