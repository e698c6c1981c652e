"""The learner on another machine: `RayLearnerLink`, and the control loop on the robot's node.

Real set-ups run the control loop on the robot's host and the learner on a GPU host. With Ray
(the `ray` extra) each node says what it holds as a custom resource: `ray start ...
--resources '{"learner": 1}'` on the GPU host, `'{"robot": 1}'` on the robot's host.
`RayLearnerLink` places the learner, a `RayLearnerActor` hosting a `LearnerService`, with
the resources it is given (`{"learner": 1}`, or `num_gpus`), and `robot_node_actor` places
any class as a Ray actor on the node holding the `robot` resource (the control loop's).

The link never waits for the actor: `send` and `end_episode` are fire-and-forget calls,
numbered so that the actor handles them in the order they were sent whatever order its
threads receive them in; `poll` keeps one request for the newest weights and status
outstanding and looks at it with `ray.wait(timeout=0)`. The actor answers polls in a
concurrency group of its own, so a save in progress does not hold them up. A dead actor
(`ray.kill`, its node lost) fails that request, and `health()` says so; a request left
unanswered for `learner_timeout_s` is a stalled learner. The actor is not restarted: the run
resumes from its last save (`--resume`).

Example:
    >>> ray.init(address="auto")
    >>> link = RayLearnerLink(setup, resources={"learner": 1}, num_gpus=1)
    >>> control_loop = robot_node_actor(MyControlLoop, ...)  # it makes its own link instead
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from rpent_agents.robot.learner_host import LearnerHost, LearnerLinkOptions, LearnerReady
from rpent_agents.robot.learner_link import LearnerLinkError, LinkMailbox, silence_sentence
from rpent_agents.robot.learner_service import (
    ActorWeights,
    LearnerSetup,
    LearnerStatus,
)
from rpent_agents.robot.run_state import RobotRunState
from rpent_agents.rollout.ray_vector_env import import_ray
from rpent_agents.stage2.replay import RLTTransition

ROBOT_RESOURCE = "robot"
"""The custom Ray resource of the node the robot is wired to."""
LEARNER_RESOURCE = "learner"
"""The custom Ray resource of the node meant for the learner."""
POLL_GROUP = "poll"
"""The learner actor's concurrency group answering polls (beside its message handling)."""
NEEDED_FOR = "Ray learners (--learner ray)"


class RayLearnerActor:
    """A `LearnerService` and its `LearnerHost` in a Ray actor (placed by `RayLearnerLink`)."""

    def __init__(self, setup: LearnerSetup, options: LearnerLinkOptions) -> None:
        """Build the service of `setup` and start its threads."""
        self._order_lock = threading.Lock()
        self._next_number = 0
        self._waiting: dict[int, tuple[str, Any]] = {}
        self._weights: ActorWeights
        self.host = LearnerHost(setup.build(), options, self._publish)
        self._ready = self.host.start()

    def ready(self) -> tuple[LearnerReady, str]:
        """The learner's first answer and the Ray node it runs on."""
        node_id = import_ray(NEEDED_FOR).get_runtime_context().get_node_id()
        return self._ready, node_id

    def deliver(self, number: int, kind: str, payload: Any) -> None:
        """Handle message `number` once every earlier one is handled ("stop": stop the host)."""
        with self._order_lock:
            self._waiting[number] = (kind, payload)
            while self._next_number in self._waiting:
                kind, payload = self._waiting.pop(self._next_number)
                self._next_number += 1
                if kind == "stop":
                    self.host.stop()
                else:
                    self.host.handle(kind, payload)

    def latest(self, known_version: int) -> tuple[ActorWeights | None, LearnerStatus, str | None]:
        """Weights newer than `known_version` (or None), the status, and the failure if any."""
        weights = self._weights if self._weights.version > known_version else None
        return weights, self.host.service.status(), self.host.failure

    def _publish(self, kind: str, payload: Any) -> None:
        # The status is read when asked for; a failure is `host.failure`.
        if kind == "ready":
            self._weights = payload.weights
        elif kind == "weights":
            self._weights = payload


