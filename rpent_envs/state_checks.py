"""What an env does with a non-finite reading: end the episode instead of passing it on.

A simulator's contact blow-up or a sensor glitch can turn the `state` into NaN or inf; one such
value in a replay batch turns a learner's weights into NaN. The in-process envs check every
state they observe (`LastFiniteState`): a non-finite one ends the episode (`truncated=True`,
`info["invalid_state"]` names the entries, e.g. `"state[2]=nan"`), and the observation
returned holds the episode's last finite state instead. The chunk executor
(`wrappers.chunking.execute_chunk`) applies the same rule to any env below it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

INVALID_STATE_KEY = "invalid_state"
"""Info key of a step whose observation held NaN or inf: names the entries (str)."""
MAX_NAMED_ENTRIES = 4


def non_finite_entries(observation: Mapping[str, Any] | np.ndarray) -> str | None:
    """Names the NaN and inf entries of an observation's float arrays; None when there are none.

    Args:
        observation: A Dict observation (its non-float entries, such as uint8 images, are
            skipped) or one array.

    Returns:
        E.g. `"state[2]=nan, state[5]=inf"` (the first few entries, then how many in all).

    Example:
        >>> non_finite_entries({"state": np.array([0.0, np.nan], np.float32)})
        'state[1]=nan'
    """
    items = observation.items() if isinstance(observation, Mapping) else [("value", observation)]
    named: list[str] = []
    total = 0
    for key, value in items:
        array = np.asarray(value)
        if array.dtype.kind not in "fc":
            continue
        bad = np.argwhere(~np.isfinite(array))
        total += len(bad)
        for index in bad[: max(MAX_NAMED_ENTRIES - len(named), 0)]:
            position = ", ".join(str(int(axis)) for axis in index)
            named.append(f"{key}[{position}]={array[tuple(index)]}")
    if total == 0:
        return None
    more = f" ({total} non-finite entries in all)" if total > len(named) else ""
    return ", ".join(named) + more


class LastFiniteState:
    """The last finite `state` of an episode, standing in for a non-finite reading.

    Example:
        >>> states = LastFiniteState("my env")
        >>> states.start(np.zeros(2, np.float32))
        array([0., 0.], dtype=float32)
        >>> state, invalid = states.check(np.array([1.0, np.inf], np.float32))
        >>> state, invalid
        (array([0., 0.], dtype=float32), 'state[1]=inf')
    """

    def __init__(self, env_name: str) -> None:
        """Check the states of the env `env_name` (named in the log and the errors)."""
        self.env_name = env_name
        self.state: np.ndarray | None = None

    def start(self, state: np.ndarray) -> np.ndarray:
        """The first state of an episode, remembered.

        Raises:
            RuntimeError: When it holds NaN or inf (no finite state can stand in for it).
        """
        self.state = None
        checked, _ = self.check(state)
        return checked

    def check(self, state: np.ndarray) -> tuple[np.ndarray, str | None]:
        """`state` and None when it is finite; else the last finite state and what was wrong.

        The caller ends the episode when the second value is not None (`INVALID_STATE_KEY`).

        Raises:
            RuntimeError: When `state` holds NaN or inf and the episode had no finite state.
        """
        invalid = non_finite_entries({"state": state})
        if invalid is None:
            self.state = state
            return state, None
        if self.state is None:
            raise RuntimeError(
                f"{self.env_name}: reset gave a non-finite state ({invalid}); the simulator or "
                "the robot's sensors are broken: check them, then reset again"
            )
        logger.warning("%s: non-finite state (%s); the episode ends", self.env_name, invalid)
        return self.state.copy(), invalid
