"""Env steps/s of the Stage 2 training loop against the raw peg env, in one run.

Three measurements on the same machine, each with `--num-envs` worker processes:
- raw state: the peg env with `obs_mode="state"` (physics only; the upper bound);
- raw rgb: the peg env rendering both cameras at every step (what a naive loop pays);
  both with the loop's episode length and scene reuse (`--raw-episode-steps`,
  `--reconfiguration-freq`: resets cost what they cost the loop);
- training loop: `rpent_agents.stage2.trainer.Stage2Run.collect_and_learn` (workers render only
  chunk boundaries; one batched featurizer call per vector step in this process; the learner
  updates while the workers simulate; a worker whose episode ends starts the next one itself),
  the actor driving every chunk, every chunk stored as a transition (`trigger_mode=
  "always_on"`), episodes of 8 chunks (as long as the base policy's) and the learner making
  the preset's 4 updates per transition from the first step: more learner work than a real
  run has. Its `loop_profile` (as in a run's results.json, over the timed steps) says where a
  vector step's time went and how long the workers were busy, rendering included.

    .venv/bin/python bench/stage2_throughput.py --num-envs 2 --render-backend cpu
    python3 bench/stage2_throughput.py --num-envs 16 --render-backend gpu --feature-device cuda
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import gymnasium as gym
import numpy as np
import tyro
from gymnasium.vector import AsyncVectorEnv

import rpent_envs
from rpent_agents.rollout.rlt_stack import PegRLTConfig
from rpent_agents.rollout.vector import FeaturizedVectorEnv, make_rlt_vector_env
from rpent_agents.stage2 import RLTDims, ScalarLog, Stage2Config, Stage2Learner
from rpent_agents.stage2.loop_profile import LoopProfile
from rpent_agents.stage2.results import LearningResults
from rpent_agents.stage2.run_folder import RunState
from rpent_agents.stage2.train_args import Stage2TrainArgs
from rpent_agents.stage2.trainer import Stage2Run


@dataclass
class Args:
    num_envs: int = 2
    env: tyro.conf.OmitArgPrefixes[PegRLTConfig] = field(
        default_factory=lambda: PegRLTConfig(
            reconfiguration_freq=PegRLTConfig.sample_efficient().reconfiguration_freq
        )
    )
    """The peg RLT stack (`--checkpoint`, `--render-backend`, `--feature-device`, ...; the
    checkpoint's image size sets the cameras'); `--reconfiguration-freq`, resets per scene of
    the raw envs and the loop's, is the sample-efficient preset's by default. The loop drives
    every chunk with the actor (see the module doc)."""
    raw_steps: int = 100
    """Timed steps per worker of each raw-env measurement."""
    raw_episode_steps: int = 80
    """Episode length of the raw envs (they reset themselves): the loop's 8 chunks."""
    loop_iterations: int = 30
    """Timed vector steps (one chunk per worker each) of the training loop."""
    warmup_iterations: int = 3
    raw: bool = True
    """Also measure the raw env (--no-raw: the training loop only)."""
    loop: bool = True
    """Measure the training loop (--no-loop with --raw-state-only: the physics bound only)."""
    raw_state_only: bool = False
    """Of the raw env, measure the state-only rate alone (the physics bound of a real run)."""
    ready_envs: int = 0
    """The loop's asynchronous stepping (`rpent-stage2 --ready-envs`); 0: synchronous."""


def raw_env_speed(args: Args, obs_mode: str, image_size: int) -> float:
    """Env steps/s of `num_envs` raw peg envs stepping random actions."""
    kwargs = {
        "obs_mode": obs_mode,
        "image_size": image_size,
        "render_backend": args.env.render_backend,
        "reconfiguration_freq": args.env.reconfiguration_freq,
        "max_episode_steps": args.raw_episode_steps,
    }
    envs = AsyncVectorEnv(
        [lambda: gym.make(rpent_envs.PEG_INSERTION_ID, **kwargs)] * args.num_envs,
        context="forkserver",
    )
    try:
        envs.reset(seed=list(range(args.num_envs)))
        rng = np.random.default_rng(0)
        actions = rng.uniform(-0.3, 0.3, (args.raw_steps + 5, args.num_envs, 8)).astype(np.float32)
        for action in actions[:5]:
            envs.step(action)
        started = time.monotonic()
        for action in actions[5:]:
            envs.step(action)
        return args.num_envs * args.raw_steps / (time.monotonic() - started)
    finally:
        envs.close()


