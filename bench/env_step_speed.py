"""Steps/s of one peg env: RPent's CPU checks against ManiSkill's own, in one run.

The peg task's `evaluate()` (success, grasp) and observation extras ran ManiSkill's batched
torch code at every step; on one CPU scene that code took more than half of a step. This
measures one `RPent/PegInsertionSideWideClearance-v1` env stepping random actions, in
alternating rounds: as shipped (`fast_cpu_checks`, `agent_obs_only`) and with ManiSkill's code
(both off), in state mode (physics only), state mode driven by the scripted expert (its
`privileged_state()` read at every step: what Stage 1 data collection and expert takeovers
pay) and rgb mode (both cameras rendered at every step). Prints one JSON object: median
steps/s per mode and variant, and their ratios.

    .venv/bin/python bench/env_step_speed.py --rounds 5
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass
from typing import Literal

import gymnasium as gym
import numpy as np
import torch
import tyro
from tqdm import tqdm

import rpent_envs
from rpent_envs.maniskill.expert import PegInsertionExpert


@dataclass
class Args:
    rounds: int = 5
    """Alternating rounds of each variant (the median is reported)."""
    steps: int = 200
    """Timed steps per round in state mode (rgb mode: a tenth)."""
    image_size: int = 64
    render_backend: Literal["auto", "cpu", "gpu"] = "auto"


def steps_per_s(env: gym.Env, actions: np.ndarray, expert: PegInsertionExpert | None) -> float:
    """Steps/s of `env` over `actions`, or as many expert steps (a reset restarts, untimed)."""
    elapsed_s = 0.0
    for action in actions:
        started_s = time.perf_counter()
        _, _, terminated, truncated, _ = env.step(action if expert is None else expert.act())
        elapsed_s += time.perf_counter() - started_s
        if terminated or truncated:
            env.reset()
    return len(actions) / elapsed_s


def set_variant(env: gym.Env, shipped: bool) -> None:
    """RPent's CPU checks and lean observations (shipped), or ManiSkill's code."""
    task = env.unwrapped.maniskill_env.unwrapped
    task.fast_cpu_checks = task.agent_obs_only = shipped


def main(args: Args) -> dict[str, float]:
    """Median steps/s per observation mode and variant, and shipped / ManiSkill ratios."""
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    figures: dict[str, float] = {}
    modes = (("state", args.steps), ("state_expert", args.steps), ("rgb", max(args.steps // 10, 5)))
    for mode, steps in modes:
        env = gym.make(
            rpent_envs.PEG_INSERTION_ID, obs_mode=mode.removesuffix("_expert"),
            image_size=args.image_size, render_backend=args.render_backend,
        )  # fmt: skip
        expert = PegInsertionExpert(env) if mode.endswith("_expert") else None
        env.reset(seed=0)
        rates: dict[str, list[float]] = {"rpent": [], "maniskill": []}
        for _ in tqdm(range(args.rounds), desc=mode):
            for variant in rates:
                set_variant(env, variant == "rpent")
                actions = rng.uniform(-0.3, 0.3, (steps, 8)).astype(np.float32)
                rates[variant].append(steps_per_s(env, actions, expert))
        env.close()
        for variant, values in rates.items():
            figures[f"{mode}_{variant}_steps_per_s"] = round(statistics.median(values), 1)
        ratio = figures[f"{mode}_rpent_steps_per_s"] / figures[f"{mode}_maniskill_steps_per_s"]
        figures[f"{mode}_speedup"] = round(ratio, 2)
    return figures


if __name__ == "__main__":
    print(json.dumps(main(tyro.cli(Args))))
