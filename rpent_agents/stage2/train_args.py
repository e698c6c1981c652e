"""The arguments of `rpent-stage2` and its presets: `reference`, `sample-efficient`, `robot-hour`.

`Stage2TrainArgs()` is the `reference` preset (DESIGN.md §4 exactly);
`Stage2TrainArgs.sample_efficient()` scales it to the peg task's 300k env-step budget. The
command (`rpent_agents.stage2.train`) reads a preset from `PRESETS`, then any flag overrides
it. This module holds configs only: it builds no env and no learner.

Example:
    >>> args = Stage2TrainArgs.sample_efficient(total_env_steps=20_000)
    >>> args.ready_envs, args.stage2.gamma, args.env.missed_grasp_chunks
    (8, 0.97, 4)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import tyro

from rpent_agents.rollout.ray_config import RayRolloutConfig
from rpent_agents.rollout.rlt_stack import PegRLTConfig
from rpent_agents.stage2.config import Stage2Config


@dataclass
class Stage2TrainArgs:
    """Stage 2 training on the peg RLT stack (RPent/PegInsertion-RLT-v0, vectorized)."""

    output_dir: Path = Path("runs/rlt_peg")
    """Folder of results.json, success_curve.png, tensorboard/ and the checkpoint run/."""
    resume: bool = False
    """Continue the run in output_dir (its learner, replay, counters, base success and curve;
    its saved Stage 2 config wins over --stage2.* flags)."""
    total_env_steps: int = 300_000
    """Training simulator steps (every env, every driver) after which the run stops."""
    max_minutes: float = 0.0
    """Wall-clock budget of this command in minutes (0: none); the run stops early enough to
    finish its last evaluation and save."""
    rollout: Literal["vector", "ray"] = "vector"
    """Where the envs run: "vector", --num-envs processes here; "ray", --num-workers Ray actors
    of --envs-per-worker envs (docs/ray.md)."""
    num_envs: int = 16
    """Worker processes of --rollout vector, one peg env each."""
    ray: tyro.conf.OmitArgPrefixes[RayRolloutConfig] = field(default_factory=RayRolloutConfig)
    """The workers of --rollout ray."""
    env: PegRLTConfig = field(default_factory=PegRLTConfig)
    """The peg RLT stack (checkpoint, devices, render backend, gate, expert takeover)."""
    eval_seed: int = 0
    """First held-out reset seed (the Stage 1 demonstrations use 1000 on)."""
    num_eval_episodes: int = 100
    """Held-out seeds eval_seed, eval_seed + 1, ...: one episode each per evaluation."""
    test_seed: int | None = None
    """First of the fixed test seeds (e.g. 50000; None: no test evaluation): at the end of a
    run that reached total_env_steps, the base policy and the final actor run one episode on
    each of test_seed .. test_seed + num_test_episodes - 1, the run's final figures (with
    Wilson 95% intervals in results.json). Choose presets and runs on the held-out seeds;
    report on these, never tune on them."""
    num_test_episodes: int = 256
    """How many test seeds (with --test-seed)."""
    eval_every_env_steps: int = 50_000
    """Training env steps between evaluations of the actor (and at the end)."""
    save_every_env_steps: int = 20_000
    """Training env steps between checkpoints (also after each evaluation)."""
    log_every_iterations: int = 10
    """Vector steps between rollout scalars (learner scalars: every step that updated)."""
    train_seed: int = 100_000
    """Seed of the first training episode; episode k uses train_seed + k."""
    worker_torch_threads: int = 1
    """CPU threads of torch in each worker."""
    ready_envs: int = 0
    """Asynchronous stepping (--rollout vector): the loop goes on as soon as this many workers
    have finished their chunk (all the busy ones when fewer are busy), gives those their next
    chunk at once and lets the others simulate on, instead of waiting for the slowest of all;
    0: synchronous (every worker each step, reproducible to the bit). Which worker finishes
    first depends on timing, so an asynchronous run is not reproducible to the bit. Ray's
    workers (--rollout ray) always step together."""
    eval_ready_envs: int = 1
    """Asynchronous evaluation (--rollout vector): an evaluation step goes on once this many
    workers have finished their chunk, and a worker whose episode ends starts its next held-out
    seed at once; 0: synchronous. A seed gives the same episode either way."""
    stage2: Stage2Config = field(default_factory=Stage2Config)
    """Stage 2 hyperparameters (DESIGN.md §4 defaults)."""

    def check(self) -> None:
        """Refuse arguments that cannot run together (before any worker starts).

        Raises:
            ValueError: When the training seeds overlap the held-out seeds, or a ready-envs
                count is negative.
        """
        for flag, value in (
            ("--ready-envs", self.ready_envs),
            ("--eval-ready-envs", self.eval_ready_envs),
        ):
            if value < 0:
                raise ValueError(f"{flag} {value}: use 0 (synchronous) or more")
        if self.eval_seed + self.num_eval_episodes > self.train_seed:
            raise ValueError(
                f"--train-seed {self.train_seed} must exceed the held-out seeds "
                f"{self.eval_seed}..{self.eval_seed + self.num_eval_episodes - 1}"
            )
        if self.test_seeds and not (
            self.eval_seed + self.num_eval_episodes <= self.test_seeds[0]
            and self.test_seeds[-1] < self.train_seed
        ):
            raise ValueError(
                f"--test-seed {self.test_seed}: the test seeds {self.test_seeds[0]}.."
                f"{self.test_seeds[-1]} must lie after the held-out seeds (from "
                f"{self.eval_seed}) and before --train-seed {self.train_seed}"
            )

    @property
    def test_seeds(self) -> list[int]:
        """The fixed test seeds of the final evaluation (empty without --test-seed)."""
        if self.test_seed is None:
            return []
        return list(range(self.test_seed, self.test_seed + self.num_test_episodes))

    @classmethod
    def sample_efficient(cls, **overrides: Any) -> Stage2TrainArgs:
        """`rpent-stage2 sample-efficient`, with `overrides` applied (see `PRESETS`).

        The learner's and the stack's `sample_efficient()` presets, and a loop that goes on
        once 8 of the 16 workers answered: faster, learning as the synchronous loop does
        (docs/agents/training.md#presets-and-options).
        """
        preset = {
            "env": PegRLTConfig.sample_efficient(),
            "stage2": Stage2Config.sample_efficient(),
            "ready_envs": 8,
        }
        return cls(**(preset | overrides))

    @classmethod
    def robot_hour(cls, **overrides: Any) -> Stage2TrainArgs:
        """`rpent-stage2 robot-hour`, with `overrides` applied (see `PRESETS`).

        RLT within about an hour of robot time: 30k env steps in all, the learner's
        `Stage2Config.robot_hour()`, evaluations every 5k env steps on the validation seeds
        and the final one on the test seeds 50000..50255.
        """
        preset = {
            "env": PegRLTConfig.sample_efficient(),
            "stage2": Stage2Config.robot_hour(),
            "ready_envs": 8,
            "total_env_steps": 30_000,
            "eval_every_env_steps": 5_000,
            "save_every_env_steps": 5_000,
            "test_seed": 50_000,
        }
        return cls(**(preset | overrides))


PRESETS = {
    "reference": (
        "DESIGN.md §4 exactly: learning starts at 10000 transitions, the actor acts after "
        "30000 updates (runs of ~1M env steps)",
        Stage2TrainArgs(),
    ),
    "sample-efficient": (
        "the schedule scaled to a 300k env-step budget (learning after 1000 transitions, "
        "the actor after 3000 updates), 4 updates per transition, discount 0.97, normalized "
        "Q term, exploration noise 0.05, expert takeover of stalls with half of each batch "
        "from its chunks, evaluation filtered by the critic; the actor also drives after 4 "
        "chunks without the peg held (a missed or lost grasp); training scenes kept for 8 "
        "resets; the loop goes on once 8 workers have answered (asynchronous stepping); "
        "training acts on copies of the actor and critic taken before each train step's "
        "updates, which on a GPU run on a CUDA stream of their own",
        Stage2TrainArgs.sample_efficient(),
    ),
    "robot-hour": (
        "RLT within about an hour of robot time: 30k env steps in all, learning after 200 "
        "transitions, 8 updates per transition, the actor ready after 1500 updates, at "
        "evaluation the actor's chunk only where every critic head prefers it to the "
        "reference's; evaluations every 5k env steps on the held-out seeds, the final one on "
        "the test seeds 50000..50255",
        Stage2TrainArgs.robot_hour(),
    ),
}
"""`rpent-stage2`'s presets by name: (description shown by --help, arguments)."""
