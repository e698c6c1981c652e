"""First contact with RPent/PegInsertion-RLT-v0: how long gym.make and drop-in resets take.

A drop-in reset runs the VLA reference until the AutoGate opens; this prints the seconds of
`gym.make` and of `reset(seed=s)` for each seed, with the chunks the reference ran.

Usage: .venv/bin/python bench/first_contact.py --seeds 7 0 1 2 3 4
"""

import json
import time
from dataclasses import dataclass, field

import gymnasium as gym
import tyro

import rpent_envs


@dataclass
class Args:
    seeds: list[int] = field(default_factory=lambda: [7])
    """Reset seeds, one drop-in reset each, in order."""


def main(args: Args) -> None:
    started_s = time.monotonic()
    env = gym.make(rpent_envs.PEG_RLT_ID)
    print(json.dumps({"gym_make_s": round(time.monotonic() - started_s, 1)}), flush=True)
    for seed in args.seeds:
        started_s = time.monotonic()
        _, info = env.reset(seed=seed)
        elapsed_s = round(time.monotonic() - started_s, 1)
        print(json.dumps({"seed": seed, "reset_s": elapsed_s, **_skipped(info)}), flush=True)
    env.close()


def _skipped(info: dict) -> dict:
    return {"skipped_chunks": info["skipped_chunks"], "skipped_reward": info["skipped_reward"]}


if __name__ == "__main__":
    main(tyro.cli(Args))
