"""`rpent-run`: run a policy on a registered env for given seeds, optionally recording it.

    rpent-run --policy actor --seeds 8 29 45 --record-trajectory --output-dir runs/first \
        --video runs/first/episodes.mp4
    rpent-run --policy vla --seeds 0 1 2 --record-trajectory --output-dir runs/vla
    rpent-run --policy actor --stage2-run runs/rlt_peg/run --seeds $(seq 0 99) --output-dir O
    rpent-run --env RPent/Libero-v0 --env-kwargs '{"suite": "libero_goal", "task_id": 8}' \
        --policy expert --seeds 0 1 --record-trajectory --output-dir runs/libero

Each episode runs chunk by chunk (`rpent_agents.run.policies` decides each chunk,
`rpent_agents.run.episodes` logs and executes it, in `--num-workers` processes). Before a chunk
executes, its decision goes to the provenance channel: a tool call named after its source
(`vla` or `actor`) with the env's instruction as argument, a prediction of the deciding model
inside that call, and the label of the chunk's actions (source, call id, prediction id). With
`--record-trajectory`, `RecordTrajectory` writes those records under `O/trajectories/`, so
`rpent-flywheel` exports the VLA chunks of successful episodes under its default rules, and
the actor's chunks with `--include-sources actor`.

`--policy actor` without `--stage2-run` drives with the embedded default actor
(`rpent_agents.stage2.DEFAULT_ACTOR_DIR`). `--video PATH` writes one MP4 of all episodes, both
cameras side by side, each frame marked with who drove its chunk (`rpent_agents.run.video`).

Each episode's outcome is logged as it ends (seed, verdict, steps, chunks by driver: vla, actor,
expert, and human when a person drove); the success summary (the env's verdict `info["success"]`
at each episode's end) is printed as JSON and written to `O/run_summary.json` with every
episode's seed, verdict, steps and chunks.
"""

from __future__ import annotations

import functools
import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym
import tyro
from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

import rpent_envs
from recorders.record_format import write_json_atomic
from rpent_agents.common.cli import command
from rpent_agents.rollout.rlt_stack import PegRLTConfig
from rpent_agents.run.episodes import EpisodeOutcome, run_episodes
from rpent_agents.run.policies import ActorPolicy, ChunkPolicy, ExpertPolicy, VLAPolicy
from rpent_agents.run.video import EpisodeVideo
from rpent_agents.stage2 import DEFAULT_ACTOR_DIR
from wrappers.record import RecordTrajectory
from wrappers.triggers import TriggerMode

logger = logging.getLogger(__name__)
SUMMARY_FILE = "run_summary.json"
ROBOTS = {rpent_envs.PEG_INSERTION_ID: "panda", rpent_envs.LIBERO_ID: "panda"}
ROBOTS[rpent_envs.FRANKA_ID] = "franka"


