"""The control period `rpent-stage2-robot real-robot` holds against franky-sim, the learner busy.

Issue 51's goal: p99 <= 1.1 x the period at >= 4 updates per stored transition. The bench
starts franky-sim (MuJoCo FR3) on a loopback address and an Xvfb display, builds a tiny Stage 1
checkpoint of the Franka's sizes (blank cameras: franky-sim has none), and runs the real command
as a subprocess with the `real-robot` preset's learner (warm-up, then 8 updates per stored
transition; on the CPU here) and no wait for the reset key, so the robot time is continuous.
A scripted operator presses `b` (xdotool) whenever the status line says the VLA drives, so the
actor takes every episode once the learner's warm-up is done; each episode ends at the env's
step limit (a failure: no outcome key). While it runs the bench samples the CPU time of the
learner, the control loop and franky-sim from /proc. The periods come from the command's own
clock (results.json).

Writes bench/figures/robot/control_period_<date>.json and prints it.

Usage: .venv/bin/python bench/robot_control_period.py [--episodes 8]
    ["--command-args=--learner-nice 0"]
"""

import datetime
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import tyro

from rpent_agents.features.builtin import BuiltinVLA, BuiltinVLAConfig
from rpent_agents.features.checkpoint import save_checkpoint
from rpent_agents.features.norm import NormStats
from rpent_agents.features.rl_token import RLToken, RLTokenConfig
from rpent_agents.robot.config import REAL_ROBOT_STAGE2
from rpent_agents.robot.control_period import LATE_FACTOR

FIGURES = Path(__file__).parent / "figures" / "robot"
GOAL_P99_FACTOR = LATE_FACTOR
GOAL_UPDATES_PER_TRANSITION = 4
STATUS = re.compile(r"episode (?P<episode>\d+) \| (?P<activity>[^|]+?) \| env steps (?P<steps>\d+)")
LEARNER_PID = re.compile(r"the learner runs in process (\d+)")
CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


@dataclass
class Args:
    episodes: int = 8
    """Episodes of the run (each runs to the env's limit, 300 steps: 30 s at 10 Hz)."""
    host: str = "127.0.0.3"
    """Loopback address franky-sim serves."""
    command_args: str = ""
    """More flags for the command, after the bench's, as one string (e.g. "--learner-nice 0")."""
    output: Path | None = None
    """The JSON to write (default: bench/figures/robot/control_period_<date>.json)."""


def tiny_franka_checkpoint(folder: Path) -> Path:
    """A Stage 1 checkpoint of the Franka's sizes (19 state, 7 action, chunks of 20), 32 px."""
    torch.manual_seed(0)
    config = BuiltinVLAConfig(
        state_dim=19, action_dim=7, chunk_len=20, image_size=32, patch_size=16, dim=32,
        num_heads=2, num_layers=1, num_head_layers=1,
    )  # fmt: skip
    vla = BuiltinVLA(config, NormStats.identity(19, 7))
    save_checkpoint(folder, vla, RLToken(RLTokenConfig(dim=32, num_heads=2, prefix_seq_len=64)))
    return folder


