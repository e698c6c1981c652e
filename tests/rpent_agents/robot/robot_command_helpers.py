"""What the tests of `rpent-stage2-robot` share: the command as a subprocess whose status line
they read as it runs, the operator's keys through xdotool, small runs' arguments."""

import json
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

COMMAND = [sys.executable, "-m", "rpent_agents.robot.train"]
TESTS_DIR = Path(__file__).parents[2]
TINY_STAGE2 = [
    "--stage2.hidden-dim", "32", "--stage2.batch-size", "8", "--stage2.learning-starts", "2",
    "--stage2.warmup-updates", "10", "--stage2.train-every-transitions", "1",
    "--stage2.update-epoch", "4", "--stage2.replay-capacity", "1000",
    "--stage2.sample-window", "200", "--learner-device", "cpu",
]  # fmt: skip
"""A tiny CPU learner whose warm-up ends after 2 transitions and 10 updates, then 4 updates
per stored transition."""
STATUS = re.compile(
    r"episode (?P<episode>\d+) \| (?P<activity>[^|]+?) \| env steps (?P<env_steps>\d+)/\d+ \| "
    r"successes (?P<successes>\d+)/(?P<episodes>\d+) \| updates (?P<updates>\d+) \| "
    r"replay (?P<replay>\d+)"
)
WAIT_S = 90.0


def owed_updates(transitions):
    """Updates `TINY_STAGE2` owes after `transitions` stored transitions."""
    return 0 if transitions < 2 else 10 + (transitions - 2) * 4


@dataclass(frozen=True)
class Status:
    """One status line of the command."""

    episode: int
    activity: str
    env_steps: int
    successes: int
    episodes: int
    updates: int
    replay: int

    @property
    def driver(self):
        return self.activity.removeprefix("driver ") if self.activity.startswith("driver") else None

    @property
    def waits_for_reset(self):
        return self.activity.startswith("waiting for the reset key")


class CommandRun:
    """The command in a subprocess; its output (stdout and stderr) read line by line, a line
    ending at a newline or at the carriage return of a status line rewritten in place."""

    def __init__(self, args):
        self.process = subprocess.Popen(
            [*COMMAND, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            env=os.environ | {"PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
        self.lines = []
        self.seen = 0  # lines the waits have read past
        self.ended = False  # the whole output is read
        self._changed = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        pending = ""
        while chunk := os.read(self.process.stdout.fileno(), 4096):
            pending += chunk.decode(errors="replace")
            *complete, pending = re.split(r"[\r\n]", pending)
            with self._changed:
                self.lines.extend(line for line in complete if line.strip())
                self._changed.notify_all()
        with self._changed:
            self.lines.append(pending)
            self.ended = True
            self._changed.notify_all()

    def wait_for(self, accept, what, timeout_s=WAIT_S):
        """The first line from the last wait's on for which `accept(line)` is true."""
        deadline_s = time.monotonic() + timeout_s
        with self._changed:
            while True:
                for index in range(self.seen, len(self.lines)):
                    if accept(self.lines[index]):
                        self.seen = index + 1
                        return self.lines[index]
                self.seen = len(self.lines)
                left_s = deadline_s - time.monotonic()
                if left_s <= 0 or self.ended:
                    output = "\n".join(self.lines)[-4000:]
                    raise AssertionError(f"no {what} within {timeout_s} s:\n{output}")
                self._changed.wait(min(left_s, 0.5))

    def wait_for_status(self, accept, what, timeout_s=WAIT_S):
        """The first status line from the last wait's on for which `accept(status)` is true."""

        def accepted(line):
            match = STATUS.search(line)
            return match is not None and accept(status_of(match))

        return status_of(STATUS.search(self.wait_for(accepted, what, timeout_s)))

    def finish(self, timeout_s=WAIT_S):
        """The exit code, once the command ended."""
        return self.process.wait(timeout=timeout_s)

    def output(self):
        with self._changed:
            return "\n".join(self.lines)

    def kill(self):
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


def status_of(match):
    values = match.groupdict()
    activity = values.pop("activity")
    return Status(activity=activity, **{key: int(value) for key, value in values.items()})


def key(name):
    """Press and release `name` (an X keysym: "r", "space", "Up") on the X display."""
    subprocess.run(["xdotool", "key", name], check=True, timeout=10)


def hold(name, down):
    subprocess.run(["xdotool", "keydown" if down else "keyup", name], check=True, timeout=10)


def franka_env_kwargs(host, checkpoint, **overrides):
    """--env-kwargs of the Franka RLT env on franky-sim: blank cameras, a tiny checkpoint."""
    kwargs = {
        "checkpoint": str(checkpoint), "feature_device": "cpu", "host": host,
        "camera": "blank", "wrist_camera": "blank", "image_size": 32,
        "target_position_m": [0.55, 0.0, 0.45], "box_half_extent_m": [0.08, 0.08, 0.08],
        "reset_height_m": 0.05, "reset_dynamics_factor": 0.3, "max_episode_steps": 200,
    }  # fmt: skip
    return json.dumps(kwargs | overrides)


def real_robot_args(output_dir, host, checkpoint, *more):
    return [
        "real-robot", "--output-dir", str(output_dir),
        "--env-kwargs", franka_env_kwargs(host, checkpoint), *TINY_STAGE2, *more,
    ]  # fmt: skip


def run_stand_in(output_dir, checkpoint, max_episode_chunks, *more):
    """`sim-stand-in` to its end: a tiny peg checkpoint, every chunk critical (`always_on`)."""
    env_kwargs = {"checkpoint": str(checkpoint), "trigger_mode": "always_on",
                  "max_episode_chunks": max_episode_chunks}  # fmt: skip
    return subprocess.run(
        [*COMMAND, "sim-stand-in", "--output-dir", str(output_dir),
         "--env-kwargs", json.dumps(env_kwargs), *TINY_STAGE2, *more],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip


def assert_arm_still(host):
    """`franky_sim.assert_still` in a process of its own: a franky connection opened in pytest's
    process upsets the later franky-sim tests of the run (test_franka_faults' stop distances)."""
    code = f"from franky_sim import assert_still; assert_still({host!r})"
    path = os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")])
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
        env=os.environ | {"PYTHONPATH": path},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