class RayLearnerLink:
    """The learner as a Ray actor placed by resources (see the module docstring).

    Attributes:
        acting_spec: How to build the local copy of the actor.
        run_state: The run's counters as the learner loaded them (zero for a fresh run).
        config: The learner's Stage 2 config (a resumed run's saved one, read on its host).
        options: Timeouts, publishing and threads.
        actor: The learner's Ray actor handle.
        node_id: The Ray node the learner runs on.
    """

    def __init__(
        self,
        setup: LearnerSetup,
        options: LearnerLinkOptions | None = None,
        resources: Mapping[str, float] | None = None,
        num_cpus: float = 1.0,
        num_gpus: float = 0.0,
    ) -> None:
        """Start the learner actor (Ray must be initialised) and wait until it is ready.

        Args:
            setup: How to build the learner service.
            options: Timeouts, publishing and threads.
            resources: Custom Ray resources the actor needs, e.g. `{"learner": 1}`.
            num_cpus: CPUs Ray reserves for it.
            num_gpus: GPUs Ray reserves for it (the learner sees them: device "auto").

        Raises:
            LearnerLinkError: When the learner fails to start, or no node offers the
                resources within `options.start_timeout_s`.
        """
        ray = import_ray(NEEDED_FOR)
        self.options = options or LearnerLinkOptions()
        actor_class = ray.remote(concurrency_groups={POLL_GROUP: 1})(RayLearnerActor)
        placement = {"num_cpus": num_cpus, "num_gpus": num_gpus, "resources": dict(resources or {})}
        self.actor = actor_class.options(max_restarts=0, **placement).remote(setup, self.options)
        try:
            ready, self.node_id = ray.get(
                self.actor.ready.remote(), timeout=self.options.start_timeout_s
            )
        except ray.exceptions.GetTimeoutError:
            ray.kill(self.actor)
            raise LearnerLinkError(
                f"the learner actor was not placed within {self.options.start_timeout_s:.0f} s: "
                f"does a node of the cluster offer {placement}? (ray status)"
            ) from None
        except ray.exceptions.RayError as error:
            raise LearnerLinkError(f"the learner did not start: {error}") from error
        self.acting_spec, self.run_state = ready.acting_spec, ready.run_state
        self.config = ready.config
        self._mailbox = LinkMailbox(ready)
        self._numbers = itertools.count()
        self._request: Any = None
        self._requested_at_s = 0.0
        self._death: str | None = None
        self._closed = False

    def send(self, transitions: Sequence[RLTTransition]) -> None:
        """Send the transitions to the learner (fire-and-forget)."""
        self._deliver("transitions", list(transitions))

    def end_episode(self, state: RobotRunState, extra_updates: int = 0) -> None:
        """Have the learner save the run with `state` after `extra_updates` (fire-and-forget)."""
        self._deliver("end_episode", (dataclasses.replace(state), extra_updates))

    def _deliver(self, kind: str, payload: Any) -> Any:
        return self.actor.deliver.remote(next(self._numbers), kind, payload)

    def poll(self) -> tuple[ActorWeights | None, LearnerStatus]:
        """The newest weights since the last poll (or None) and the latest status."""
        self._check_answer()
        return self._mailbox.take()

    def _check_answer(self) -> None:
        """Take the outstanding request's answer if it came, and ask again."""
        ray = import_ray(NEEDED_FOR)
        if self._death is not None:
            return
        if self._request is not None:
            if not ray.wait([self._request], timeout=0)[0]:
                return
            try:
                weights, status, failure = ray.get(self._request)
            except ray.exceptions.RayError as error:  # the actor died, or its call failed
                self._death = f"the learner's Ray actor died: {str(error).splitlines()[0]}"
                return
            if weights is not None:
                self._mailbox.receive("weights", weights)
            self._mailbox.receive("status", status)
            if failure is not None:
                self._mailbox.receive("error", failure)
        self._request = self.actor.latest.options(concurrency_group=POLL_GROUP).remote(
            self._mailbox.version
        )
        self._requested_at_s = time.monotonic()

    def health(self) -> str | None:
        """None while the learner lives; else what happened to it, in one sentence."""
        self._check_answer()
        if self._death is not None:
            return self._death
        if self._mailbox.failure is not None:
            return f"the learner failed: {self._mailbox.failure}"
        waiting_s = time.monotonic() - self._requested_at_s if self._request is not None else 0.0
        return silence_sentence(waiting_s, self.options.learner_timeout_s)

    def close(self) -> None:
        """Stop the learner after what was sent (a save in flight finishes); kill a sick one."""
        if self._closed:
            return
        self._closed = True
        ray = import_ray(NEEDED_FOR)
        if self.health() is None:
            stopped = self._deliver("stop", None)
            try:
                ray.get(stopped, timeout=self.options.close_timeout_s)
            except ray.exceptions.RayError:
                pass  # killed below either way
        ray.kill(self.actor)

    def __enter__(self) -> RayLearnerLink:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def robot_node_actor(actor_class: type, *args: Any, num_cpus: float = 1.0, **kwargs: Any) -> Any:
    """Start `actor_class(*args, **kwargs)` as a Ray actor on the node holding the robot.

    The node is the one offering the `robot` resource (`ray start --resources
    '{"robot": 1}'`); the actor takes it whole, so one control loop drives one robot.

    Returns:
        The actor's handle.
    """
    ray = import_ray(NEEDED_FOR)
    remote_class = ray.remote(actor_class)
    options = {"num_cpus": num_cpus, "resources": {ROBOT_RESOURCE: 1}, "max_restarts": 0}
    return remote_class.options(**options).remote(*args, **kwargs)
