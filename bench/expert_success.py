"""Success rate and seconds per episode of the scripted peg expert over N seeds.

Usage: .venv/bin/python bench/expert_success.py --num-seeds 100 [--obs-mode rgb]
"""

from dataclasses import dataclass
from typing import Literal

import gymnasium as gym
import numpy as np
import tyro
from expert_episode import run_expert_episode
from tqdm import tqdm

import rpent_envs
from rpent_envs.maniskill.expert import PegInsertionExpert


@dataclass
class Args:
    num_seeds: int = 100
    """Episodes, on reset seeds 0..num_seeds-1."""
    obs_mode: Literal["state", "rgb"] = "state"
    """Observation mode of the env (rgb renders both 128x128 cameras every step)."""


def main(args: Args) -> None:
    env = gym.make(rpent_envs.PEG_INSERTION_ID, obs_mode=args.obs_mode)
    expert = PegInsertionExpert(env)
    outcomes = [
        run_expert_episode(env, expert, seed=seed)
        for seed in tqdm(range(args.num_seeds), desc="expert episodes")
    ]
    successes = [outcome.success for outcome in outcomes]
    lengths = [outcome.steps for outcome in outcomes]
    seconds = [outcome.seconds for outcome in outcomes]
    env.close()
    failed = [seed for seed, ok in enumerate(successes) if not ok]
    print(
        f"obs_mode={args.obs_mode} seeds={args.num_seeds} success={np.mean(successes):.3f}"
        f" failed_seeds={failed} steps/episode mean={np.mean(lengths):.1f}"
        f" min={min(lengths)} max={max(lengths)} s/episode={np.mean(seconds):.2f}"
    )


if __name__ == "__main__":
    main(tyro.cli(Args))
