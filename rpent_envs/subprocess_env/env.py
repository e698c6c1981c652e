"""`SubprocessEnv`: a Gymnasium env whose simulator runs in a worker process.

The worker is `worker.py` run by another interpreter (its own virtual environment, even another
Python or Gymnasium version), so simulators with dependencies that conflict with ours still
join the same wrapper stack. Calls go over a socket pair as framed messages (`wire.py`):
arrays travel as raw bytes, everything else as JSON.
"""

from __future__ import annotations

import builtins
import logging
import sys
import weakref
from collections import OrderedDict
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from rpent_envs.subprocess_env import wire
from rpent_envs.subprocess_env.process import WorkerProcess

logger = logging.getLogger(__name__)

WORKER_SCRIPT = Path(__file__).resolve().parent / "worker.py"


class SubprocessEnvError(RuntimeError):
    """Base class of the errors of the worker connection itself."""


class WorkerDiedError(SubprocessEnvError):
    """The worker process exited (crashed, was killed, or never started properly)."""


class WorkerTimeoutError(SubprocessEnvError, TimeoutError):
    """The worker did not answer in time; it was killed, so the env cannot be used any more."""


class RemoteError(SubprocessEnvError):
    """An exception raised in the worker whose type does not exist in this process.

    Attributes:
        remote_type: The exception's qualified type name in the worker, e.g. "sapien.Error".
        remote_traceback: The worker's formatted traceback.
    """

    def __init__(self, message: str, remote_type: str, remote_traceback: str) -> None:
        super().__init__(f"{remote_type}: {message}")
        self.remote_type = remote_type
        self.remote_traceback = remote_traceback


def build_space(description: dict[str, Any]) -> gym.Space:
    """Rebuild a space from `wire.describe_space`'s description."""
    kind = description["type"]
    if kind == "Box":
        dtype = np.dtype(description["dtype"])
        return gym.spaces.Box(description["low"], description["high"], dtype=dtype)
    if kind == "Discrete":
        return gym.spaces.Discrete(description["n"], start=description["start"])
    if kind == "MultiBinary":
        return gym.spaces.MultiBinary(description["n"])
    if kind == "MultiDiscrete":
        dtype = np.dtype(description["dtype"])
        return gym.spaces.MultiDiscrete(description["nvec"], dtype=dtype)
    if kind == "Text":
        return gym.spaces.Text(
            description["max_length"],
            min_length=description["min_length"],
            charset=description["charset"],
        )
    if kind == "Dict":
        items = description["spaces"].items()
        return gym.spaces.Dict(OrderedDict((key, build_space(sub)) for key, sub in items))
    if kind == "Tuple":
        return gym.spaces.Tuple([build_space(sub) for sub in description["spaces"]])
    raise ValueError(f"unknown space type {kind!r} in a worker's space description")


def remote_exception(error: dict[str, str]) -> Exception:
    """The exception to raise here for an error reply of the worker.

    Built-in exception types (ValueError, FileNotFoundError, ...) keep their type, so callers
    can catch them as if the env ran in-process; others become `RemoteError`. The worker's
    traceback is attached as a note either way.
    """
    builtin = getattr(builtins, error["type"], None)
    exception: Exception | None = None
    if error["module"] == "builtins" and isinstance(builtin, type):
        if issubclass(builtin, Exception):
            try:
                exception = builtin(error["message"])
            except TypeError:  # a built-in needing more arguments, e.g. UnicodeDecodeError
                exception = None
    if exception is None:
        qualified_type = f"{error['module']}.{error['type']}"
        exception = RemoteError(error["message"], qualified_type, error["traceback"])
    exception.add_note(f"raised in the env's worker process:\n{error['traceback'].rstrip()}")
    return exception


