"""Success rate of a policy on fixed reset seeds, measured on a training vector env.

The workers of `rpent_agents.rollout.vector.make_rlt_vector_env` evaluate between training
phases: each env runs the next held-out seed when its episode ends, until every seed has run
once (envs left without a seed run throwaway episodes meanwhile). Each env is sent, with its
chunk, the seed it starts next if the chunk ends its episode, so a worker resets itself at
once and no env waits for another's reset (which rebuilds the scene: ~0.4 s). Every
evaluated episode rebuilds its scene from its seed, so a seed gives the same peg, box and
poses whether or not the workers keep their scenes across training resets. The expert
takeover is off; `actor_ready=False` measures the base policy (reference chunks only),
`actor_ready=True` the actor's chunks where the gate hands it control (the VLA reference
elsewhere). An optional observer sees every chunk of every evaluated episode
(`rpent_agents.stage2.diagnostics` builds its traces so).

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

from rpent_agents.rollout.vector import MAX_SEED, discarded_envs, reset_envs
from rpent_agents.stage2.rollout_stats import EpisodeStats
from rpent_agents.stage2.transitions import info_of_env

THROWAWAY_SEED = MAX_SEED
"""Seed of the episodes an env runs, unscored, once no held-out seed is left for it."""
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
        critical_steps_by_seed: Simulator steps of each seed's episode inside the critical
            phase (the chunks decided after the reference `AutoGate` opened).
        env_steps: Simulator steps of the evaluated episodes.
        wall_time_s: Wall-clock time of the whole evaluation.
        scalars: `eval/success_once` and `eval/episode_len` (means over the episodes).
    """

    success_by_seed: dict[int, bool]
    length_by_seed: dict[int, int]
    critical_steps_by_seed: dict[int, int]
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

    @property
    def critical_phase_median_steps(self) -> float | None:
        """Median critical-phase steps of the successful episodes that entered the phase.

        None without any. This is where a critical-phase actor acts: the RLT recipe expects
        it to get faster there than the base policy.
        """
        steps = [self.critical_steps_by_seed[seed] for seed in self.successful_seeds]
        steps = [count for count in steps if count > 0]
        return float(np.median(steps)) if steps else None


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
    envs.set_attr("rebuild_scenes", True)
    seed_of_env: list[int | None] = [
        pending.popleft() if pending else None for _ in range(envs.num_envs)
    ]
    reset_seeds = [THROWAWAY_SEED if seed is None else seed for seed in seed_of_env]
    obs, _ = reset_envs(envs, np.ones(envs.num_envs, bool), reset_seeds, rebuild_scenes=True)
    stats = EpisodeStats(envs.num_envs, prefix="eval")
    success_by_seed: dict[int, bool] = {}
    length_by_seed: dict[int, int] = {}
    critical_steps_by_seed: dict[int, int] = {}
    env_steps = 0
    with tqdm(total=num_seeds, desc=progress_label, leave=False) as progress:
        while len(success_by_seed) < num_seeds:
            next_seeds = _next_seed_offers(pending, envs.num_envs)
            obs, _, terminated, truncated, infos = envs.step(act(obs), next_seeds)
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
                    episode = stats.finished[-1]
                    success_by_seed[seed], length_by_seed[seed] = episode[:2]
                    critical_steps_by_seed[seed] = episode.critical_steps
                    progress.update()
            _take_next_seeds(done & ~discarded, next_seeds, seed_of_env, pending)
    wall_time_s = time.monotonic() - started_s
    return EvalResult(
        success_by_seed, length_by_seed, critical_steps_by_seed, env_steps, wall_time_s,
        stats.scalars(),
    )  # fmt: skip


def _next_seed_offers(pending: deque[int], num_envs: int) -> list[int]:
    """One distinct seed per env, started if its chunk ends its episode.

    The pending seeds in order, then throwaway episodes (`THROWAWAY_SEED`) once none is left.
    """
    offers = list(pending)[:num_envs]
    return offers + [THROWAWAY_SEED] * (num_envs - len(offers))


def _take_next_seeds(
    ended: np.ndarray, offers: list[int], seed_of_env: list[int | None], pending: deque[int]
) -> None:
    """The envs whose episode ended started their offered seed: take those off `pending`."""
    for env_index in np.flatnonzero(ended):
        seed = offers[env_index]
        seed_of_env[env_index] = None if seed == THROWAWAY_SEED else seed
        if seed != THROWAWAY_SEED:
            pending.remove(seed)
