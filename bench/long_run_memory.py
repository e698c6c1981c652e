"""Resident memory over long runs: recording, the Stage 2 replay at capacity, a large export.

One mode per measurement; each prints the resident set size (RSS, MiB) at the start (after a
warm-up), the middle and the end of its run, and the peak:
- record: `RecordTrajectory` on a cheap env (16 px image + 9-D state, 200-step episodes that
  succeed, every action labelled as a VLA prediction) for --steps steps (10^6: 5000 tasks);
- replay: the Stage 2 learner's replay buffer (default `Stage2Config`, the peg RLT dims of the
  embedded checkpoint) filled to its capacity, then --replay-rounds x capacity more
  transitions with a sampled batch every 10, then saved and loaded back;
- export: `export_flywheel` of a record tree of --tasks tasks (--task-steps each), recorded
  first; RSS is sampled every 0.1 s during the export alone (after a one-task warm-up export
  that pays LeRobot's first-use cost), start = 10% of its time.

Usage: .venv/bin/python bench/long_run_memory.py record [--steps 1000000]
       .venv/bin/python bench/long_run_memory.py replay [--replay-rounds 3]
       .venv/bin/python bench/long_run_memory.py export [--tasks 1000]
"""

import os
import resource
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import gymnasium as gym
import numpy as np
import tyro
from tqdm import tqdm

from recorders.provenance import provenance_of
from wrappers.record import RecordTrajectory

PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


@dataclass
class Args:
    mode: tyro.conf.Positional[Literal["record", "replay", "export"]]
    steps: int = 1_000_000
    """record: env steps recorded."""
    episode_steps: int = 200
    """record: steps per episode (one task each)."""
    image_size: int = 16
    replay_rounds: int = 3
    """replay: transitions added after the buffer is full, in capacities."""
    tasks: int = 1000
    """export: tasks in the record tree."""
    task_steps: int = 20
    """export: steps per task (all exported)."""
    use_videos: bool = False
    """export: MP4 videos (needs --image-size >= 32) instead of PNG frames."""
    work_dir: Path | None = None
    """Where records go (default: a temporary folder, removed at the end)."""


def resident_mib() -> float:
    return int(Path("/proc/self/statm").read_text().split()[1]) * PAGE_BYTES / 2**20


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def report(mode: str, points: dict[str, float], detail: str) -> None:
    figures = ", ".join(f"{name} {value:.1f}" for name, value in points.items())
    print(f"{mode}: RSS MiB {figures}; peak {peak_mib():.1f}; {detail}")


