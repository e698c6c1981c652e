"""Seconds a Stage 2 train step holds the training loop: its launch, and its end on the device.

The loop calls `Stage2Learner.start_train_step` and reads the scalars later
(`rpent_agents.stage2.trainer.Stage2Run.collect_and_learn`): on a GPU the launch (the CPU
queueing the captured updates) is what the loop waits for; the updates' device time overlaps
its wait for the workers. Measured for the sample-efficient preset's learner at the peg
task's sizes (RL token 256, chunks of 10 x 8), with its 10-head critic ensemble and with the
twin critic, `--updates` updates per train step (the preset's steady state: ~18).

Needs torch and numpy only (argparse, so nothing else travels to a GPU machine):
    PYTHONPATH=. python3 bench/train_step_launch.py --device cuda
    .venv/bin/python bench/train_step_launch.py --device cpu --steps 5
"""

import argparse
import json
import statistics
import time

import numpy as np
import torch
from learner_speed import random_transition

from rpent_agents.stage2 import RLTDims, Stage2Config, Stage2Learner

CRITICS = {
    "ensemble": {"num_q_heads": 10, "target_q_heads": 2, "actor_q": "mean"},
    "twin": {"num_q_heads": 2, "target_q_heads": None, "actor_q": "first"},
}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda or cpu")
    parser.add_argument("--updates", type=int, default=18, help="updates per train step")
    parser.add_argument("--steps", type=int, default=50, help="timed train steps")
    parser.add_argument("--transitions", type=int, default=5000, help="in the replay buffer")
    return parser.parse_args()


def train_step_ms(args: argparse.Namespace, critic: dict) -> dict[str, float]:
    """Median launch and launch-to-read milliseconds of a train step with `critic`'s heads."""
    dims = RLTDims(z_dim=256, proprio_dim=9, ref_chunk_len=10, action_dim=8)
    config = Stage2Config.sample_efficient(
        **critic, device=args.device, update_schedule=False,
        update_epoch=args.updates, learning_starts=0, weight_warmup_updates=0,
    )  # fmt: skip
    learner = Stage2Learner(config, dims)
    rng = np.random.default_rng(0)
    transitions = [random_transition(rng, dims, config.chunk_len) for _ in range(args.transitions)]
    for item in transitions[::3]:  # a third expert-driven: the batch's intervention share
        item.intervened[:] = True
    learner.add_transitions(transitions)
    for _ in range(3):  # captures both update kinds
        learner.train_step()
    launch, whole = [], []
    for _ in range(args.steps):
        started = time.perf_counter()
        scalars = learner.start_train_step()
        launched = time.perf_counter()
        scalars.read()
        launch.append(launched - started)
        whole.append(time.perf_counter() - started)
    return {
        "launch_ms": round(1000 * statistics.median(launch), 2),
        "launch_to_read_ms": round(1000 * statistics.median(whole), 2),
    }


def main() -> None:
    args = parse_args()
    figures = {"device": args.device, "updates_per_train_step": args.updates}
    for name, critic in CRITICS.items():
        figures[name] = train_step_ms(args, critic)
    if args.device == "cuda":
        figures["gpu"] = torch.cuda.get_device_name()
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
