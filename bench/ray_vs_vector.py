"""Ray rollouts against the vector backend: training-loop env steps/s and learning curves.

In one run, on one machine (or a Ray cluster with --ray-address):
- throughput: for each count in --workers, `Stage2Run.collect_and_learn` (the loop of
  bench/stage2_throughput.py: the actor drives every chunk, every chunk is stored, episodes of 8
  chunks, 4 updates per transition) on `--rollout vector` with workers x envs-per-worker
  processes and on `--rollout ray` with that many Ray actors of --envs-per-worker envs;
- learning curve: `rpent-stage2 sample-efficient` with each backend on the same seeds
  (--curve-workers workers; training seeds from 100000, held-out seeds 0..), the success rate
  at each evaluation. The two runs see the same episodes in the same env slots; with the same
  chunks they learn the same policy, up to float rounding. --smoke makes it a tiny run (every
  chunk critical, 2-chunk episodes, a tiny learner) that checks the pipeline in minutes.

    .venv/bin/python bench/ray_vs_vector.py --workers 1 2 --render-backend cpu --smoke
    python3 bench/ray_vs_vector.py --workers 1 2 4 8 16 --render-backend gpu \\
        --gpus-per-worker 0.05 --feature-device cuda --curve-workers 16

A local Ray reserves one CPU per actor (--cpus-per-worker): more actors than cores wait for a
CPU unless --cpus-per-worker is lowered.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import ray
import tyro
from stage2_throughput import loop_settings, loop_speed

from rpent_agents.rollout.ray_config import RayRolloutConfig
from rpent_agents.rollout.ray_rollout import make_ray_vector_env
from rpent_agents.rollout.rlt_stack import PegRLTConfig
from rpent_agents.rollout.vector import FeaturizedVectorEnv, make_rlt_vector_env
from rpent_agents.stage2 import Stage2Config
from rpent_agents.stage2.train_args import Stage2TrainArgs
from rpent_agents.stage2.trainer import train

SMOKE_STAGE2 = Stage2Config(
    hidden_dim=32, batch_size=8, learning_starts=2, warmup_updates=2, weight_warmup_updates=1,
    weight_ramp_updates=2, replay_capacity=1000, sample_window=1000,
)  # fmt: skip


@dataclass
class Args:
    workers: tuple[int, ...] = (1, 2)
    """Worker counts of the throughput measurement."""
    envs_per_worker: int = 1
    env: tyro.conf.OmitArgPrefixes[PegRLTConfig] = field(default_factory=PegRLTConfig)
    """The peg RLT stack (`--checkpoint`, `--render-backend`, `--feature-device`, ...)."""
    ray_address: str | None = None
    """Ray cluster to join (None: a local Ray of this machine's cores)."""
    cpus_per_worker: float = 1.0
    gpus_per_worker: float = 0.0
    """GPU share of each Ray actor (> 0 to render on GPU with --rollout ray)."""
    loop_iterations: int = 20
    """Timed vector steps of each throughput measurement."""
    warmup_iterations: int = 3
    curve_workers: int = 2
    """Workers of the learning-curve runs (0: no curves)."""
    curve_env_steps: int = 300_000
    curve_eval_every: int = 100_000
    curve_eval_episodes: int = 100
    curve_max_minutes: float = 0.0
    """Wall-clock budget of each curve run (0: none)."""
    smoke: bool = False
    """A tiny curve run (always-on gate, 2-chunk episodes, tiny learner, 2 held-out seeds)."""
    output: Path | None = None
    """Also write the figures to this JSON file."""


def rollout_of(args: Args, num_workers: int) -> RayRolloutConfig:
    return RayRolloutConfig(
        ray_address=args.ray_address,
        num_workers=num_workers,
        envs_per_worker=args.envs_per_worker,
        cpus_per_worker=args.cpus_per_worker,
        gpus_per_worker=args.gpus_per_worker,
    )


def backend_speed(args: Args, config: PegRLTConfig, backend: str, num_workers: int) -> dict:
    """Training-loop figures of one backend at `num_workers` workers."""
    config, stage2 = loop_settings(config)
    started = time.monotonic()
    envs: FeaturizedVectorEnv
    if backend == "ray":
        envs = make_ray_vector_env(config, rollout_of(args, num_workers))
    else:
        envs = make_rlt_vector_env(config, num_workers * args.envs_per_worker)
    try:
        start_s = time.monotonic() - started
        figures = loop_speed(envs, stage2, args.warmup_iterations, args.loop_iterations)
    finally:
        envs.close()
    return {"start_s": start_s} | {key: round(value, 1) for key, value in figures.items()}


def curve_args(args: Args, config: PegRLTConfig, backend: str, output_dir: Path) -> Stage2TrainArgs:
    """`rpent-stage2 sample-efficient` of one backend (or the smoke run)."""
    stage2 = Stage2Config.sample_efficient()
    eval_episodes, env_steps, eval_every = (
        args.curve_eval_episodes, args.curve_env_steps, args.curve_eval_every
    )  # fmt: skip
    if args.smoke:
        config = dataclasses.replace(config, trigger_mode="always_on", max_episode_chunks=2)
        stage2, eval_episodes, env_steps, eval_every = SMOKE_STAGE2, 2, 200, 100
    return Stage2TrainArgs(
        output_dir=output_dir,
        rollout=backend,
        num_envs=args.curve_workers * args.envs_per_worker,
        ray=rollout_of(args, args.curve_workers),
        env=config,
        stage2=stage2,
        total_env_steps=env_steps,
        eval_every_env_steps=eval_every,
        num_eval_episodes=eval_episodes,
        max_minutes=args.curve_max_minutes,
    )


def learning_curve(args: Args, config: PegRLTConfig, backend: str) -> dict:
    """Base success and the success rate at each evaluation of one backend's run."""
    with tempfile.TemporaryDirectory() as folder:
        results = train(curve_args(args, config, backend, Path(folder) / backend))
    return {
        "base_success_rate": results.base_success_rate,
        "curve": [(point.env_steps, point.success_rate) for point in results.evals],
        "env_steps": results.env_steps,
        "transitions": results.transitions,
        "updates": results.updates,
        "wall_time_s": round(results.wall_time_s, 1),
    }


def main(args: Args) -> dict:
    if args.ray_address is None:
        ray.init(include_dashboard=False)
    else:
        ray.init(address=args.ray_address)
    config = args.env
    figures: dict = {"envs_per_worker": args.envs_per_worker, "throughput": {}}
    for num_workers in args.workers:
        speeds = {
            backend: backend_speed(args, config, backend, num_workers)
            for backend in ("vector", "ray")
        }
        ratio = speeds["ray"]["env_steps_per_s"] / speeds["vector"]["env_steps_per_s"]
        figures["throughput"][num_workers] = speeds | {"ray_over_vector": round(ratio, 2)}
        logging.info("%d workers: %s", num_workers, figures["throughput"][num_workers])
    if args.curve_workers > 0:
        curves = {backend: learning_curve(args, config, backend) for backend in ("vector", "ray")}
        same = curves["vector"]["curve"] == curves["ray"]["curve"]
        figures["learning"] = curves | {"same_curve": same, "workers": args.curve_workers}
    if args.output is not None:
        args.output.write_text(json.dumps(figures, indent=1))
    return figures


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    print(json.dumps(main(tyro.cli(Args))))
