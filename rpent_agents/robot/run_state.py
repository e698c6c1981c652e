"""The counters of a robot run, saved with its learner as one set and continued by `--resume`.

The control loop owns a `RobotRunState` and fills it as the arm runs; at each episode's end it
sends it to the learner (`LearnerLink.end_episode`), which saves it with the networks, the
replay buffer and the optimizers (`LearnerService.end_episode`). A resumed run starts from the
counters of its last complete save: the episode a kill interrupted is not in them, as its
transitions are not in the saved replay buffer.

Example:
    >>> state = RobotRunState()
    >>> state.next_seed(first_seed=100), state.next_seed(first_seed=100)
    (100, 101)
    >>> RobotRunState.from_dict(state.to_dict()) == state
    True
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass
class RobotRunState:
    """What a robot run has done so far, over all its resumed parts (plain values)."""

    env_steps: int = 0
    """Env steps the arm executed, whoever drove (the operator's reset waits are not steps)."""
    episodes: int = 0
    """Episodes finished."""
    successes: int = 0
    """Finished episodes that succeeded (the operator's success key, or the env's verdict)."""
    failures: int = 0
    """Finished episodes that did not succeed."""
    intervention_env_steps: int = 0
    """Env steps a human (teleoperation) or a scripted expert drove."""
    actor_env_steps: int = 0
    """Env steps the Stage 2 actor drove."""
    seeds_handed_out: int = 0
    """Episode seeds used so far: the next episode's seed is the run's first seed plus this."""
    robot_time_s: float = 0.0
    """Seconds the arm spent in episodes (the reset waits left out)."""
    wall_time_s: float = 0.0
    """Seconds of the whole run, its resumed parts and the reset waits included."""

    def next_seed(self, first_seed: int) -> int:
        """The seed of the next episode (first_seed, first_seed + 1, ...), counted as used."""
        seed = first_seed + self.seeds_handed_out
        self.seeds_handed_out += 1
        return seed

    def to_dict(self) -> dict[str, Any]:
        """The counters as a dict of plain values (what a save stores)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> RobotRunState:
        """The counters a save stored (`to_dict`).

        Raises:
            ValueError: When `values` holds names this version does not know.
        """
        known = {field.name for field in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(
                f"saved robot run counters {unknown} are unknown to this RPent; resume the run "
                "with the RPent version that saved it"
            )
        return cls(**values)
