"""How the control loop talks to its learner without ever waiting for it: `LearnerLink`.

The control loop calls the link between chunks: `send` the chunks' transitions, `end_episode`
with the counters, `poll` for newer actor weights and the learner's status, `health` to know
whether the learner still lives. Each call returns at once (well under a millisecond on a
healthy learner): the link queues what it sends, and a thread of its own (or Ray) receives
what the learner sends back. The learner handles the messages in the order they were sent,
so an episode's save holds every transition sent before it.

`ProcessLearnerLink` (the default) runs the learner in a child process of this machine (on
its GPU when there is one: `LearnerSetup.device` "auto"); `RayLearnerLink`
(`ray_learner_link`) runs it as a Ray actor on another machine. In the child, a
`LearnerHost` updates as owed and publishes weights and heartbeats on one queue while it
consumes the control loop's messages from another. The child dies with this process: the
kernel kills it when its parent dies (PR_SET_PDEATHSIG, Linux), and it stops by itself when
it finds its parent gone. `health()` turns a dead child ("the learner process died (exit code
-9)"), a failed one (its error) or a silent one ("the learner sent no heartbeat for 31 s")
into one sentence for the command to end with.

Example:
    >>> setup = LearnerSetup(run_dir, Stage2Config.real_robot(device="cpu"), dims)
    >>> with ProcessLearnerLink(setup) as link:
    ...     actor = link.acting_spec.build_actor()
    ...     weights, status = link.poll()  # the first weights: load them into the actor
    ...     link.send(transitions)
    ...     link.end_episode(run_state)
"""

from __future__ import annotations

import ctypes
import dataclasses
import logging
import multiprocessing
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Sequence
from multiprocessing.queues import Queue
from typing import Any, Protocol

from rpent_agents.robot.learner_host import LearnerHost, LearnerLinkOptions, LearnerReady
from rpent_agents.robot.learner_service import ActingSpec, ActorWeights, LearnerSetup, LearnerStatus
from rpent_agents.robot.run_state import RobotRunState
from rpent_agents.stage2.config import Stage2Config
from rpent_agents.stage2.replay import RLTTransition

logger = logging.getLogger(__name__)
PR_SET_PDEATHSIG = 1
RECEIVE_PERIOD_S = 0.2
"""How often the threads that wait for messages look up from the queue."""


class LearnerLinkError(RuntimeError):
    """The learner could not be started (its error, or why it was not placed)."""


class LearnerLink(Protocol):
    """What the control loop uses of its learner; no call but `close` waits for the learner.

    Attributes:
        acting_spec: How to build the local copy of the actor (`build_actor`).
        run_state: The run's counters as the learner loaded them (zero for a fresh run).
        config: The learner's Stage 2 config (a resumed run's saved one, read where the
            learner runs).
    """

    acting_spec: ActingSpec
    run_state: RobotRunState
    config: Stage2Config

    def send(self, transitions: Sequence[RLTTransition]) -> None:
        """Queue the transitions for storing (do not change them afterwards)."""

    def end_episode(self, state: RobotRunState, extra_updates: int = 0) -> None:
        """Queue the save of the run with `state` after what was sent and `extra_updates`."""

    def poll(self) -> tuple[ActorWeights | None, LearnerStatus]:
        """The newest weights since the last poll (None: none newer) and the latest status."""

    def health(self) -> str | None:
        """None while the learner lives; else one sentence saying what happened to it."""

    def close(self) -> None:
        """Stop the learner once it has handled what was sent (a dead one at once)."""


class LinkMailbox:
    """What the learner sent, as the link heard it (shared by the link's threads)."""

    def __init__(self, ready: LearnerReady) -> None:
        """Start from the learner's first answer; its weights are the first poll's."""
        self._lock = threading.Lock()
        self._weights: ActorWeights | None = ready.weights
        self.version = ready.weights.version
        self.status = ready.status
        self.failure: str | None = None
        self.heard_at_s = time.monotonic()

    def receive(self, kind: str, payload: Any) -> None:
        """Keep one message of the learner: "weights", "status" or "error"."""
        with self._lock:
            self.heard_at_s = time.monotonic()
            if kind == "weights" and payload.version > self.version:
                self._weights, self.version = payload, payload.version
            elif kind == "status":
                self.status = payload
            elif kind == "error":
                self.failure = payload

    def take(self) -> tuple[ActorWeights | None, LearnerStatus]:
        """The weights not taken yet (or None) and the latest status."""
        with self._lock:
            weights, self._weights = self._weights, None
            return weights, self.status


def silence_sentence(silent_s: float, timeout_s: float) -> str | None:
    """The health sentence of a learner silent for `silent_s` (None: within `timeout_s`)."""
    if silent_s <= timeout_s:
        return None
    return f"the learner sent no heartbeat for {silent_s:.0f} s"


