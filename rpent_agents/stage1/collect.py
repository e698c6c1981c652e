"""Scripted-expert demonstrations of the peg task, as a LeRobot v3.0 dataset or a frame cache.

`rpent-collect --output-dir demos/peg --num-episodes 20` runs the closed-loop expert on seeds
`seed, seed+1, ...`, keeps the successful episodes only, and writes `image`, `wrist_image`,
`state` (9), `actions` (8) and the instruction as `task`, at 10 fps. `rpent_collect.json` in the
output folder lists the env id, env kwargs and the seeds kept and dropped, so every episode
can be replayed. `--npz-cache` writes `frames.npz` (Stage 1's compact input, readable with numpy
alone) instead of a LeRobot dataset; `--num-workers N` runs episodes in N worker processes.

Two options widen what a policy learns from the same expert:
- `--action-noise-std S` (DART-style noise injection): the env executes the expert's arm action
  plus Gaussian noise (std drawn per episode from [0, S], action units), while the recorded
  label stays the expert's clean action, so the data shows how the expert recovers from
  states a little off its path;
- `--image-every K` (frame cache only): cameras render every K-th step only (the steps in
  between skip rendering), so the same simulation time gives K times more episodes; every
  step's state and action is kept, so each image still has its full chunk of labels.
"""

from __future__ import annotations

import contextlib
import json
import logging
import multiprocessing
import shutil
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import tyro
from tqdm import tqdm

from recorders.lerobot_io import ACTION_KEY, create_dataset, dataset_features, staged_output_dir
from rpent_agents.common.cli import command
from rpent_agents.stage1.frame_cache import CACHE_FILE, cache_from_episodes
from rpent_envs import PEG_INSERTION_ID
from rpent_envs.image_demand import image_demand_of
from rpent_envs.maniskill.expert import ARM_DOF, PegInsertionExpert

logger = logging.getLogger(__name__)
COLLECT_MANIFEST = "rpent_collect.json"
FPS = 10
Frame = dict[str, Any]


class TooFewDemosError(RuntimeError):
    """Fewer successful episodes than asked were found within the attempts."""


@dataclass
class CollectArgs:
    """Collect scripted-expert demonstrations of the peg task into a LeRobot v3.0 dataset."""

    output_dir: Path
    """Dataset folder to create; it must not exist yet."""
    num_episodes: int = 5
    """Successful episodes to keep."""
    seed: int = 0
    """Reset seed of the first attempt; attempt i uses seed + i."""
    max_attempts: int = 0
    """Attempts before giving up (0: twice num_episodes)."""
    image_size: int = 128
    """Height and width of both camera images, in pixels."""
    use_videos: bool = True
    """Store images as MP4 videos (True) or PNG files (False)."""
    image_writer_threads: int = 4
    """Background threads writing images."""
    render_backend: Literal["auto", "cpu", "gpu"] = "auto"
    """SAPIEN render device ("auto": "gpu" with CUDA, else "cpu")."""
    num_workers: int = 1
    """Worker processes running episodes (1: in this process)."""
    npz_cache: bool = False
    """Write `frames.npz` (a Stage 1 frame cache, no lerobot needed) instead of a dataset."""
    action_noise_std: float = 0.0
    """Largest std of the Gaussian noise added to the executed arm actions (labels stay
    clean); each episode draws its std uniformly from [0, this]."""
    image_every: int = 1
    """Render and keep the cameras every this many steps (frame cache only)."""
    max_minutes: float = 0.0
    """Stop after this much collection time with the episodes so far (0: no limit)."""


@dataclass(frozen=True)
class RolloutOptions:
    """How one expert episode is run and recorded (see the module doc).

    Attributes:
        action_noise_std: Largest noise std on the executed arm actions; each episode draws
            its std uniformly from [0, action_noise_std] (0: no noise).
        image_every: Keep camera images every this many steps.
    """

    action_noise_std: float = 0.0
    image_every: int = 1


@dataclass
class CollectReport:
    """What `collect_peg_demos` wrote."""

    dataset_dir: Path
    seeds_kept: list[int]
    seeds_failed: list[int]
    frames: int


