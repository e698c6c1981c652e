"""The learner's threads where it runs (a child process or a Ray actor), and the links' options.

`LearnerHost` runs a `LearnerService` for a link: an update thread runs the updates the
schedule owes, a round of `updates_per_round` at a time, and sleeps while none is owed (a new
transition wakes it); it publishes the actor's weights every `publish_every_updates` updates,
every `publish_period_s` seconds when it has updated, and at once when the warm-up ends. A
heartbeat thread publishes the status every `heartbeat_period_s`, even while a save holds the
service. The link hands it the control loop's messages in their order (`handle`): transitions
(stored, wakes the updates) and episode ends (saved, then the status as acknowledgement).

Whatever fails in the host (a save on a full disk, a network turned NaN) is published as one
"error" message, `failure` says it, and the host stops updating: the link reports it through
`health()`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from rpent_agents.robot.learner_service import (
    ActingSpec,
    ActorWeights,
    LearnerService,
    LearnerStatus,
)
from rpent_agents.robot.run_state import RobotRunState
from rpent_agents.stage2.config import Stage2Config

logger = logging.getLogger(__name__)
Publish = Callable[[str, Any], None]
"""Sends one message from the learner to the link: ("ready", LearnerReady) once, first, then
("weights", ActorWeights), ("status", LearnerStatus) or ("error", one sentence)."""


@dataclass(frozen=True)
class LearnerLinkOptions:
    """How a link runs its learner and judges its health."""

    learner_timeout_s: float = 30.0
    """No word from the learner for this long: it has stalled (`health()` says so)."""
    heartbeat_period_s: float = 1.0
    """Seconds between the learner's status messages."""
    publish_every_updates: int = 100
    """Publish the actor's weights at least every this many updates."""
    publish_period_s: float = 1.0
    """... and every this many seconds when it has updated since the last weights."""
    updates_per_round: int = 8
    """Updates run in one hold of the service (bounds how long storing or saving waits)."""
    torch_threads: int | None = None
    """Torch threads of the learner; None: 1 on a CPU learner (the control loop keeps a core),
    torch's default on a GPU."""
    nice: int = 0
    """Niceness a learner process adds to its own at its start (`ProcessLearnerLink`), so the
    control loop's work goes first on the cores they share."""
    start_timeout_s: float = 300.0
    """Longest wait for a started learner to be ready (it imports torch, loads the run)."""
    close_timeout_s: float = 120.0
    """Longest wait at `close()` for a healthy learner to handle what was sent (a save)."""


class LearnerReady(NamedTuple):
    """What a started learner answers once, before the control loop acts.

    Attributes:
        acting_spec: How to build the local copy of the actor.
        run_state: The run's counters as saved (zero for a fresh run).
        weights: The actor's weights now.
        status: The learner's counters now.
        config: The learner's Stage 2 config (a resumed run's saved one): how the control
            loop stores chunks.
    """

    acting_spec: ActingSpec
    run_state: RobotRunState
    weights: ActorWeights
    status: LearnerStatus
    config: Stage2Config


def set_torch_threads(torch_threads: int | None, device: torch.device) -> None:
    """Use `torch_threads` torch threads (None: 1 on the CPU, torch's default on a GPU)."""
    if torch_threads is None and device.type == "cpu":
        torch_threads = 1
    if torch_threads is not None:
        torch.set_num_threads(torch_threads)


class LearnerHost:
    """Runs a service's update and heartbeat threads and handles the link's messages."""

    def __init__(self, service: LearnerService, options: LearnerLinkOptions, publish: Publish):
        """Host `service`; `publish` sends the learner's messages (from the host's threads)."""
        self.service = service
        self.options = options
        self.publish = publish
        self.failure: str | None = None
        self._stopping = threading.Event()
        self._work = threading.Event()
        self._published: ActorWeights | None = None
        self._published_at_s = 0.0
        self._threads = [
            threading.Thread(target=self._update_loop, name="learner-updates", daemon=True),
            threading.Thread(target=self._heartbeat_loop, name="learner-heartbeat", daemon=True),
        ]

    def start(self) -> LearnerReady:
        """Publish ("ready", `LearnerReady`), then start the threads; returns the same answer."""
        set_torch_threads(self.options.torch_threads, self.service.learner.device)
        self._published, self._published_at_s = self.service.weights(), time.monotonic()
        service = self.service
        ready = LearnerReady(
            service.acting_spec, service.run_state, self._published, service.status(),
            service.learner.config,
        )  # fmt: skip
        self.publish("ready", ready)  # before anything the threads publish
        for thread in self._threads:
            thread.start()
        return ready

    def handle(self, kind: str, payload: Any) -> None:
        """Handle one message of the control loop: "transitions" or "end_episode"."""
        with self._reporting_failure():
            if kind == "transitions":
                self.service.add(payload)
                self._work.set()
            elif kind == "end_episode":
                self.service.end_episode(*payload)
                self.publish("status", self.service.status())
            else:
                raise ValueError(f"unknown learner message {kind!r}")

    def stop(self) -> None:
        """Stop the threads (an update round in progress finishes first)."""
        self._stopping.set()
        self._work.set()
        for thread in self._threads:
            if thread.is_alive():
                thread.join()

    @contextlib.contextmanager
    def _reporting_failure(self) -> Iterator[None]:
        """Publish an error raised in the block as the learner's failure, and stop updating."""
        try:
            yield
        except Exception as error:
            logger.exception("the learner failed")
            self.failure = f"{type(error).__name__}: {error}"
            self._stopping.set()
            self.publish("error", self.failure)

    def _update_loop(self) -> None:
        with self._reporting_failure():
            while not self._stopping.is_set():
                if self.service.update_some(self.options.updates_per_round) == 0:
                    self._work.wait(self.options.publish_period_s)
                    self._work.clear()  # the next round reads what was added meanwhile
                self._publish_weights_if_due()

    def _publish_weights_if_due(self) -> None:
        status, published, options = self.service.status(), self._published, self.options
        if published is None or status.updates == published.update_step:
            return
        waited_s = time.monotonic() - self._published_at_s
        if (
            status.updates - published.update_step >= options.publish_every_updates
            or status.actor_ready != published.actor_ready
            or waited_s >= options.publish_period_s
        ):
            self._published, self._published_at_s = self.service.weights(), time.monotonic()
            self.publish("weights", self._published)

    def _heartbeat_loop(self) -> None:
        with self._reporting_failure():
            while not self._stopping.wait(self.options.heartbeat_period_s):
                self.publish("status", self.service.status())