def start_xvfb() -> tuple[subprocess.Popen, str]:
    """An Xvfb server on a free display number, and its DISPLAY."""
    number = next(n for n in range(90, 200) if not Path(f"/tmp/.X{n}-lock").exists())
    server = subprocess.Popen(
        ["Xvfb", f":{number}", "-screen", "0", "320x240x24", "-nolisten", "tcp"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline_s = time.monotonic() + 20
    while not Path(f"/tmp/.X11-unix/X{number}").exists():
        if server.poll() is not None or time.monotonic() > deadline_s:
            raise RuntimeError("Xvfb did not start")
        time.sleep(0.05)
    return server, f":{number}"


def start_franky_sim(host: str, log_path: Path) -> subprocess.Popen:
    """franky-sim serving `host`, its output into `log_path` (read until it is ready)."""
    command = [str(Path(sys.executable).with_name("franky-sim")), "-s", "mujoco"]
    log = log_path.open("w")
    sim = subprocess.Popen(
        [*command, "--hostname", host], stdout=log, stderr=subprocess.STDOUT,
        env=os.environ | {"PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    deadline_s = time.monotonic() + 90
    while "Connect to the server" not in log_path.read_text():
        if sim.poll() is not None or time.monotonic() > deadline_s:
            raise RuntimeError(f"franky-sim did not start: {log_path.read_text()[-2000:]}")
        time.sleep(0.2)
    return sim


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process `pid` so far (None: it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS_PER_S


class CommandWatch:
    """Reads the command's output: its latest status, its learner's pid; samples CPU times."""

    def __init__(self, process: subprocess.Popen, sim_pid: int) -> None:
        self.process = process
        self.pids = {"control_loop": process.pid, "franky_sim": sim_pid}
        self.cpu_s: dict[str, float] = {}
        self.activity, self.episode, self.tail = "", 0, []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._sample_cpu, daemon=True).start()

    def _read(self) -> None:
        pending = ""
        while chunk := os.read(self.process.stdout.fileno(), 4096):
            pending += chunk.decode(errors="replace")
            *lines, pending = re.split(r"[\r\n]", pending)
            for line in lines:
                if match := LEARNER_PID.search(line):
                    self.pids["learner"] = int(match.group(1))
                if match := STATUS.search(line):
                    self.activity, self.episode = match["activity"], int(match["episode"])
                elif line.strip():
                    self.tail = [*self.tail[-40:], line]

    def _sample_cpu(self) -> None:
        while self.process.poll() is None:
            for name, pid in list(self.pids.items()):
                if (seconds := cpu_seconds(pid)) is not None:
                    self.cpu_s[name] = seconds
            time.sleep(0.5)


def operate(watch: CommandWatch, display: str) -> None:
    """Press `b` whenever the VLA drives (at most once a second) until the command ends."""
    pressed_s = 0.0
    while watch.process.poll() is None:
        if watch.activity == "driver vla" and time.monotonic() - pressed_s > 1.0:
            subprocess.run(["xdotool", "key", "b"], env=os.environ | {"DISPLAY": display},
                           check=True, timeout=10)  # fmt: skip
            pressed_s = time.monotonic()
        time.sleep(0.05)


def robot_command(args: Args, checkpoint: Path, output_dir: Path) -> list[str]:
    env_kwargs = {
        "checkpoint": str(checkpoint), "feature_device": "cpu", "host": args.host,
        "camera": "blank", "wrist_camera": "blank", "image_size": 32,
        "target_position_m": [0.55, 0.0, 0.45], "box_half_extent_m": [0.08, 0.08, 0.08],
        "reset_height_m": 0.05, "reset_dynamics_factor": 0.3,
    }  # fmt: skip
    return [
        sys.executable, "-m", "rpent_agents.robot.train", "real-robot",
        "--output-dir", str(output_dir), "--env-kwargs", json.dumps(env_kwargs),
        "--max-episodes", str(args.episodes), "--operator.no-wait-for-reset-key",
        "--learner-device", "cpu", *shlex.split(args.command_args),
    ]  # fmt: skip


def run_command(command: list[str], display: str, sim_pid: int) -> tuple[CommandWatch, float]:
    """Run the robot command with the scripted operator; its watch and wall seconds."""
    started_s = time.monotonic()
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        env=os.environ | {"DISPLAY": display, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    watch = CommandWatch(process, sim_pid)
    operate(watch, display)
    if process.wait() != 0:
        raise RuntimeError("the robot command failed:\n" + "\n".join(watch.tail))
    return watch, time.monotonic() - started_s


def figures(results: dict, watch: CommandWatch, wall_s: float, command: list[str]) -> dict:
    """The bench's JSON: the period's figures, the learner's load, the machine."""
    period_s, p99_s = results["control_period_s"], results["control_period_p99_s"]
    config = REAL_ROBOT_STAGE2
    transitions, updates = results["transitions"], results["updates"]
    after_warmup = max(transitions - config.learning_starts, 1)
    updates_per_transition = updates / max(transitions, 1)
    return {
        "control_period_s": period_s,
        "control_period_p50_s": results["control_period_p50_s"],
        "control_period_p95_s": results["control_period_p95_s"],
        "control_period_p99_s": p99_s,
        "control_period_max_s": results["control_period_max_s"],
        "control_period_p99_over_period": p99_s / period_s,
        "steps": results["control_period_samples"] + results["episodes"],
        "periods_measured": results["control_period_samples"],
        "late_steps": results["control_period_late_steps"],
        "late_factor": LATE_FACTOR,
        "updates_per_transition": updates_per_transition,
        "updates_per_transition_after_warmup": (updates - config.warmup_updates) / after_warmup,
        "learner_updates": updates,
        "learner_transitions": transitions,
        "learner_warmup_updates": config.warmup_updates,
        "goal_met": p99_s <= GOAL_P99_FACTOR * period_s
        and updates_per_transition >= GOAL_UPDATES_PER_TRANSITION,
        "episodes": results["episodes"],
        "env_steps": results["env_steps"],
        "actor_env_steps": results["actor_env_steps"],
        "robot_time_s": results["robot_time_s"],
        "wall_time_s": wall_s,
        "cpu_cores_used": {name: seconds / wall_s for name, seconds in watch.cpu_s.items()},
        "machine": machine(),
        "command": " ".join(command),
    }


def machine() -> dict:
    """Cores, CPU model, load average (1, 5, 15 min) now, torch, the host's name."""
    model = next((line.split(":", 1)[1].strip() for line in
                  Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())  # fmt: skip
    return {
        "cores": os.cpu_count(), "cpu": model, "load_average": os.getloadavg(),
        "torch": torch.__version__, "python": platform.python_version(),
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
    }  # fmt: skip


def main(args: Args) -> None:
    for tool in ("Xvfb", "xdotool"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is missing: run bash .ci/setup (installs xvfb, xdotool)")
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="robot_period_") as folder:
        work = Path(folder)
        checkpoint = tiny_franka_checkpoint(work / "checkpoint")
        command = robot_command(args, checkpoint, work / "run")
        xvfb, display = start_xvfb()
        sim = start_franky_sim(args.host, work / "franky_sim.log")
        try:
            watch, wall_s = run_command(command, display, sim.pid)
        finally:
            sim.terminate()
            sim.wait()
            xvfb.terminate()
            xvfb.wait()
        results = json.loads((work / "run" / "results.json").read_text())
    report = figures(results, watch, wall_s, command)
    report["machine"]["load_average_before"] = load_before
    output = args.output or FIGURES / f"control_period_{datetime.date.today():%Y%m%d}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    print(f"written to {output}")


if __name__ == "__main__":
    main(tyro.cli(Args))
