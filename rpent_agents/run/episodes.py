"""`rpent-run`'s episode loop: decide, log and execute chunks, in this process or in workers.

Before a chunk executes, its decision (`rpent_agents.run.policies.ChunkDecision`) goes to the
provenance channel (`recorders.provenance.label_chunk`): a tool call named after its source
(`vla` or `actor`) with the env's instruction as argument, a prediction of the deciding model
inside that call, and the label of the chunk's actions (source, call id, prediction id). A
recorder in the env's stack writes them; without one they go nowhere. An `EpisodeVideo` in the
stack (`rpent_agents.run.video`) learns the chunk's driver, which its frames are marked with.

With several workers, each process opens its own env and policy (at its first episode) and
runs the seeds it is handed; recorders of every worker may write into one run folder, since
task folders are named after their seed and ids only link records within a task.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.util
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import torch

from recorders.provenance import instruction_of, label_chunk, provenance_of
from rpent_agents.run.policies import DRIVERS, ChunkPolicy
from rpent_agents.run.video import episode_video_of
from wrappers.chunking import ChunkResult, execute_chunk
from wrappers.record import RecordTrajectory, environment_verdict

RunOpener = Callable[[], tuple[gym.Env, ChunkPolicy]]
"""Opens the env (recorded or not) and the policy of one process; picklable for workers."""


@dataclass
class EpisodeOutcome:
    """One episode of a run.

    Attributes:
        seed: Its reset seed.
        success: The env's verdict at its end (None when the env gives none).
        steps: Steps it ran.
        chunks: Chunks it ran, by driver ("vla", "actor", "expert", "human"; drivers of no
            chunk left out).
        task_dir: Its trajectory folder when recorded.
    """

    seed: int
    success: bool | None
    steps: int
    chunks: dict[str, int]
    task_dir: str | None = None

    def line(self) -> str:
        """One line for a person: seed, verdict, steps and who drove how many chunks.

        The human is named only when it drove a chunk (none of `rpent-run`'s policies is one).
        """
        verdict = {True: "success", False: "failure", None: "no verdict"}[self.success]
        drivers = ", ".join(
            f"{driver} {self.chunks.get(driver, 0)}"
            for driver in DRIVERS
            if driver != "human" or self.chunks.get(driver)
        )
        return f"seed {self.seed}: {verdict} after {self.steps} steps; chunks by {drivers}"


def run_chunk(
    env: gym.Env, policy: ChunkPolicy, observation: Any, instruction: str, horizon: int
) -> tuple[ChunkResult, str]:
    """Decide, log and execute one chunk; returns its result and its driver."""
    decision = policy.decide(observation, instruction)
    video = episode_video_of(env)
    if video is not None:
        video.driver = decision.driver
    log = provenance_of(env)
    call_id = label_chunk(log, decision.source, instruction, decision.model)
    result = execute_chunk(env, observation, decision.chunk, horizon)
    if call_id is not None:
        log.tool_result(call_id, {"steps": len(result.rewards), "done": result.done})
    policy.observe(result)
    return result, decision.driver


def run_episode(env: gym.Env, policy: ChunkPolicy, seed: int, chunk_len: int) -> EpisodeOutcome:
    """Run one episode of `policy` from `env.reset(seed=seed)` to its end."""
    observation, info = env.reset(seed=seed)
    task_dir = env.task_dir if isinstance(env, RecordTrajectory) else None
    instruction = instruction_of(env, info)
    policy.reset()
    chunks: Counter[str] = Counter()
    steps = 0
    while True:
        result, driver = run_chunk(env, policy, observation, instruction, chunk_len)
        chunks[driver] += 1
        steps += len(result.rewards)
        if result.done:
            break
        observation = result.observation
    return EpisodeOutcome(
        seed=seed,
        success=environment_verdict(result.info),
        steps=steps,
        chunks=dict(chunks),
        task_dir=str(task_dir) if task_dir is not None else None,
    )


def _episodes_here(
    open_run: RunOpener, seeds: Sequence[int], chunk_len: int
) -> Iterator[EpisodeOutcome]:
    env, policy = open_run()
    try:
        for seed in seeds:
            yield run_episode(env, policy, seed, chunk_len)
    finally:
        env.close()


_worker_run: tuple[gym.Env, ChunkPolicy] | None = None


def _worker_episode(open_run: RunOpener, seed: int, chunk_len: int) -> EpisodeOutcome:
    """One episode in a worker, which opens its env and policy at its first episode.

    Opening here rather than in a pool initializer lets an error reach the caller (a failing
    initializer makes the pool respawn workers forever).
    """
    global _worker_run
    if _worker_run is None:
        torch.set_num_threads(1)  # workers share the cores (as rpent-stage2's workers)
        _worker_run = open_run()
        # closes the env (and its recorder) when the worker exits after pool.close()
        multiprocessing.util.Finalize(None, _worker_run[0].close, exitpriority=10)
    env, policy = _worker_run
    return run_episode(env, policy, seed, chunk_len)


def _episodes_in_workers(
    open_run: RunOpener, seeds: Sequence[int], chunk_len: int, num_workers: int
) -> Iterator[EpisodeOutcome]:
    pool = multiprocessing.get_context("forkserver").Pool(num_workers)
    try:
        tasks = [pool.apply_async(_worker_episode, (open_run, seed, chunk_len)) for seed in seeds]
        for task in tasks:
            yield task.get()
        pool.close()
    except BaseException:
        pool.terminate()
        raise
    finally:
        pool.join()


def run_episodes(
    open_run: RunOpener, seeds: Sequence[int], chunk_len: int, num_workers: int = 1
) -> Iterator[EpisodeOutcome]:
    """The outcome of one episode per seed, in seed order.

    Args:
        open_run: Opens the env and the policy (in each worker with `num_workers` > 1).
        seeds: Reset seeds.
        chunk_len: Steps per chunk.
        num_workers: Processes running episodes (1: this process).
    """
    if num_workers <= 1:
        return _episodes_here(open_run, seeds, chunk_len)
    return _episodes_in_workers(open_run, seeds, chunk_len, min(num_workers, len(seeds)))
