"""Success rate of a policy on fixed reset seeds, measured on a training vector env.

The workers of `rpent_agents.rollout.vector.make_rlt_vector_env` evaluate between training
phases: each worker runs the next held-out seed when its episode ends, until every seed has
run once. Each worker is sent, with its chunk, the seed it starts next if the chunk ends its
episode, so a worker resets itself at once and no worker waits for another's reset (which
rebuilds the scene: ~0.4 s). Worker processes step asynchronously (`ready_envs`, on by
default): a worker that answered gets its next chunk at once, never waiting for the slowest
worker of a step, and a worker left without a seed stops. Vector envs that step every env
together (Ray actors) step in lockstep, their envs left without a seed running throwaway
episodes meanwhile. Every evaluated episode rebuilds its scene from its seed, so a seed gives
the same peg, box and poses on whichever worker, whenever it runs, and whether or not the
workers keep their scenes across training resets: the per-seed outcomes do not depend on how
the workers were stepped. The expert takeover is off; `actor_ready=False` measures the base
policy (reference chunks only), `actor_ready=True` the actor's chunks where the gate hands it
control (the VLA reference elsewhere). An optional observer sees every chunk of every
evaluated episode, in order (`rpent_agents.stage2.eval_rlt` builds its traces so).

Example:
    >>> result = evaluate_on_seeds(envs, range(100), act=lambda obs: learner.act(obs, True),
    ...                            actor_ready=True)
    >>> result.success_rate, result.median_success_len, result.env_steps
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from dataclasses import dataclass
from typing import Any

import numpy as np
from tqdm import tqdm

from rpent_agents.rollout.vector import FeaturizedVectorEnv, discarded_envs, reset_envs
from rpent_agents.rollout.worker import MAX_SEED, NO_RESET_SEED, WorkerMode
from rpent_agents.stage2.results import EvalPoint, TestEvaluation, wilson_interval
from rpent_agents.stage2.rollout_stats import EpisodeStats
from rpent_agents.stage2.transitions import info_of_env

THROWAWAY_SEED = MAX_SEED
"""Seed of the episodes an env runs, unscored, once no held-out seed is left for it."""
ChunkActFn = Callable[[Mapping[str, np.ndarray]], np.ndarray]
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

    def point(
        self, env_steps: int, updates: int, wall_time_s: float, actor_ready: bool = True
    ) -> EvalPoint:
        """This evaluation as a point of a run's curve, after the given training counts."""
        return EvalPoint(
            actor_ready=actor_ready,
            env_steps=env_steps,
            success_rate=self.success_rate,
            updates=updates,
            wall_time_s=wall_time_s,
            successful_seeds=self.successful_seeds,
            median_success_len=self.median_success_len,
            critical_phase_median_steps=self.critical_phase_median_steps,
        )


def evaluation_on_test_seeds(
    seeds: Sequence[int], base: EvalResult, actor: EvalResult, actor_ready: bool
) -> TestEvaluation:
    """The base's and the actor's evaluations on the test `seeds`, with Wilson intervals."""
    return TestEvaluation(
        seeds=list(seeds),
        base_success_rate=base.success_rate,
        base_success_ci95=wilson_interval(len(base.successful_seeds), len(seeds)),
        base_successful_seeds=base.successful_seeds,
        base_critical_phase_median_steps=base.critical_phase_median_steps,
        success_rate=actor.success_rate,
        success_ci95=wilson_interval(len(actor.successful_seeds), len(seeds)),
        successful_seeds=actor.successful_seeds,
        critical_phase_median_steps=actor.critical_phase_median_steps,
        actor_ready=actor_ready,
    )