@dataclass
class RunArgs:
    """Run a policy on a registered env for given seeds; optionally record trajectories."""

    seeds: list[int]
    """Reset seeds, one episode each (e.g. `--seeds $(seq 0 99)`)."""
    env: str = rpent_envs.PEG_INSERTION_ID
    """A registered env id (one action per step, the flat Dict observation of DESIGN.md §2)."""
    env_kwargs: str = "{}"
    """JSON object of keyword arguments for `gym.make` (e.g. '{"image_size": 32}')."""
    policy: Literal["vla", "actor", "expert"] = "vla"
    """vla: the checkpoint's reference chunks; actor: a Stage 2 actor in the critical phase of
    the peg RLT stack (the reference outside it); expert: the env's scripted expert as the VLA
    stand-in (peg, LIBERO)."""
    checkpoint: Path | None = None
    """Stage 1 checkpoint folder of the VLA (vla, actor); None: the embedded default."""
    stage2_run: Path | None = None
    """Stage 2 run folder or weights.pt of the actor (actor only); None: the embedded default
    actor (rpent_agents/stage2/default_actor)."""
    chunk_len: int = 10
    """Steps executed per chunk (at most the checkpoint's reference chunk)."""
    actor_gate: bool = True
    """Open the actor's gate as in its training: the gate its weights store (e.g. the
    sample-efficient preset's missed-grasp entry) overrides --trigger-mode; --no-actor-gate:
    --trigger-mode alone."""
    trigger_mode: TriggerMode = "auto"
    """The actor's gate where its weights store none (or with --no-actor-gate): "auto"
    (AutoGate's critical phase), "always_on" (every chunk)."""
    device: str = "auto"
    """Torch device of the feature model and the actor ("auto": cuda when available)."""
    max_episode_steps: int | None = None
    """Step limit of each episode; None: the env's own."""
    record_trajectory: bool = False
    """Record every episode with RecordTrajectory under output_dir/trajectories/."""
    output_dir: Path | None = None
    """Run folder of the records and run_summary.json (needed with --record-trajectory)."""
    video: Path | None = None
    """Write an MP4 of all episodes here: base and wrist camera side by side, a border coloured
    by who drove each chunk (grey VLA, orange actor, blue expert), each episode's last frame
    held for a second in green (success) or red (failure). Renders every step."""
    robot: str | None = None
    """Robot name in the records; None: the env's (panda for peg and LIBERO, franka)."""
    num_workers: int = 1
    """Processes running episodes, each with its own env and policy (1: this process); the
    records of every worker go to the same run folder."""


@dataclass
class RunSummary:
    """What `run_policy` did; `to_json()` is what `run_summary.json` holds."""

    env: str
    env_kwargs: dict[str, Any]
    policy: str
    checkpoint: Path | None
    stage2_run: Path | None
    video: Path | None = None
    episodes: list[EpisodeOutcome] = field(default_factory=list)

    @property
    def successful_seeds(self) -> list[int]:
        """Seeds whose episode the env judged successful, in run order."""
        return [episode.seed for episode in self.episodes if episode.success]

    def to_json(self, with_episodes: bool = True) -> dict[str, Any]:
        """Counts first (successes, rate, seeds by verdict), then each episode."""
        successful = self.successful_seeds
        summary = {
            "env": self.env,
            "env_kwargs": self.env_kwargs,
            "policy": self.policy,
            "checkpoint": str(self.checkpoint) if self.checkpoint else None,
            "stage2_run": str(self.stage2_run) if self.stage2_run else None,
            "video": str(self.video) if self.video else None,
            "episodes": len(self.episodes),
            "successes": len(successful),
            "success_rate": len(successful) / len(self.episodes) if self.episodes else None,
            "successful_seeds": successful,
            "failed_seeds": [episode.seed for episode in self.episodes if not episode.success],
        }
        if with_episodes:
            summary["episode_outcomes"] = [asdict(episode) for episode in self.episodes]
        return summary


def check_args(args: RunArgs) -> dict[str, Any]:
    """Refuse options that do not fit together; returns the parsed env kwargs.

    Raises:
        ValueError: Naming the option and the fix.
        FileExistsError: When the output folder already holds a run summary.
    """
    env_kwargs = json.loads(args.env_kwargs)
    if not isinstance(env_kwargs, dict):
        raise ValueError(f"--env-kwargs {args.env_kwargs!r}: give a JSON object")
    if args.num_workers < 1:
        raise ValueError(f"--num-workers {args.num_workers}: use 1 or more")
    if not args.seeds or len(set(args.seeds)) != len(args.seeds):
        raise ValueError(f"--seeds {args.seeds}: give distinct seeds, at least one")
    if args.record_trajectory and args.output_dir is None:
        raise ValueError("--record-trajectory needs --output-dir (the run folder)")
    if args.stage2_run is not None and args.policy != "actor":
        raise ValueError("--stage2-run is read by --policy actor only")
    if args.policy == "actor" and args.env != rpent_envs.PEG_INSERTION_ID:
        raise ValueError(
            f"--policy actor runs on the peg RLT stack: use --env {rpent_envs.PEG_INSERTION_ID}"
        )
    if args.policy == "expert" and args.checkpoint is not None:
        raise ValueError("--checkpoint is read by --policy vla and actor, not expert")
    if args.video is not None and args.num_workers > 1:
        raise ValueError("--video is written by one process: use --num-workers 1")
    if args.output_dir is not None and (args.output_dir / SUMMARY_FILE).exists():
        raise FileExistsError(f"{args.output_dir / SUMMARY_FILE} exists; choose a new --output-dir")
    if args.video is not None and args.video.exists():
        raise FileExistsError(f"--video {args.video} exists; choose a new path")
    return env_kwargs


