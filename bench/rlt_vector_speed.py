"""Env steps/s of the vectorized RPent/PegInsertion-RLT-v0 stack, and the critical-phase
transitions its base policy produces (what the Stage 2 schedule can count on).

The workers run exactly what examples/train_rlt_peg.py runs, with the reference driving every
chunk (actor_ready False: the warm-up before the actor acts). Reported: simulator steps per
second over the timed vector steps (the workers' start excluded), and per finished episode its
length, its critical-phase chunks (`record_transition`) and its success.

    .venv/bin/python bench/rlt_vector_speed.py --num-envs 2 --vector-steps 60 --render-backend cpu
    python bench/rlt_vector_speed.py --num-envs 16 --vector-steps 200 --render-backend gpu \
        --feature-device cuda      # H200
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Literal

import numpy as np
import tyro

from rpent_agents.rlt_vector import RLTWorkerSpec, make_rlt_vector_env
from rpent_agents.stage2.transitions import info_of_env


@dataclass
class Args:
    num_envs: int = 2
    vector_steps: int = 60
    """Timed vector steps (one chunk of 10 env steps in every worker each)."""
    render_backend: Literal["auto", "cpu", "gpu"] = "auto"
    feature_device: str = "cpu"
    seed: int = 100_000


def main(args: Args) -> dict:
    spec = RLTWorkerSpec(render_backend=args.render_backend, feature_device=args.feature_device)
    started = time.monotonic()
    envs = make_rlt_vector_env(spec, args.num_envs)
    startup_s = time.monotonic() - started
    envs.set_attr("actor_ready", False)
    envs.reset(seed=[args.seed + index for index in range(args.num_envs)])
    next_seed = args.seed + args.num_envs
    zeros = np.zeros((args.num_envs, 80), np.float32)
    length = np.zeros(args.num_envs, int)
    critical = np.zeros(args.num_envs, int)
    episodes, env_steps, transitions, reset_s = [], 0, 0, 0.0
    started = time.monotonic()
    for _ in range(args.vector_steps):
        _, _, terminated, truncated, infos = envs.step(zeros)
        for index in range(args.num_envs):
            info = info_of_env(infos, index)
            length[index] += info["chunk_len"]
            critical[index] += bool(info["record_transition"])
            transitions += bool(info["record_transition"])
            env_steps += int(info["chunk_len"])
            if terminated[index] or truncated[index]:
                episodes.append((int(length[index]), int(critical[index]), bool(info["success"])))
                length[index] = critical[index] = 0
        done = terminated | truncated
        if done.any():
            reset_started = time.monotonic()
            seeds = [next_seed + offset if flag else None for offset, flag in enumerate(done)]
            next_seed += args.num_envs
            envs.reset(seed=seeds, options={"reset_mask": done})
            reset_s += time.monotonic() - reset_started
    elapsed_s = time.monotonic() - started
    envs.close()
    lengths = [episode[0] for episode in episodes]
    return {
        "num_envs": args.num_envs,
        "startup_s": round(startup_s, 1),
        "env_steps": env_steps,
        "env_steps_per_s": round(env_steps / elapsed_s, 2),
        "reset_share": round(reset_s / elapsed_s, 3),
        "episodes": len(episodes),
        "episode_len_mean": float(np.mean(lengths)) if lengths else None,
        "critical_chunks_per_episode": [episode[1] for episode in episodes],
        "success": [episode[2] for episode in episodes],
        "transitions_per_1k_env_steps": round(1000 * transitions / max(env_steps, 1), 2),
    }


if __name__ == "__main__":
    print(json.dumps(main(tyro.cli(Args))))
