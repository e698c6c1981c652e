"""Success rate of a policy on fixed reset seeds, measured on a training vector env.

The workers of `rpent_agents.rollout.vector.make_rlt_vector_env` evaluate between training
phases: each env runs the next held-out seed when its episode ends, until every seed has run
once (envs left without a seed run throwaway episodes meanwhile). The expert takeover is off;
`actor_ready=False` measures the base policy (reference chunks only), `actor_ready=True` the
actor's chunks in the critical phase (the VLA reference outside it). An optional observer sees
every chunk of every evaluated episode (`rpent_agents.stage2.diagnostics` builds its traces so).

Example:
    >>> result = evaluate_on_seeds(envs, range(100), act=lambda obs: learner.act(obs, True),
    ...                            actor_ready=True)
    >>> result.success_rate, result.median_success_len, result.env_steps
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from tqdm import tqdm

from rpent_agents.rollout.vector import discarded_envs, reset_envs
from rpent_agents.stage2.rollout_stats import EpisodeStats
from rpent_agents.stage2.transitions import info_of_env

ChunkPolicy = Callable[[Mapping[str, np.ndarray]], np.ndarray]
"""Batched RLT observations -> flat action chunks (N, H*A)."""
ChunkObserver = Callable[[int, Mapping[str, Any], bool], None]
"""Called as (seed, chunk info, episode done) for every chunk of an evaluated episode."""


@dataclass
class EvalResult:
    """Outcome of one evaluation.

    Attributes:
        success_by_seed: Whether the episode of each seed succeeded (at any step).
        length_by_seed: Simulator steps of the episode of each seed.
        env_steps: Simulator steps of the evaluated episodes.
        wall_time_s: Wall-clock time of the whole evaluation.
        scalars: `eval/success_once` and `eval/episode_len` (means over the episodes).
    """

    success_by_seed: dict[int, bool]
    length_by_seed: dict[int, int]
    env_steps: int
    wall_time_s: float
    scalars: dict[str, float]

    @property
    def success_rate(self) -> float:
        """Fraction of the seeds whose episode succeeded."""
        return float(np.mean(list(self.success_by_seed.values())))

    @property
    def successful_seeds(self) -> list[int]:
        """The seeds whose episode succeeded, in ascending order."""
        return sorted(seed for seed, success in self.success_by_seed.items() if success)

    @property
    def median_success_len(self) -> float | None:
        """Median length (simulator steps) of the successful episodes; None without any."""
        lengths = [self.length_by_seed[seed] for seed in self.successful_seeds]
        return float(np.median(lengths)) if lengths else None


def evaluate_on_seeds(
    envs: gym.vector.VectorEnv,
    seeds: Iterable[int],
    act: ChunkPolicy,
    actor_ready: bool,
    progress_label: str = "eval",
    observer: ChunkObserver | None = None,
) -> EvalResult:
    """Run one episode per seed on `envs` (an `RLTWorker` vector env) and count successes.

    Args:
        envs: The vector env; its episodes in progress are abandoned, and the caller resets
            every env afterwards.
        seeds: Reset seeds, one episode each.
        act: The actor's chunks (used where the actor drives).
        actor_ready: Whether the actor drives the critical phase (False: the base policy).
        progress_label: Label of the progress bar.
        observer: Called for every chunk of every evaluated episode (see `ChunkObserver`).

    Returns:
        Per-seed successes and lengths, simulator steps and wall time of the evaluation.
    """
    started_s = time.monotonic()
    pending = deque(seeds)
    num_seeds = len(pending)
    if num_seeds == 0 or len(set(pending)) != num_seeds:
        raise ValueError(f"seeds must be distinct and not empty, got {list(pending)}")
    envs.set_attr("actor_ready", actor_ready)
    envs.set_attr("expert_takeover_enabled", False)
    seed_of_env: list[int | None] = [
        pending.popleft() if pending else None for _ in range(envs.num_envs)
    ]
    obs, _ = reset_envs(envs, np.ones(envs.num_envs, bool), seed_of_env)
    stats = EpisodeStats(envs.num_envs, prefix="eval")
    success_by_seed: dict[int, bool] = {}
    length_by_seed: dict[int, int] = {}
    env_steps = 0
    with tqdm(total=num_seeds, desc=progress_label, leave=False) as progress:
        while len(success_by_seed) < num_seeds:
            obs, _, terminated, truncated, infos = envs.step(act(obs))
            done = terminated | truncated
            discarded = discarded_envs(infos, envs.num_envs)
            for env_index, seed in enumerate(seed_of_env):
                if seed is None:
                    continue
                if discarded[env_index]:  # lost with its worker: the seed runs again
                    stats.abandon(env_index)
                    continue
                info = info_of_env(infos, env_index)
                env_steps += int(info["chunk_len"])
                stats.record(env_index, info, bool(done[env_index]))
                if observer is not None:
                    observer(seed, info, bool(done[env_index]))
                if done[env_index]:
                    success_by_seed[seed], length_by_seed[seed] = stats.finished[-1]
                    progress.update()
            if done.any():
                obs = _start_next_seeds(envs, done, seed_of_env, pending, stats)
    return EvalResult(
        success_by_seed, length_by_seed, env_steps, time.monotonic() - started_s, stats.scalars()
    )


def _start_next_seeds(
    envs: gym.vector.VectorEnv,
    done: np.ndarray,
    seed_of_env: list[int | None],
    pending: deque[int],
    stats: EpisodeStats,
) -> dict[str, np.ndarray]:
    """Reset the finished envs with the next pending seeds (None: a throwaway episode)."""
    new_seeds = []
    for env_index in np.flatnonzero(done):
        seed_of_env[env_index] = pending.popleft() if pending else None
        new_seeds.append(seed_of_env[env_index])
    obs, infos = reset_envs(envs, done, new_seeds)
    for env_index in np.flatnonzero(discarded_envs(infos, envs.num_envs)):
        stats.abandon(env_index)  # an unfinished episode lost with its worker: it runs again
    return obs