def rollout_expert(
    env: gym.Env, seed: int, options: RolloutOptions = RolloutOptions()
) -> tuple[list[Frame], bool]:
    """Run the scripted expert for one episode.

    Args:
        env: A peg env with camera observations (any wrapper stack).
        seed: Reset seed (also seeds the action noise).
        options: Noise injection and image subsampling.

    Returns:
        The frames (pre-action observation, the expert's clean action and the instruction per
        step; camera images only on every `image_every`-th step) and whether the episode ended
        in success.
    """
    expert = PegInsertionExpert(env)
    demand = image_demand_of(env)
    noise_rng = np.random.default_rng(seed)
    noise_std = noise_rng.uniform(0.0, options.action_noise_std)
    observation, info = env.reset(seed=seed)
    frames: list[Frame] = []
    terminated = truncated = False
    while not (terminated or truncated):
        action = expert.act()
        keeps_images = len(frames) % options.image_every == 0
        kept = observation if keeps_images else {"state": observation["state"]}
        frames.append({**kept, ACTION_KEY: action, "task": info["task"]})
        executed = action.copy()
        if noise_std > 0:
            noise = noise_rng.normal(0.0, noise_std, ARM_DOF)
            executed[:ARM_DOF] = np.clip(executed[:ARM_DOF] + noise, -1.0, 1.0)
        next_keeps_images = len(frames) % options.image_every == 0
        skippable = (
            demand.optional() if demand and not next_keeps_images else contextlib.nullcontext()
        )
        with skippable:
            observation, _, terminated, truncated, info = env.step(executed)
    return frames, bool(info["success"])


_worker_env: gym.Env | None = None
_worker_options = RolloutOptions()


def _start_worker(env_kwargs: dict[str, Any], options: RolloutOptions) -> None:
    global _worker_env, _worker_options
    _worker_env = gym.make(PEG_INSERTION_ID, **env_kwargs)
    _worker_options = options


def _worker_rollout(seed: int) -> tuple[int, list[Frame], bool]:
    return (seed, *rollout_expert(_worker_env, seed, _worker_options))


def expert_episodes(
    seeds: range,
    env_kwargs: dict[str, Any],
    num_workers: int,
    options: RolloutOptions = RolloutOptions(),
) -> Iterator[tuple[int, list[Frame], bool]]:
    """(seed, frames, success) of expert episodes, in seed order, from `num_workers` processes.

    Stop iterating to stop collecting: the workers are terminated when the iterator closes.
    """
    if num_workers <= 1:
        env = gym.make(PEG_INSERTION_ID, **env_kwargs)
        try:
            for seed in seeds:
                yield (seed, *rollout_expert(env, seed, options))
        finally:
            env.close()
        return
    context = multiprocessing.get_context("forkserver")
    initargs = (env_kwargs, options)
    with context.Pool(num_workers, initializer=_start_worker, initargs=initargs) as pool:
        yield from pool.imap(_worker_rollout, seeds)


class LeRobotSink:
    """Writes successful episodes into a LeRobot v3.0 dataset at `root`."""

    def __init__(self, root: Path, dataset_name: str, args: CollectArgs) -> None:
        """Create the dataset lazily, from the first episode's frame layout."""
        self.root, self.dataset_name, self.args = root, dataset_name, args
        self.dataset = None

    def add_episode(self, frames: list[Frame]) -> None:
        """Append one episode."""
        if self.dataset is None:
            observation = {k: v for k, v in frames[0].items() if k not in (ACTION_KEY, "task")}
            features = dataset_features(
                observation, len(frames[0][ACTION_KEY]), use_videos=self.args.use_videos
            )
            self.dataset = create_dataset(
                self.root,
                FPS,
                features,
                robot_type="panda",
                dataset_name=self.dataset_name,
                image_writer_threads=self.args.image_writer_threads,
            )
        for frame in frames:
            self.dataset.add_frame(dict(frame))
        self.dataset.save_episode()

    def finish(self) -> None:
        """Finalize the dataset files."""
        if self.dataset is not None:
            self.dataset.finalize()
            # LeRobot leaves its (now empty) image staging folders behind after encoding.
            shutil.rmtree(self.root / "images", ignore_errors=True)