class SubprocessEnv(gym.Env[Any, Any]):
    """A Gymnasium env that runs `factory(**kwargs)` in a worker process.

    The worker runs `python` (any interpreter >= 3.10 with numpy and the backend; this package
    need not be installed there) and builds the env by calling `factory`, "path/to/file.py:name"
    (loaded by path) or "module:name" (imported). The backend env needs `observation_space`,
    `action_space`, `reset(seed=, options=)`, `step(action)`, `render()` and `close()`, as a
    Gymnasium 0.29 or 1.x env has; observations, infos and arguments must be dicts (str keys),
    lists, str, numbers, bools, None and numpy arrays.

    Failures: a worker that exits raises `WorkerDiedError` (exit code or signal and its last
    output lines); no reply within the timeout kills the worker and raises
    `WorkerTimeoutError`; after either, every call raises `WorkerDiedError`. Exceptions inside
    the backend keep their built-in type (or become `RemoteError`) and the env stays usable.
    The worker is killed on `close()`, when the env is garbage-collected, at interpreter exit,
    and when this process dies (Linux parent-death signal, and a watchdog in the worker).
    `task_description` mirrors the last `info["task"]` ("" until a reset reports one).

    Example:
        >>> env = SubprocessEnv("my_backend.py:make_env", {"size": 64},
        ...                     python="/opt/venvs/sim/bin/python")
        >>> obs, info = env.reset(seed=0)
        >>> env.get_attr("task_description"), env.worker_runtime["python"]
        ('pick up the cube', '3.11.7')
        >>> env.close()
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(
        self,
        factory: str,
        kwargs: dict[str, Any] | None = None,
        *,
        python: str | Path | None = None,
        worker_env: dict[str, str] | None = None,
        make_timeout_s: float = 600.0,
        call_timeout_s: float = 300.0,
        close_timeout_s: float = 10.0,
    ) -> None:
        """Start the worker and build the env in it.

        Args:
            factory: "path/to/file.py:name" or "module:name" of a callable returning the env.
            kwargs: Keyword arguments of `factory` (sent as a message, see above).
            python: Interpreter of the worker; default: this one.
            worker_env: Environment variables to set in the worker, on top of this process's
                (less PYTHONPATH, PYTHONHOME, PYTHONSTARTUP and VIRTUAL_ENV, which point at
                this interpreter's packages).
            make_timeout_s: Seconds to wait for the worker to build the env.
            call_timeout_s: Seconds to wait for each reset, step, render or attribute call.
            close_timeout_s: Seconds to let the backend close before the worker is killed.

        Raises:
            FileNotFoundError: `python` does not exist.
            WorkerDiedError, WorkerTimeoutError: The worker could not build the env.
        """
        self.call_timeout_s = call_timeout_s
        self.close_timeout_s = close_timeout_s
        self._failure: str | None = None
        self._process = WorkerProcess.start(
            python=Path(python or sys.executable),
            command=[str(WORKER_SCRIPT)],
            extra_env=worker_env or {},
        )
        self._finalizer = weakref.finalize(self, self._process.kill)
        try:
            make = {"command": "make", "factory": factory, "kwargs": kwargs or {}}
            ready = self._request(make, make_timeout_s)
        except BaseException:
            self._failure = "it could not build the env"
            self._finalizer()  # a worker that failed to build exits by itself; be sure
            raise
        self.observation_space = build_space(ready["observation_space"])
        self.action_space = build_space(ready["action_space"])
        self.metadata = {**self.metadata, **ready["metadata"]}
        self.render_mode = ready["render_mode"]
        self.worker_runtime: dict[str, Any] = ready["runtime"]
        self.task_description = ""

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset the worker's env with the same seed and options."""
        super().reset(seed=seed)
        request = {"command": "reset", "seed": seed, "options": options}
        observation, info = self._request(request, self.call_timeout_s)
        self._note_task(info)
        return observation, info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """Step the worker's env."""
        request = {"command": "step", "action": np.asarray(action)}
        observation, reward, terminated, truncated, info = self._request(
            request, self.call_timeout_s
        )
        self._note_task(info)
        return observation, float(reward), bool(terminated), bool(truncated), info

    def render(self) -> Any:
        """The worker env's `render()`."""
        return self._request({"command": "render"}, self.call_timeout_s)

    def get_attr(self, name: str) -> Any:
        """An attribute of the worker's env (AttributeError when it has none)."""
        return self._request({"command": "get_attr", "name": name}, self.call_timeout_s)

    def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """Call a method of the worker's env and return its result."""
        request = {"command": "call", "name": name, "args": list(args), "kwargs": kwargs}
        return self._request(request, self.call_timeout_s)

    @property
    def worker_pid(self) -> int:
        """Process id of the worker."""
        return self._process.pid

    def close(self) -> None:
        """Let the backend close, then make sure the worker process is gone. Idempotent."""
        if self._failure is None and self._process.alive():
            try:
                self._process.channel.send({"command": "close"})
                self._process.channel.receive(self.close_timeout_s)
            except (OSError, wire.ChannelClosedError, wire.ChannelTimeoutError) as error:
                logger.warning("worker %d did not close cleanly: %s", self.worker_pid, error)
        self._failure = self._failure or "the env was closed"
        self._finalizer()

    def _note_task(self, info: dict[str, Any]) -> None:
        """Mirror the instruction (DESIGN.md §2: `info["task"]`) as `task_description`."""
        if isinstance(info.get("task"), str):
            self.task_description = info["task"]

    def _request(self, message: dict[str, Any], timeout_s: float) -> Any:
        if self._failure is not None:
            raise WorkerDiedError(f"the worker is gone ({self._failure}); make a new env")
        command = message["command"]
        try:
            self._process.channel.send(message)
            reply = self._process.channel.receive(timeout_s)
        except wire.ChannelTimeoutError:
            self._failure = f"{command} timed out"
            self._process.kill()
            raise WorkerTimeoutError(
                f"the worker did not answer {command} within {timeout_s:g} s and was killed; "
                f"raise the timeout if the simulator is just slow. "
                f"{self._process.output_tail()}"
            ) from None
        except (OSError, wire.ChannelClosedError):
            self._failure = f"it {self._process.exit_description()} during {command}"
            self._process.kill()
            raise WorkerDiedError(
                f"the worker {self._process.exit_description()} during {command}. "
                f"{self._process.output_tail()}"
            ) from None
        if "error" in reply:
            raise remote_exception(reply["error"])
        return reply["result"]