def evaluate_on_seeds(
    envs: FeaturizedVectorEnv,
    seeds: Iterable[int],
    act: ChunkActFn,
    actor_ready: bool,
    progress_label: str = "eval",
    observer: ChunkObserver | None = None,
    ready_envs: int = 1,
) -> EvalResult:
    """Run one episode per seed on `envs` (an `RLTWorker` vector env) and count successes.

    Args:
        envs: The vector env; its episodes in progress are abandoned, and the caller resets
            every env afterwards (no worker is left busy).
        seeds: Reset seeds, one episode each.
        act: The actor's chunks (used where the actor drives).
        actor_ready: Whether the actor drives the critical phase (False: the base policy).
        progress_label: Label of the progress bar.
        observer: Called for every chunk of every evaluated episode (see `ChunkObserver`).
        ready_envs: Asynchronous evaluation, where `envs.can_step_ready_envs` (worker
            processes): each step waits until this many busy workers answered (all of them
            when fewer are busy), takes every other answer already there and gives the
            workers that answered their next chunk at once. 1 keeps the workers busiest (the
            featurizer then runs on the few observations that came in together). 0:
            synchronous, every worker every step, as envs that cannot step asynchronously
            (Ray actors) always do. The per-seed outcomes are the same either way.

    Returns:
        Per-seed successes and lengths, simulator steps and wall time of the evaluation.

    Raises:
        ValueError: When the seeds are empty or repeat one, or `ready_envs` is negative.
    """
    started_s = time.monotonic()
    pending = deque(seeds)
    if not pending or len(set(pending)) != len(pending):
        raise ValueError(f"seeds must be distinct and not empty, got {list(pending)}")
    if ready_envs < 0:
        raise ValueError(f"ready_envs must be >= 0 (0: synchronous), got {ready_envs}")
    envs.set_worker_mode(WorkerMode.evaluation(actor_ready))
    with tqdm(total=len(pending), desc=progress_label, leave=False) as progress:
        episodes = SeedEpisodes(envs.num_envs, observer, progress)
        if ready_envs and envs.can_step_ready_envs:
            with envs.full_batches():
                _run_as_workers_answer(envs, pending, act, episodes, ready_envs)
        else:
            _run_in_lockstep(envs, pending, act, episodes)
    return episodes.result(time.monotonic() - started_s)


class SeedEpisodes:
    """The evaluated episodes of one evaluation, fed chunk by chunk as the workers answer."""

    def __init__(self, num_envs: int, observer: ChunkObserver | None, progress: tqdm) -> None:
        """Count the episodes of `num_envs` envs; `observer` sees every chunk."""
        self.stats = EpisodeStats(num_envs, prefix="eval")
        self.observer = observer
        self.progress = progress
        self.success_by_seed: dict[int, bool] = {}
        self.length_by_seed: dict[int, int] = {}
        self.critical_steps_by_seed: dict[int, int] = {}
        self.env_steps = 0

    @property
    def finished(self) -> int:
        """Evaluated episodes finished so far."""
        return len(self.success_by_seed)

    def record(self, env_index: int, seed: int, info: Mapping[str, Any], done: bool) -> None:
        """Add one chunk of env `env_index`, which runs the episode of `seed`."""
        self.env_steps += int(info["chunk_len"])
        self.stats.record(env_index, info, done)
        if self.observer is not None:
            self.observer(seed, info, done)
        if done:
            episode = self.stats.finished[-1]
            self.success_by_seed[seed], self.length_by_seed[seed] = episode[:2]
            self.critical_steps_by_seed[seed] = episode.critical_steps
            self.progress.update()

    def result(self, wall_time_s: float) -> EvalResult:
        """The outcome of the episodes finished so far."""
        return EvalResult(
            self.success_by_seed, self.length_by_seed, self.critical_steps_by_seed,
            self.env_steps, wall_time_s, self.stats.scalars(),
        )  # fmt: skip