class FrameCacheSink:
    """Gathers successful episodes into `root/frames.npz` (a Stage 1 frame cache)."""

    def __init__(self, root: Path) -> None:
        """Write the cache under `root` on `finish()`."""
        self.root = root
        self.episodes: list[list[Frame]] = []

    def add_episode(self, frames: list[Frame]) -> None:
        """Keep one episode."""
        self.episodes.append(frames)

    def finish(self) -> None:
        """Stack every frame and save the cache (images of the frames that have them)."""
        self.root.mkdir(parents=True, exist_ok=True)
        cache_from_episodes(self.episodes).save(self.root / CACHE_FILE)


def _check_args(args: CollectArgs) -> None:
    if args.num_episodes < 1:
        raise ValueError(f"num_episodes={args.num_episodes}: collect at least one episode")
    if args.image_every < 1:
        raise ValueError(f"image_every={args.image_every}: use 1 (every step) or more")
    if args.image_every > 1 and not args.npz_cache:
        raise ValueError(
            f"image_every={args.image_every} needs --npz-cache: a LeRobot dataset has the "
            "images of every frame"
        )
    if args.action_noise_std < 0:
        raise ValueError(f"action_noise_std={args.action_noise_std}: use 0 or more")


def _gather(args: CollectArgs, sink: FrameCacheSink | LeRobotSink) -> tuple[list, list, int]:
    """Run expert episodes into `sink` until enough succeeded, the attempts or time ran out."""
    seeds = range(args.seed, args.seed + (args.max_attempts or 2 * args.num_episodes))
    env_kwargs = {"obs_mode": "rgb", "image_size": args.image_size}
    options = RolloutOptions(args.action_noise_std, args.image_every)
    episodes = expert_episodes(
        seeds, {**env_kwargs, "render_backend": args.render_backend}, args.num_workers, options
    )
    deadline = time.monotonic() + args.max_minutes * 60 if args.max_minutes > 0 else None
    seeds_kept: list[int] = []
    seeds_failed: list[int] = []
    frame_count = 0
    with tqdm(total=args.num_episodes, desc="successful expert episodes") as progress:
        for seed, frames, success in episodes:
            (seeds_kept if success else seeds_failed).append(seed)
            if success:
                sink.add_episode(frames)
                frame_count += len(frames)
                progress.update()
            progress.set_postfix(failed=len(seeds_failed))
            out_of_time = deadline is not None and time.monotonic() > deadline
            if len(seeds_kept) == args.num_episodes or (out_of_time and seeds_kept):
                break
    episodes.close()
    return seeds_kept, seeds_failed, frame_count


def collect_peg_demos(args: CollectArgs) -> CollectReport:
    """Collect `args.num_episodes` successful expert episodes into `args.output_dir`.

    With `max_minutes`, collection stops at the time budget with the episodes kept so far.

    Raises:
        FileExistsError: When the output folder exists.
        ValueError: For options that do not fit together.
        TooFewDemosError: When fewer successful episodes than asked were found within the
            attempts.
    """
    _check_args(args)
    with staged_output_dir(args.output_dir) as staging:
        if args.npz_cache:
            sink = FrameCacheSink(staging)
        else:
            sink = LeRobotSink(staging, Path(args.output_dir).name, args)
        seeds_kept, seeds_failed, frame_count = _gather(args, sink)
        if len(seeds_kept) < args.num_episodes and args.max_minutes <= 0:
            raise TooFewDemosError(
                f"only {len(seeds_kept)} of {args.num_episodes} episodes succeeded in the"
                f" attempts (failed seeds {seeds_failed}); raise --max-attempts"
            )
        sink.finish()
        manifest = {
            "env_id": PEG_INSERTION_ID,
            "env_kwargs": {"obs_mode": "rgb", "image_size": args.image_size},
            "seeds_kept": seeds_kept,
            "seeds_failed": seeds_failed,
            "fps": FPS,
            "collector": "rpent_envs.maniskill.expert.PegInsertionExpert",
            "args": {k: str(v) for k, v in asdict(args).items()},
        }
        (staging / COLLECT_MANIFEST).write_text(json.dumps(manifest, indent=2))
    return CollectReport(Path(args.output_dir), seeds_kept, seeds_failed, frame_count)


def main() -> None:
    """Entry point of `rpent-collect`."""
    with command("rpent-collect"):
        report = collect_peg_demos(tyro.cli(CollectArgs))
        print(
            f"wrote {len(report.seeds_kept)} episodes ({report.frames} frames) to"
            f" {report.dataset_dir.resolve()}"
        )


if __name__ == "__main__":
    main()