class ProcessLearnerLink:
    """The learner in a spawned child process (see the module docstring).

    Create it in the thread that runs the control loop: the kernel kills the child when the
    thread that started it ends (PR_SET_PDEATHSIG follows the creating thread). The child is
    spawned, so a script that creates one keeps its work under `if __name__ == "__main__":`.

    Attributes:
        acting_spec: How to build the local copy of the actor.
        run_state: The run's counters as the learner loaded them (zero for a fresh run).
        config: The learner's Stage 2 config.
        options: Timeouts, publishing and threads.
    """

    def __init__(self, setup: LearnerSetup, options: LearnerLinkOptions | None = None) -> None:
        """Start the learner of `setup` and wait until it is ready (or fails to start).

        Raises:
            LearnerLinkError: When the learner fails to start (its error) or is not ready
                within `options.start_timeout_s`.
        """
        self.options = options or LearnerLinkOptions()
        context = multiprocessing.get_context("spawn")
        self._to_learner: Queue = context.Queue()
        self._from_learner: Queue = context.Queue()
        self._process = context.Process(
            target=run_learner_process,
            args=(setup, self.options, self._to_learner, self._from_learner, os.getpid()),
            name="rpent-learner",
            daemon=True,
        )
        self._process.start()
        self._closed = False
        try:
            ready = self._wait_until_ready()
        except BaseException:
            self._process.kill()
            self._process.join()
            raise
        self.acting_spec, self.run_state = ready.acting_spec, ready.run_state
        self.config = ready.config
        self._mailbox = LinkMailbox(ready)
        self._receiving = True
        self._receiver = threading.Thread(target=self._receive, name="learner-link", daemon=True)
        self._receiver.start()

    @property
    def pid(self) -> int:
        """The learner process's id."""
        return self._process.pid

    def _wait_until_ready(self) -> LearnerReady:
        deadline_s = time.monotonic() + self.options.start_timeout_s
        while time.monotonic() < deadline_s:
            try:
                kind, payload = self._from_learner.get(timeout=RECEIVE_PERIOD_S)
            except queue.Empty:
                if self._process.exitcode is not None:
                    raise LearnerLinkError(
                        f"the learner process died while starting (exit code "
                        f"{self._process.exitcode})"
                    ) from None
                continue
            if kind == "ready":
                return payload
            if kind == "error":
                raise LearnerLinkError(f"the learner did not start: {payload}")
        raise LearnerLinkError(
            f"the learner was not ready within {self.options.start_timeout_s:.0f} s; a learner "
            "that pretrains on demonstrations needs longer: raise --learner-start-timeout-s"
        )

    def _receive(self) -> None:
        while self._receiving:
            try:
                kind, payload = self._from_learner.get(timeout=RECEIVE_PERIOD_S)
            except queue.Empty:
                continue
            except (EOFError, OSError):
                return
            self._mailbox.receive(kind, payload)

    def send(self, transitions: Sequence[RLTTransition]) -> None:
        """Queue the transitions for the learner (pickled later: do not change them)."""
        self._to_learner.put(("transitions", list(transitions)))

    def end_episode(self, state: RobotRunState, extra_updates: int = 0) -> None:
        """Queue the save of the run with (a copy of) `state`, after `extra_updates` updates."""
        self._to_learner.put(("end_episode", (dataclasses.replace(state), extra_updates)))

    def poll(self) -> tuple[ActorWeights | None, LearnerStatus]:
        """The newest weights since the last poll (or None) and the latest status."""
        return self._mailbox.take()

    def health(self) -> str | None:
        """None while the learner lives; else what happened to it, in one sentence."""
        failure, exit_code = self._mailbox.failure, self._process.exitcode
        if exit_code is not None:
            return f"the learner process died (exit code {exit_code})" + (
                f": {failure}" if failure else ""
            )
        if failure is not None:
            return f"the learner failed: {failure}"
        silent_s = time.monotonic() - self._mailbox.heard_at_s
        return silence_sentence(silent_s, self.options.learner_timeout_s)

    def close(self) -> None:
        """Stop the learner after what was sent (a save in flight finishes); kill a sick one."""
        if self._closed:
            return
        self._closed = True
        if self.health() is None:
            self._to_learner.put(("stop", None))
            self._process.join(self.options.close_timeout_s)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()
        self._to_learner.cancel_join_thread()  # nothing more can be delivered
        self._receiving = False
        self._receiver.join(timeout=1.0)

    def __enter__(self) -> ProcessLearnerLink:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def die_with_parent(parent_pid: int) -> None:
    """Have the kernel kill this process when its parent dies (Linux; elsewhere nothing).

    Exits at once when the parent died before the request took effect.
    """
    if not sys.platform.startswith("linux"):
        return
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:
        os._exit(1)


def run_learner_process(
    setup: LearnerSetup,
    options: LearnerLinkOptions,
    to_learner: Queue,
    from_learner: Queue,
    parent_pid: int,
) -> None:
    """The learner process: build the service, host it, handle messages until "stop".

    Exits with 1 when the learner failed (its error was sent first), 0 after "stop".
    """
    die_with_parent(parent_pid)
    os.nice(options.nice)  # before the host's threads start: they inherit it
    # Ctrl-C in a terminal reaches the whole process group: the command stops, and this
    # process handles what was sent (a save in flight) before the command's close stops it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        host = LearnerHost(setup.build(), options, lambda *message: from_learner.put(message))
        host.start()
    except Exception as error:
        logger.exception("the learner did not start")
        from_learner.put(("error", f"{type(error).__name__}: {error}"))
        sys.exit(1)
    if not _serve(host, to_learner):  # the parent is gone: nobody reads what is queued
        from_learner.cancel_join_thread()
    host.stop()
    sys.exit(1 if host.failure else 0)


def _serve(host: LearnerHost, to_learner: Queue) -> bool:
    """Hand the host the control loop's messages until "stop" or a failure.

    Returns:
        False when the parent process is gone.
    """
    parent = multiprocessing.parent_process()
    while host.failure is None:
        try:
            kind, payload = to_learner.get(timeout=RECEIVE_PERIOD_S)
        except queue.Empty:
            if parent is not None and not parent.is_alive():
                return False
            continue
        except (EOFError, OSError):
            return False
        if kind == "stop":
            break
        host.handle(kind, payload)
    return True