def _run_in_lockstep(
    envs: FeaturizedVectorEnv, pending: deque[int], act: ChunkActFn, episodes: SeedEpisodes
) -> None:
    """Step every env each time until every pending seed's episode finished.

    An env left without a seed runs throwaway episodes (`THROWAWAY_SEED`) meanwhile.
    """
    num_envs, num_seeds = envs.num_envs, len(pending)
    seed_of_env = [pending.popleft() if pending else None for _ in range(num_envs)]
    reset_seeds = [THROWAWAY_SEED if seed is None else seed for seed in seed_of_env]
    obs, _ = reset_envs(envs, np.ones(num_envs, bool), reset_seeds, rebuild_scenes=True)
    while episodes.finished < num_seeds:
        offers = _seed_offers(pending, num_envs, filler=THROWAWAY_SEED)
        obs, _, terminated, truncated, infos = envs.step(act(obs), offers)
        done = terminated | truncated
        discarded = discarded_envs(infos, num_envs)
        for env_index, seed in enumerate(seed_of_env):
            if seed is None:
                continue
            if discarded[env_index]:  # lost with its worker: the seed runs again
                episodes.stats.abandon(env_index)
                continue
            info = info_of_env(infos, env_index)
            episodes.record(env_index, seed, info, bool(done[env_index]))
        for env_index in np.flatnonzero(done & ~discarded):
            seed_of_env[env_index] = _started_seed(int(offers[env_index]), pending)


def _run_as_workers_answer(
    envs: FeaturizedVectorEnv,
    pending: deque[int],
    act: ChunkActFn,
    episodes: SeedEpisodes,
    ready_envs: int,
) -> None:
    """Step each worker as soon as it answered, until every pending seed's episode finished.

    Only workers running a held-out episode get chunks. Each is offered, with its chunk, a
    pending seed that no busy worker holds, so a seed starts once; a worker offered none
    stops when its episode ends. A worker's rows of `obs` change only when it answers. The
    feature model and `act` see batches of every env's row, as in a synchronous step (float
    rounding depends on the batch size), so each episode runs as it would there.
    """
    num_envs, num_seeds = envs.num_envs, len(pending)
    seed_of_env = [pending.popleft() if pending else None for _ in range(num_envs)]
    running = np.array([seed is not None for seed in seed_of_env])
    first_seeds = [seed for seed in seed_of_env if seed is not None]
    obs, _ = reset_envs(envs, running, first_seeds, rebuild_scenes=True)
    offers = np.full(num_envs, NO_RESET_SEED, np.int64)
    actions = np.zeros(envs.action_space.shape, np.float32)
    while episodes.finished < num_seeds:
        busy = envs.busy
        running = np.array([seed is not None for seed in seed_of_env])
        idle = np.flatnonzero(running & ~busy)
        if len(idle):
            offers[idle] = _seed_offers(pending, len(idle), held=set(offers[busy].tolist()))
            actions[idle] = act(obs)[idle]  # every row: the batch of a synchronous step
            envs.step_async(actions, offers, env_indices=idle)
        obs, _, terminated, truncated, infos = envs.step_wait(min(ready_envs, int(envs.busy.sum())))
        for env_index in np.flatnonzero(envs.last_ready):
            done = bool(terminated[env_index] or truncated[env_index])
            episodes.record(env_index, seed_of_env[env_index], info_of_env(infos, env_index), done)
            if done:
                seed_of_env[env_index] = _started_seed(int(offers[env_index]), pending)


def _seed_offers(
    pending: deque[int], count: int, filler: int = NO_RESET_SEED, held: Set[int] = frozenset()
) -> list[int]:
    """`count` seeds to offer: distinct pending ones that no busy worker holds, then `filler`.

    A worker starts its offered seed if its chunk ends its episode (`RLTWorker`).
    """
    offers = [seed for seed in pending if seed not in held][:count]
    return offers + [filler] * (count - len(offers))


def _started_seed(offer: int, pending: deque[int]) -> int | None:
    """The held-out seed a worker started when its episode ended (taken off `pending`).

    None when it started none (`NO_RESET_SEED`) or a throwaway episode (`THROWAWAY_SEED`).
    """
    if offer in (NO_RESET_SEED, THROWAWAY_SEED):
        return None
    pending.remove(offer)
    return offer