def loop_settings(config: PegRLTConfig) -> tuple[PegRLTConfig, Stage2Config]:
    """The measured loop's stack and learner settings (see the module doc)."""
    # Updates from the first transition on, 4 per transition as in the preset's steady state.
    stage2 = Stage2Config.sample_efficient(learning_starts=1, warmup_updates=0)
    # Episodes of 8 chunks: about as long as the base policy's (resets as often as in a run).
    config = dataclasses.replace(config, trigger_mode="always_on", max_episode_chunks=8)
    return config, stage2


def loop_speed(
    envs: FeaturizedVectorEnv,
    stage2: Stage2Config,
    warmup_iterations: int,
    loop_iterations: int,
    ready_envs: int = 0,
) -> dict:
    """Env steps/s, updates/s and the loop profile of `Stage2Run.collect_and_learn` on `envs`."""
    dims = RLTDims.from_observation_space(envs.single_observation_space)
    learner = Stage2Learner(stage2, dims)
    with tempfile.TemporaryDirectory() as folder, ScalarLog(folder) as log:
        train_args = Stage2TrainArgs(output_dir=Path(folder), stage2=stage2, ready_envs=ready_envs)
        results = LearningResults(eval_seeds=[0])
        run = Stage2Run(train_args, envs, learner, RunState(), results, log, time.monotonic())
        run.obs = run.start_training_episodes()
        for _ in range(warmup_iterations):
            run.collect_and_learn()
        steps, updates = run.state.env_steps, learner.update_step
        run.profile = LoopProfile()  # the timed steps only
        started = time.monotonic()
        for _ in range(loop_iterations):
            run.collect_and_learn()
        elapsed = time.monotonic() - started
        run.finish_busy_chunks()  # asynchronous stepping: no worker left busy at close
        return {
            "env_steps_per_s": (run.state.env_steps - steps) / elapsed,
            "updates_per_s": (learner.update_step - updates) / elapsed,
            "transitions": learner.replay.total_added,
            "loop_profile": run.profile.summary(),
        }


def training_loop_speed(args: Args, config: PegRLTConfig) -> dict:
    """Env steps/s and the time split of the real training loop."""
    config, stage2 = loop_settings(config)
    envs = make_rlt_vector_env(config, args.num_envs)
    try:
        return loop_speed(
            envs, stage2, args.warmup_iterations, args.loop_iterations, args.ready_envs
        )
    finally:
        envs.close()


def main(args: Args) -> dict:
    config = args.env
    image_size = config.vla_config()["image_size"]
    figures: dict = {"num_envs": args.num_envs, "image_size": image_size}
    if args.loop:
        loop = training_loop_speed(args, config)
        profile = loop.pop("loop_profile")
        figures["training_loop"] = {key: round(value, 1) for key, value in loop.items()}
        figures["loop_profile"] = {key: round(value, 2) for key, value in profile.items()}
    if not args.raw:
        return figures
    state = raw_env_speed(args, "state", image_size)
    figures["raw_state_env_steps_per_s"] = round(state, 1)
    if not args.raw_state_only:
        figures["raw_rgb_env_steps_per_s"] = round(raw_env_speed(args, "rgb", image_size), 1)
    if args.loop:
        for name in ("state", "rgb"):
            if f"raw_{name}_env_steps_per_s" in figures:
                raw_speed = figures[f"raw_{name}_env_steps_per_s"]
                figures[f"loop_over_raw_{name}"] = round(loop["env_steps_per_s"] / raw_speed, 2)
    return figures


if __name__ == "__main__":
    print(json.dumps(main(tyro.cli(Args))))
