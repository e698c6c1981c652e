"""Worker process of a `SubprocessEnv`: builds one env and serves calls on it.

Run by path with any Python >= 3.10 that has numpy and the backend (not this package):

    python worker.py --socket-fd FD --parent-pid PID [--kill-with-parent]

The parent sends {"command": "make", "factory": "file.py:name" | "module:name", "kwargs": {}}
first, then one request per call (reset, step, render, get_attr, call, close); every request
gets one reply, {"result": ...} or {"error": {"type", "module", "message", "traceback"}}. The
worker exits when the parent closes the socket, when the parent process goes away, or after
"close".
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import importlib
import importlib.util
import os
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import wire  # the sibling module; this directory is sys.path[0] when run as a script

sys.path.remove(str(Path(__file__).resolve().parent))  # keep our names out of the backend's way

PR_SET_PDEATHSIG = 1
PARENT_POLL_PERIOD_S = 0.5


def exit_with_parent(parent_pid: int, kill_with_parent: bool) -> None:
    """Make sure this process ends when the parent process does.

    With `kill_with_parent` the kernel sends SIGKILL when the parent thread exits (Linux
    PR_SET_PDEATHSIG), which also stops a worker stuck in native code. A watchdog thread also
    exits the process when it is re-parented, covering a parent that died before the signal
    was armed and platforms without it.
    """
    if kill_with_parent and sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(PARENT_POLL_PERIOD_S)
        os._exit(1)

    threading.Thread(target=watch, name="parent-watchdog", daemon=True).start()


def load_factory(factory: str) -> Callable[..., Any]:
    """Resolve "path/to/file.py:name" (loaded by path) or "package.module:name"."""
    location, _, name = factory.rpartition(":")
    if not location or not name:
        raise ValueError(f"factory {factory!r}: use 'path/to/file.py:name' or 'module:name'")
    if location.endswith(".py"):
        path = Path(location)
        module_name = f"rpent_worker_backend_{path.stem}"
        spec = importlib.util.spec_from_file_location(module_name, path)
        if spec is None or spec.loader is None:
            raise FileNotFoundError(f"factory file {path} cannot be loaded")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(location)
    return getattr(module, name)


def describe_env(env: Any) -> dict[str, Any]:
    """What the parent needs to mirror the env: spaces, metadata and render mode."""
    metadata = getattr(env, "metadata", {}) or {}
    return {
        "observation_space": wire.describe_space(env.observation_space),
        "action_space": wire.describe_space(env.action_space),
        "metadata": {
            "render_modes": list(metadata.get("render_modes", [])),
            "render_fps": metadata.get("render_fps"),
        },
        "render_mode": getattr(env, "render_mode", None),
        "runtime": {
            "python": sys.version.split()[0],
            "executable": sys.executable,
            "pid": os.getpid(),
        },
    }


def handle(env: Any, request: dict[str, Any]) -> Any:
    """Run one request on the env and return its result."""
    command = request["command"]
    if command == "reset":
        return list(env.reset(seed=request.get("seed"), options=request.get("options")))
    if command == "step":
        return list(env.step(request["action"]))
    if command == "render":
        return env.render()
    if command == "get_attr":
        return getattr(env, request["name"])
    if command == "call":
        method = getattr(env, request["name"])
        return method(*request.get("args", []), **request.get("kwargs", {}))
    raise ValueError(f"unknown command {command!r}")


def error_reply(error: BaseException) -> dict[str, Any]:
    """The reply that carries an exception to the parent."""
    return {
        "error": {
            "type": type(error).__name__,
            "module": type(error).__module__,
            "message": str(error),
            "traceback": traceback.format_exc(),
        }
    }


def answer(channel: wire.Channel, compute: Callable[[], Any]) -> None:
    """Send `compute()`'s result, or the exception it (or encoding its result) raised."""
    try:
        reply = {"result": compute()}
        frames = wire.encode(reply)  # a result that cannot be sent becomes an error reply
    except Exception as error:
        frames = wire.encode(error_reply(error))
    channel.send_frames(frames)


def serve(channel: wire.Channel) -> None:
    """Build the env from the first request, then answer requests until told to close."""
    make = channel.receive()
    built: list[Any] = []

    def build() -> dict[str, Any]:
        built.append(load_factory(make["factory"])(**make.get("kwargs", {})))
        return describe_env(built[0])

    answer(channel, build)
    if not built:
        return
    env = built[0]
    while True:
        request = channel.receive()
        if request["command"] == "close":
            answer(channel, env.close)
            return
        answer(channel, functools.partial(handle, env, request))


def main() -> None:
    """Parse the command line, connect to the parent and serve."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--socket-fd", type=int, required=True)
    parser.add_argument("--parent-pid", type=int, required=True)
    parser.add_argument("--kill-with-parent", action="store_true")
    args = parser.parse_args()
    exit_with_parent(args.parent_pid, args.kill_with_parent)
    channel = wire.Channel(socket.socket(fileno=args.socket_fd))
    try:
        serve(channel)
    except wire.ChannelClosedError:
        pass  # the parent went away: nothing left to answer
    finally:
        channel.close()


if __name__ == "__main__":
    main()
