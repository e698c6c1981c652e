"""Starting, watching and killing the worker process of a `SubprocessEnv`."""

from __future__ import annotations

import collections
import logging
import os
import signal
import socket
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path

from rpent_envs.subprocess_env import wire

logger = logging.getLogger("rpent_envs.subprocess_env.worker")

OUTPUT_TAIL_LINES = 30
EXIT_WAIT_S = 5.0
# Variables that point an interpreter at this one's packages; the worker has its own.
PARENT_ONLY_VARIABLES = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV")


@dataclass
class WorkerProcess:
    """A worker subprocess, the parent's end of its socket, and its recent output.

    The worker's stdout and stderr are read by a thread (so a chatty simulator never blocks on
    a full pipe), logged at DEBUG level on the "rpent_envs.subprocess_env.worker" logger, and
    the last lines are kept for error messages.

    Attributes:
        popen: The worker process.
        channel: The parent's end of the message channel.
    """

    popen: subprocess.Popen[bytes]
    channel: wire.Channel
    _tail: collections.deque[str] = field(
        default_factory=lambda: collections.deque(maxlen=OUTPUT_TAIL_LINES)
    )
    _reader: threading.Thread = field(init=False)

    def __post_init__(self) -> None:
        self._reader = threading.Thread(
            target=self._read_output, name=f"worker-{self.popen.pid}-output", daemon=True
        )

    @classmethod
    def start(cls, python: Path, command: list[str], extra_env: dict[str, str]) -> WorkerProcess:
        """Start `python command... --socket-fd N --parent-pid P [--kill-with-parent]`.

        The worker gets its own session (process group), so a terminal's Ctrl-C reaches only
        this process, which decides when the worker ends, and `kill` reaches the worker's own
        children too. The parent-death signal is requested only from the main thread, because
        Linux sends it when the *thread* that started the worker exits.

        Raises:
            FileNotFoundError: `python` is not an executable file.
        """
        if not (python.is_file() and os.access(python, os.X_OK)):
            raise FileNotFoundError(
                f"worker interpreter {python} does not exist or is not executable; pass "
                "python= the path of an existing one"
            )
        parent_end, worker_end = socket.socketpair()
        argv = [str(python), *command, "--socket-fd", str(worker_end.fileno())]
        argv += ["--parent-pid", str(os.getpid())]
        if threading.current_thread() is threading.main_thread():
            argv.append("--kill-with-parent")
        env = {k: v for k, v in os.environ.items() if k not in PARENT_ONLY_VARIABLES}
        env.update(extra_env, PYTHONUNBUFFERED="1")
        try:
            popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                pass_fds=[worker_end.fileno()],
                env=env,
                start_new_session=True,
            )
        finally:
            worker_end.close()
        worker = cls(popen=popen, channel=wire.Channel(parent_end))
        worker._reader.start()
        return worker

    @property
    def pid(self) -> int:
        """The worker's process id."""
        return self.popen.pid

    def alive(self) -> bool:
        """Whether the worker process is still running."""
        return self.popen.poll() is None

    def kill(self) -> None:
        """Kill the worker and its process group (SIGKILL), reap it and close the socket."""
        if self.alive():
            try:
                os.killpg(self.popen.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.popen.wait(timeout=EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            logger.warning("worker %d did not exit after SIGKILL", self.popen.pid)
        self.channel.close()

    def exit_description(self) -> str:
        """How the worker ended, e.g. "exited with code 1" or "was killed by SIGSEGV"."""
        try:
            code = self.popen.wait(timeout=EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            return "closed its connection but is still running"
        if code < 0:
            return f"was killed by {signal.Signals(-code).name}"
        return f"exited with code {code}"

    def output_tail(self) -> str:
        """The worker's last output lines, for error messages."""
        if not self.alive():
            self._reader.join(timeout=EXIT_WAIT_S)  # the output it printed before exiting
        if not self._tail:
            return "The worker printed nothing."
        lines = "\n".join(self._tail)
        return f"Last worker output (DEBUG log 'rpent_envs.subprocess_env.worker'):\n{lines}"

    def _read_output(self) -> None:
        stream = self.popen.stdout
        assert stream is not None  # started with stdout=PIPE
        for raw_line in stream:
            # Progress bars rewrite one line with carriage returns: keep the last state.
            line = raw_line.decode("utf-8", "replace").rstrip().rsplit("\r", 1)[-1]
            self._tail.append(line)
            logger.debug("[worker %d] %s", self.popen.pid, line)
        stream.close()
