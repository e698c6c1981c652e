"""How well `RPent/Franka-v0` holds its control period, and what its own logic costs per step.

1. The env logic alone (in-memory backend, period 0): seconds per step for the target
   computation, safety box and observation.
2. Against franky-sim (MuJoCo FR3, started here on loopback): step-to-step period at the
   configured rate over random actions, late steps, and the reset time.

Usage: .venv/bin/python bench/franka_control_loop.py --num-steps 200 [--period-s 0.1]
"""

import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import numpy as np
import tyro
from tqdm import tqdm

import rpent_envs


@dataclass
class Args:
    num_steps: int = 200
    """Steps timed per part."""
    period_s: float = 0.1
    """Control period against franky-sim."""
    host: str = "127.0.0.2"
    """Loopback address franky-sim serves."""


def random_actions(num_steps: int, seed: int = 0) -> np.ndarray:
    """Small random motions that stay inside the box, gripper toggling now and then."""
    rng = np.random.default_rng(seed)
    actions = rng.uniform(-0.3, 0.3, (num_steps, 7)).astype(np.float32)
    actions[:, 6] = np.where(rng.uniform(size=num_steps) < 0.9, 1.0, -1.0)
    return actions


def time_steps(env: gym.Env, actions: np.ndarray, desc: str) -> tuple[list[float], list[float]]:
    """Seconds between consecutive step returns, and each step's reported overrun."""
    intervals_s, overruns_s = [], []
    last_s = time.perf_counter()
    for action in tqdm(actions, desc=desc):
        *_, info = env.step(action)
        now_s = time.perf_counter()
        intervals_s.append(now_s - last_s)
        overruns_s.append(info["period_overrun_s"])
        last_s = now_s
    return intervals_s, overruns_s


def start_sim(host: str) -> subprocess.Popen:
    command = [str(Path(sys.executable).with_name("franky-sim")), "-s", "mujoco"]
    sim = subprocess.Popen(
        [*command, "--hostname", host],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    for line in sim.stdout:
        if "Connect to the server" in line:
            return sim
    raise RuntimeError("franky-sim did not start")


def summary_ms(values_s: list[float]) -> str:
    values_ms = np.array(values_s) * 1e3
    return (
        f"mean {values_ms.mean():.1f} ms, median {statistics.median(values_ms):.1f}, "
        f"p95 {np.percentile(values_ms, 95):.1f}, max {values_ms.max():.1f}"
    )


def main(args: Args) -> None:
    actions = random_actions(args.num_steps)
    env = gym.make(rpent_envs.FRANKA_ID, backend="memory", period_s=0.0)
    env.reset(seed=0)
    logic_s, _ = time_steps(env, actions, "in-memory")
    print(f"env logic per step (in-memory backend): {summary_ms(logic_s)}")

    sim = start_sim(args.host)
    try:
        env = gym.make(
            rpent_envs.FRANKA_ID,
            host=args.host,
            target_position_m=(0.55, 0.0, 0.45),
            period_s=args.period_s,
        )
        started_s = time.perf_counter()
        env.reset(seed=0)
        reset_s = time.perf_counter() - started_s
        intervals_s, overruns_s = time_steps(env, actions, "franky-sim")
        env.close()
    finally:
        sim.terminate()
        sim.wait()
    late = sum(overrun > 0.0 for overrun in overruns_s)
    print(f"franky-sim first reset (2 cm, reset_dynamics_factor 0.1): {reset_s:.2f} s")
    target_ms = args.period_s * 1e3
    print(f"franky-sim step period (target {target_ms:.0f} ms): {summary_ms(intervals_s)}")
    print(f"late steps: {late}/{len(overruns_s)}, worst overrun {max(overruns_s) * 1e3:.1f} ms")


if __name__ == "__main__":
    main(tyro.cli(Args))
