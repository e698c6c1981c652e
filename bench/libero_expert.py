"""Success rate and steps of the scripted LIBERO expert from the benchmark's initial states.

Every task runs from each of its initial states (50 in the standard suites) once, with the
suite's own time limit (300 steps for libero_goal). State observations only: the expert reads
the simulator, and rendering would only cost time.

Usage: .venv/bin/python bench/libero_expert.py --suite libero_goal --task-ids 1 6 8
"""

from dataclasses import dataclass, field

import gymnasium as gym
import numpy as np
import tyro
from expert_episode import run_expert_episode
from tqdm import tqdm

import rpent_envs
from rpent_envs.libero.expert import LiberoExpert


@dataclass
class Args:
    suite: str = "libero_goal"
    """Suite name (standard or LIBERO-PRO)."""
    task_ids: list[int] = field(default_factory=lambda: [1, 6, 8])
    """Tasks of the suite to run (pick-and-place goals only)."""
    num_init_states: int | None = None
    """Initial states 0..N-1 per task; None runs all of them."""


def run_task(suite: str, task_id: int, num_init_states: int | None) -> dict:
    env = gym.make(rpent_envs.LIBERO_ID, suite=suite, task_id=task_id, obs_mode="state")
    expert = LiberoExpert(env)
    init_state_ids = range(len(env.unwrapped.task.init_states))[:num_init_states]
    outcomes = [
        run_expert_episode(env, expert, seed=index, options={"init_state_id": index})
        for index in tqdm(init_state_ids, desc=f"{suite} task {task_id}")
    ]
    successes = [outcome.success for outcome in outcomes]
    lengths = [outcome.steps for outcome in outcomes]
    seconds = [outcome.seconds for outcome in outcomes]
    instruction = env.unwrapped.task_description
    env.close()
    return {
        "instruction": instruction,
        "success": float(np.mean(successes)),
        "failed": [i for i, ok in zip(init_state_ids, successes, strict=True) if not ok],
        "steps_mean": float(np.mean(lengths)),
        "steps_max": int(max(lengths)),
        "s_per_episode": float(np.mean(seconds)),
        "episodes": len(successes),
    }


def main(args: Args) -> None:
    for task_id in args.task_ids:
        result = run_task(args.suite, task_id, args.num_init_states)
        print(
            f"{args.suite} task {task_id} ({result['instruction']!r}): "
            f"success={result['success']:.3f} over {result['episodes']} init states, "
            f"failed={result['failed']} steps mean={result['steps_mean']:.0f} "
            f"max={result['steps_max']} s/episode={result['s_per_episode']:.1f}",
            flush=True,
        )


if __name__ == "__main__":
    main(tyro.cli(Args))