def make_policy(args: RunArgs, env: gym.Env) -> ChunkPolicy:
    """The policy of `args.policy` on `env`."""
    if args.policy == "expert":
        return ExpertPolicy.for_env(env, args.env)
    if args.policy == "vla":
        return VLAPolicy(env, args.checkpoint, args.chunk_len, args.device)
    config = PegRLTConfig(
        checkpoint=args.checkpoint,
        chunk_len=args.chunk_len,
        feature_device=args.device,
        trigger_mode=args.trigger_mode,
    )
    return ActorPolicy.on_peg_stack(env, config, args.stage2_run, args.actor_gate)


def open_run(args: RunArgs, env: gym.Env | None = None) -> tuple[gym.Env, ChunkPolicy]:
    """The env (under RecordTrajectory when recording) and the policy of one process.

    Args:
        args: The run's options.
        env: A raw env to use instead of `gym.make(args.env, **env_kwargs)`.
    """
    if env is None:
        env_kwargs = json.loads(args.env_kwargs)
        env = gym.make(args.env, max_episode_steps=args.max_episode_steps, **env_kwargs)
    if args.video is not None:
        env = EpisodeVideo(env, args.video)
    if args.record_trajectory:
        robot = args.robot or ROBOTS.get(args.env)
        planner = {"kind": "rpent-run", "policy": args.policy}
        env = RecordTrajectory(env, args.output_dir, robot=robot, planner=planner)
    try:
        return env, make_policy(args, env)
    except BaseException:
        env.close()
        raise


def run_policy(args: RunArgs, env: gym.Env | None = None) -> RunSummary:
    """Run `args.policy` for one episode per seed and write the summary.

    Args:
        args: The run's options.
        env: The raw env to run on instead of `gym.make(args.env, **env_kwargs)`, for what JSON
            cannot describe (a camera object); it is closed at the end.

    Returns:
        The summary (also in `output_dir/run_summary.json` when an output folder is given).

    Raises:
        ValueError: For options that do not fit together, or an env that does not fit the
            policy.
    """
    env_kwargs = check_args(args)
    if env is not None and args.num_workers > 1:
        raise ValueError("an env object runs in this process only: use num_workers=1")
    stage2_run = args.stage2_run or (DEFAULT_ACTOR_DIR if args.policy == "actor" else None)
    summary = RunSummary(
        args.env, env_kwargs, args.policy, args.checkpoint, stage2_run, video=args.video
    )
    opener = functools.partial(open_run, args, env)
    episodes = run_episodes(opener, args.seeds, args.chunk_len, args.num_workers)
    with tqdm(episodes, total=len(args.seeds), desc=f"{args.policy} episodes") as progress:
        for outcome in progress:
            summary.episodes.append(outcome)
            progress.set_postfix(successes=len(summary.successful_seeds))
            logger.info(outcome.line())
    if args.video is not None:
        logger.info("video of the %d episodes: %s", len(summary.episodes), args.video)
    if args.output_dir is not None:
        args.output_dir.mkdir(parents=True, exist_ok=True)
        write_json_atomic(args.output_dir / SUMMARY_FILE, summary.to_json())
    return summary


def main() -> None:
    """Entry point of `rpent-run`."""
    with command("rpent-run"), logging_redirect_tqdm():
        summary = run_policy(tyro.cli(RunArgs))
        print(json.dumps(summary.to_json(with_episodes=False), indent=2))


if __name__ == "__main__":
    main()
