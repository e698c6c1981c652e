"""Scripted-expert demonstrations of the peg task, as a LeRobot v3.0 dataset or a frame cache.

`rpent-collect --output-dir demos/peg --num-episodes 20` runs the closed-loop expert on seeds
`seed, seed+1, ...`, keeps the successful episodes only, and writes `image`, `wrist_image`,
`state` (9), `actions` (8) and the instruction as `task`, at 10 fps. `rpent_collect.json` in the
output folder lists the env id, env kwargs and the seeds kept and dropped, so every episode
can be replayed. `--npz-cache` writes `frames.npz` (Stage 1's compact input, readable with numpy
alone) instead of a LeRobot dataset; `--num-workers N` runs episodes in N worker processes.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import shutil
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import tyro
from tqdm import tqdm

from recorders.lerobot_io import ACTION_KEY, create_dataset, dataset_features, staged_output_dir
from rpent_agents.frame_cache import IMAGE_KEYS, FrameCache
from rpent_envs import PEG_INSERTION_ID
from rpent_envs.maniskill.expert import PegInsertionExpert

logger = logging.getLogger(__name__)
COLLECT_MANIFEST = "rpent_collect.json"
CACHE_FILE = "frames.npz"
FPS = 10
Frame = dict[str, Any]


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


@dataclass
class CollectReport:
    """What `collect_peg_demos` wrote."""

    dataset_dir: Path
    seeds_kept: list[int]
    seeds_failed: list[int]
    frames: int


def rollout_expert(env: gym.Env, seed: int) -> tuple[list[Frame], bool]:
    """Run the scripted expert for one episode.

    Args:
        env: A peg env with camera observations (any wrapper stack).
        seed: Reset seed.

    Returns:
        The frames (pre-action observation, action and instruction per step) and whether the
        episode ended in success.
    """
    expert = PegInsertionExpert(env)
    observation, info = env.reset(seed=seed)
    frames: list[Frame] = []
    terminated = truncated = False
    while not (terminated or truncated):
        action = expert.act()
        frames.append({**observation, ACTION_KEY: action, "task": info["task"]})
        observation, _, terminated, truncated, info = env.step(action)
    return frames, bool(info["success"])


_worker_env: gym.Env | None = None


def _start_worker(env_kwargs: dict[str, Any]) -> None:
    global _worker_env
    _worker_env = gym.make(PEG_INSERTION_ID, **env_kwargs)


def _worker_rollout(seed: int) -> tuple[int, list[Frame], bool]:
    return (seed, *rollout_expert(_worker_env, seed))


def expert_episodes(
    seeds: range, env_kwargs: dict[str, Any], num_workers: int
) -> Iterator[tuple[int, list[Frame], bool]]:
    """(seed, frames, success) of expert episodes, in seed order, from `num_workers` processes.

    Stop iterating to stop collecting: the workers are terminated when the iterator closes.
    """
    if num_workers <= 1:
        env = gym.make(PEG_INSERTION_ID, **env_kwargs)
        try:
            for seed in seeds:
                yield (seed, *rollout_expert(env, seed))
        finally:
            env.close()
        return
    context = multiprocessing.get_context("forkserver")
    with context.Pool(num_workers, initializer=_start_worker, initargs=(env_kwargs,)) as pool:
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
        """Stack every frame and save the cache."""
        frames = [frame for episode in self.episodes for frame in episode]
        tasks = sorted({frame["task"] for frame in frames})
        episode_index = [i for i, episode in enumerate(self.episodes) for _ in episode]
        cache = FrameCache(
            **{key: np.stack([frame[key] for frame in frames]) for key in IMAGE_KEYS},
            state=np.stack([frame["state"] for frame in frames]).astype(np.float32),
            actions=np.stack([frame[ACTION_KEY] for frame in frames]).astype(np.float32),
            episode_index=np.asarray(episode_index, dtype=np.int64),
            task_index=np.asarray([tasks.index(f["task"]) for f in frames], dtype=np.int64),
            tasks=tasks,
        )
        self.root.mkdir(parents=True, exist_ok=True)
        cache.save(self.root / CACHE_FILE)


def collect_peg_demos(args: CollectArgs) -> CollectReport:
    """Collect `args.num_episodes` successful expert episodes into `args.output_dir`.

    Raises:
        FileExistsError: When the output folder exists.
        RuntimeError: When fewer successful episodes than asked were found within the attempts.
    """
    if args.num_episodes < 1:
        raise ValueError(f"num_episodes={args.num_episodes}: collect at least one episode")
    max_attempts = args.max_attempts or 2 * args.num_episodes
    env_kwargs = {"obs_mode": "rgb", "image_size": args.image_size}
    seeds_kept: list[int] = []
    seeds_failed: list[int] = []
    frame_count = 0
    with staged_output_dir(args.output_dir) as staging:
        if args.npz_cache:
            sink = FrameCacheSink(staging)
        else:
            sink = LeRobotSink(staging, Path(args.output_dir).name, args)
        seeds = range(args.seed, args.seed + max_attempts)
        episodes = expert_episodes(
            seeds, {**env_kwargs, "render_backend": args.render_backend}, args.num_workers
        )
        progress = tqdm(total=args.num_episodes, desc="successful expert episodes")
        for seed, frames, success in episodes:
            (seeds_kept if success else seeds_failed).append(seed)
            if success:
                sink.add_episode(frames)
                frame_count += len(frames)
                progress.update()
            progress.set_postfix(failed=len(seeds_failed))
            if len(seeds_kept) == args.num_episodes:
                break
        progress.close()
        episodes.close()
        if len(seeds_kept) < args.num_episodes:
            raise RuntimeError(
                f"only {len(seeds_kept)} of {args.num_episodes} episodes succeeded in"
                f" {max_attempts} attempts (failed seeds {seeds_failed}); raise --max-attempts"
            )
        sink.finish()
        manifest = {
            "env_id": PEG_INSERTION_ID,
            "env_kwargs": env_kwargs,
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
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = tyro.cli(CollectArgs)
    try:
        report = collect_peg_demos(args)
    except (FileExistsError, ValueError, RuntimeError) as error:
        raise SystemExit(f"rpent-collect: {error}") from error
    print(
        f"wrote {len(report.seeds_kept)} episodes ({report.frames} frames) to"
        f" {report.dataset_dir.resolve()}"
    )


if __name__ == "__main__":
    main()
