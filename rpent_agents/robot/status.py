"""The operator's screen: the keys' meaning once, then one status line refreshed in place.

The line says what the run is doing now (who drives the arm, or what it waits for) and how
far it is: episode, env steps, successes, the learner's updates and replay size, and whether
the actor may drive yet (the learner's warm-up is done). It is a tqdm bar on stderr, so log
messages printed through `tqdm.contrib.logging.logging_redirect_tqdm` appear above it.

Example:
    >>> line = StatusLine(legend="keys: b actor | c success | a failure")
    >>> line.show(status_text("driver vla", RobotRunState(), 1000, LearnerStatus()))
    >>> line.close()
"""

from __future__ import annotations

import sys
from typing import TextIO

from tqdm import tqdm

from rpent_agents.robot.learner_service import LearnerStatus
from rpent_agents.robot.run_state import RobotRunState


def status_text(
    activity: str,
    state: RobotRunState,
    total_env_steps: int,
    learner: LearnerStatus,
    running: bool = True,
) -> str:
    """The status line of a run doing `activity` (e.g. "driver actor") after `state`.

    It starts with the episode in progress (or waited for), or the episodes done once the run
    is no longer `running`.

    Example:
        >>> text = status_text("driver vla", RobotRunState(episodes=2, successes=1), 1000,
        ...                    LearnerStatus(updates=80, replay_size=12))
        >>> text.split(" | ")[:4]
        ['episode 3', 'driver vla', 'env steps 0/1000', 'successes 1/2']
    """
    readiness = "actor ready" if learner.actor_ready else "actor warming up"
    episode = f"episode {state.episodes + 1}" if running else f"episodes {state.episodes}"
    return (
        f"{episode} | {activity} | env steps {state.env_steps}/"
        f"{total_env_steps} | successes {state.successes}/{state.episodes} | updates "
        f"{learner.updates} | replay {learner.replay_size} | {readiness}"
    )


class StatusLine:
    """One line on stderr, rewritten when its text changes; the keys' legend printed once."""

    def __init__(self, legend: str | None = None, file: TextIO | None = None) -> None:
        """Print `legend` (None: none), then show an empty status line.

        Args:
            legend: The keys' meaning (`OperatorKeys.legend`).
            file: Where to write; default stderr.
        """
        self.file = file if file is not None else sys.stderr
        if legend:
            tqdm.write(legend, file=self.file)
        self._bar = tqdm(bar_format="{desc}", file=self.file, dynamic_ncols=True, leave=True)
        self.text = ""

    def show(self, text: str) -> None:
        """Show `text` as the status line (nothing is written when it did not change)."""
        if text != self.text:
            self.text = text
            self._bar.set_description_str(text, refresh=True)

    def close(self) -> None:
        """Leave the last status on screen and end the line."""
        self._bar.close()
