"""The Franka Hand through franky, one command at a time.

franky's asynchronous gripper commands return futures that must never overlap nor be destroyed
while pending: the hand (and franky-sim) answers only the command it finished, so an overridden
command's future never resolves, and destroying a pending future crashes or blocks the process.
`SerialGripper` therefore queues the latest request behind the command in progress and keeps
every future until it has resolved.
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger(__name__)

# Futures that never resolved before their gripper was released; kept alive because destroying
# them would crash the interpreter.
_UNRESOLVED_COMMANDS: list[tuple[Any, Any]] = []


class SerialGripper:
    """A franky `Gripper` running one open/close command at a time, the latest request next.

    Example:
        >>> hand = SerialGripper(franky.Gripper("172.16.0.2"))  # doctest: +SKIP
        >>> hand.request(closed=True, speed_m_s=0.1, force_n=20.0)  # doctest: +SKIP
    """

    def __init__(self, gripper: Any) -> None:
        """Wrap a connected franky `Gripper`."""
        self._gripper = gripper
        self.max_width_m = float(gripper.state.max_width)
        self._running: Any = None
        self._queued: tuple[bool, float, float] | None = None

    def request(self, closed: bool, speed_m_s: float, force_n: float) -> None:
        """Close (grasp until blocked, any width counts) or open fully, once the hand is free."""
        self._queued = (closed, speed_m_s, force_n)
        self.pump()

    def pump(self) -> None:
        """Start the queued request if the previous command finished; raise what it raised."""
        if self._running is not None:
            if not self._running.wait(0.0):
                return
            finished, self._running = self._running, None
            finished.get()
        if self._queued is not None:
            closed, speed_m_s, force_n = self._queued
            self._queued = None
            if closed:
                self._running = self._gripper.grasp_async(
                    0.0, speed_m_s, force_n, epsilon_inner=0.005, epsilon_outer=1.0
                )
            else:
                self._running = self._gripper.move_async(self.max_width_m, speed_m_s)

    def width_m(self) -> float:
        """The current finger distance."""
        return float(self._gripper.width)

    def release(self, timeout_s: float) -> None:
        """Wait up to `timeout_s` for the command in progress, then let go of the gripper."""
        running, self._running = self._running, None
        if running is not None and not running.wait(timeout_s):
            logger.error("gripper command still running after %.1f s; abandoning it", timeout_s)
            _UNRESOLVED_COMMANDS.append((self._gripper, running))
        self._queued = None