class CheapImageEnv(gym.Env):
    """A 16 px image and a 9-D state that change every step; success after `episode_steps`."""

    metadata = {"render_fps": 10}

    def __init__(self, image_size: int, episode_steps: int) -> None:
        self.observation_space = gym.spaces.Dict(
            {
                "image": gym.spaces.Box(0, 255, (image_size, image_size, 3), np.uint8),
                "state": gym.spaces.Box(-np.inf, np.inf, (9,), np.float32),
            }
        )
        self.action_space = gym.spaces.Box(-1.0, 1.0, (8,), np.float32)
        self.task_description = "insert the peg in the hole"
        self.episode_steps = episode_steps
        self.step_count = 0

    def observation(self) -> dict[str, np.ndarray]:
        image = np.full(self.observation_space["image"].shape, self.step_count % 256, np.uint8)
        return {"image": image, "state": np.full(9, self.step_count, np.float32)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.step_count = 0
        return self.observation(), {"success": False}

    def step(self, action):
        self.step_count += 1
        done = self.step_count >= self.episode_steps
        return self.observation(), float(done), done, False, {"success": done}


def record_episodes(run_dir: Path, args: Args, episodes: int, on_episode=None) -> None:
    """Record `episodes` VLA-labelled episodes of the cheap env into `run_dir`."""
    env = RecordTrajectory(CheapImageEnv(args.image_size, args.episode_steps), run_dir)
    log = provenance_of(env)
    action = np.zeros(8, np.float32)
    for episode in tqdm(range(episodes), desc="recording", mininterval=5):
        _, info = env.reset(seed=episode)
        call_id = log.tool_call("vla", {"instruction": env.unwrapped.task_description})
        prediction_id = log.vla_prediction(call_id, env.unwrapped.task_description, "bench")
        log.set_action_source("vla", call_id, prediction_id)
        done = False
        while not done:
            _, _, terminated, truncated, _ = env.step(action)
            done = terminated or truncated
        if on_episode is not None:
            on_episode(episode)
    env.close()


def measure_record(work: Path, args: Args) -> None:
    episodes = args.steps // args.episode_steps
    marks = {1: "start", episodes // 2: "middle", episodes: "end"}
    points: dict[str, float] = {}

    def on_episode(episode: int) -> None:
        if episode + 1 in marks:
            points[marks[episode + 1]] = resident_mib()

    started_s = time.monotonic()
    record_episodes(work / "run", args, episodes, on_episode)
    elapsed_s = time.monotonic() - started_s
    detail = f"{episodes * args.episode_steps} steps, {episodes} tasks, {elapsed_s:.0f} s"
    report("record", points, detail)


def measure_replay(args: Args) -> None:
    import torch

    from rpent_agents.stage2 import RLTDims, RLTTransition, Stage2Config, Stage2Learner

    config = Stage2Config(device="cpu")
    dims = RLTDims(z_dim=256, proprio_dim=9, ref_chunk_len=config.chunk_len, action_dim=8)
    replay = Stage2Learner(config, dims).replay
    rng = np.random.default_rng(0)

    def transition() -> RLTTransition:
        def vector(*shape):
            return rng.normal(size=shape).astype(np.float32)

        return RLTTransition(
            z_rl=vector(256), proprio=vector(9), ref_chunk=vector(config.chunk_len, 8),
            action=vector(config.chunk_len, 8), rewards=vector(config.chunk_len),
            next_z_rl=vector(256), next_proprio=vector(9),
            next_ref_chunk=vector(config.chunk_len, 8), done=False,
            intervened=np.zeros(config.chunk_len, bool),
        )  # fmt: skip

    points = {"start": resident_mib()}
    total = config.replay_capacity * (1 + args.replay_rounds)
    generator = torch.Generator().manual_seed(0)
    for added in tqdm(range(1, total + 1), desc="replay", mininterval=5):
        replay.add(transition())
        if added % 10 == 0:
            replay.sample(config.batch_size, generator)
        if added == config.replay_capacity:
            points["at capacity"] = resident_mib()
        if added == config.replay_capacity * (1 + args.replay_rounds // 2):
            points["middle"] = resident_mib()
    points["end"] = resident_mib()
    with tempfile.TemporaryDirectory() as folder:
        replay.save(Path(folder) / "replay.npz")
        replay.load(Path(folder) / "replay.npz")
    points["after save+load"] = resident_mib()
    detail = f"capacity {config.replay_capacity}, {total} transitions added (z_dim 256)"
    report("replay", points, detail)


class ResidentSampler(threading.Thread):
    """Samples RSS every `period_s` until stopped."""

    def __init__(self, period_s: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.period_s = period_s
        self.samples: list[float] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.period_s):
            self.samples.append(resident_mib())

    def at(self, fraction: float) -> float:
        return self.samples[min(len(self.samples) - 1, int(fraction * len(self.samples)))]


def measure_export(work: Path, args: Args) -> None:
    from recorders.flywheel import export_flywheel

    args.episode_steps = args.task_steps
    record_episodes(work / "run", args, args.tasks)
    first_task = sorted((work / "run" / "trajectories").iterdir())[0]
    export_flywheel(first_task, work / "warm_up", use_videos=args.use_videos)  # LeRobot's imports
    sampler = ResidentSampler()
    sampler.start()
    started_s = time.monotonic()
    exported = export_flywheel(work / "run", work / "export", use_videos=args.use_videos)
    elapsed_s = time.monotonic() - started_s
    sampler.stopped.set()
    sampler.join()
    points = {"start (10%)": sampler.at(0.1), "middle": sampler.at(0.5), "end": sampler.at(1.0)}
    detail = f"{len(exported.tasks)} tasks, {exported.frames} frames, {elapsed_s:.0f} s"
    report("export", points, detail)


def main(args: Args) -> None:
    if args.mode == "replay":
        measure_replay(args)
        return
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="rpent-memory-bench-"))
    try:
        (measure_record if args.mode == "record" else measure_export)(work, args)
    finally:
        if args.work_dir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main(tyro.cli(Args))
