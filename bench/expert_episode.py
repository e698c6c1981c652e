"""One timed scripted-expert episode, shared by the expert benchmarks."""

import time
from dataclasses import dataclass
from typing import Any

import gymnasium as gym


@dataclass(frozen=True)
class EpisodeOutcome:
    """What one episode gave: the env's verdict, its length and its wall time with the reset."""

    success: bool
    steps: int
    seconds: float


def run_expert_episode(env: gym.Env, expert: Any, **reset_kwargs: Any) -> EpisodeOutcome:
    """Reset `env` with `reset_kwargs` and step `expert.act()` until the episode ends."""
    start = time.perf_counter()
    _, info = env.reset(**reset_kwargs)
    terminated = truncated = False
    steps = 0
    while not (terminated or truncated):
        _, _, terminated, truncated, info = env.step(expert.act())
        steps += 1
    return EpisodeOutcome(bool(info["success"]), steps, time.perf_counter() - start)
