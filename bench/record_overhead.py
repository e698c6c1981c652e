"""RecordTrajectory overhead: seconds per step of the raw peg env, recorded vs unwrapped.

Raw and recorded episodes alternate on the same env (same seeds, same actions), so both see
the same machine load; the recorded time includes flushing the last images to disk at the end
of each episode. Goal: ratio <= 1.05 (images are written by a background thread).

Usage: .venv/bin/python bench/record_overhead.py [--image-size 128] [--episodes 4] [--steps 50]
       [--png-compression 0]
"""

import tempfile
import time
from dataclasses import dataclass
from typing import Literal

import gymnasium as gym
import numpy as np
import tyro

import rpent_envs
from wrappers.record import RecordTrajectory


@dataclass
class Args:
    image_size: int = 128
    """Height and width of both cameras, in pixels."""
    episodes: int = 4
    """Episodes of each kind (raw, recorded), alternating."""
    steps: int = 50
    """Timed steps per episode."""
    image_writer_threads: int = 1
    png_compression: int = 0
    """zlib level of the recorded PNGs (RecordTrajectory's default: 0)."""
    render_backend: Literal["auto", "cpu", "gpu"] = "auto"


def timed_episode(env: gym.Env, seed: int, actions: np.ndarray, flush=None) -> float:
    env.reset(seed=seed)
    start = time.perf_counter()
    for action in actions:
        env.step(action)
    if flush is not None:
        flush()
    return time.perf_counter() - start


def main(args: Args) -> None:
    raw = gym.make(
        rpent_envs.PEG_INSERTION_ID,
        obs_mode="rgb",
        image_size=args.image_size,
        render_backend=args.render_backend,
    )
    run_dir = tempfile.TemporaryDirectory(prefix="rpent-record-bench-")
    recorded = RecordTrajectory(
        raw,
        run_dir.name,
        robot="panda",
        image_writer_threads=args.image_writer_threads,
        png_compression=args.png_compression,
    )
    writer = recorded.provenance
    rng = np.random.default_rng(0)
    raw_s, recorded_s = [], []
    timed_episode(raw, 0, rng.uniform(-0.3, 0.3, (5, 8)).astype(np.float32))  # warm-up
    for episode in range(args.episodes):
        actions = rng.uniform(-0.3, 0.3, (args.steps, 8)).astype(np.float32)
        raw_s.append(timed_episode(raw, episode, actions))
        recorded_s.append(timed_episode(recorded, episode, actions, flush=writer.close_task))
    recorded.close()
    run_dir.cleanup()
    raw_ms = 1000 * sum(raw_s) / (args.episodes * args.steps)
    recorded_ms = 1000 * sum(recorded_s) / (args.episodes * args.steps)
    print(
        f"image_size={args.image_size} steps={args.episodes}x{args.steps}"
        f" image_writer_threads={args.image_writer_threads}"
        f" png_compression={args.png_compression}: raw {raw_ms:.1f} ms/step,"
        f" recorded {recorded_ms:.1f} ms/step, ratio {recorded_ms / raw_ms:.3f}"
    )


if __name__ == "__main__":
    main(tyro.cli(Args))
