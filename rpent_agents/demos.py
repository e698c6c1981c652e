"""Scripted-expert demonstrations of the peg task, written as a LeRobot v3.0 dataset.

`rpent-collect --output-dir demos/peg --num-episodes 20` runs the closed-loop expert on seeds
`seed, seed+1, ...`, keeps the successful episodes only, and writes `image`, `wrist_image`,
`state` (9), `actions` (8) and the instruction as `task`, at 10 fps. `rpent_collect.json` in the
dataset folder lists the env id, env kwargs and the seeds kept and dropped, so every episode
can be replayed.
"""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym
import tyro
from tqdm import tqdm

from recorders.lerobot_io import ACTION_KEY, create_dataset, dataset_features, staged_output_dir
from rpent_envs import PEG_INSERTION_ID
from rpent_envs.maniskill.expert import PegInsertionExpert

logger = logging.getLogger(__name__)
COLLECT_MANIFEST = "rpent_collect.json"
FPS = 10


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


@dataclass
class CollectReport:
    """What `collect_peg_demos` wrote."""

    dataset_dir: Path
    seeds_kept: list[int]
    seeds_failed: list[int]
    frames: int


def rollout_expert(env: gym.Env, seed: int) -> tuple[list[dict[str, Any]], bool]:
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
    frames: list[dict[str, Any]] = []
    terminated = truncated = False
    while not (terminated or truncated):
        action = expert.act()
        frames.append({**observation, ACTION_KEY: action, "task": info["task"]})
        observation, _, terminated, truncated, info = env.step(action)
    return frames, bool(info["success"])


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
    env = gym.make(PEG_INSERTION_ID, render_backend=args.render_backend, **env_kwargs)
    seeds_kept: list[int] = []
    seeds_failed: list[int] = []
    frame_count = 0
    try:
        with staged_output_dir(args.output_dir) as staging:
            dataset = None
            progress = tqdm(range(args.seed, args.seed + max_attempts), desc="expert episodes")
            for seed in progress:
                frames, success = rollout_expert(env, seed)
                (seeds_kept if success else seeds_failed).append(seed)
                progress.set_postfix(kept=len(seeds_kept), failed=len(seeds_failed))
                if not success:
                    continue
                if dataset is None:
                    features = dataset_features(
                        {k: v for k, v in frames[0].items() if k not in (ACTION_KEY, "task")},
                        action_dim=env.action_space.shape[0],
                        use_videos=args.use_videos,
                    )
                    dataset = create_dataset(
                        staging,
                        FPS,
                        features,
                        robot_type="panda",
                        dataset_name=Path(args.output_dir).name,
                        image_writer_threads=args.image_writer_threads,
                    )
                for frame in frames:
                    dataset.add_frame(frame)
                dataset.save_episode()
                frame_count += len(frames)
                if len(seeds_kept) == args.num_episodes:
                    break
            if dataset is not None:
                dataset.finalize()
                # LeRobot leaves its (now empty) image staging folders behind after encoding.
                shutil.rmtree(staging / "images", ignore_errors=True)
            if len(seeds_kept) < args.num_episodes:
                raise RuntimeError(
                    f"only {len(seeds_kept)} of {args.num_episodes} episodes succeeded in"
                    f" {max_attempts} attempts (failed seeds {seeds_failed}); raise"
                    " --max-attempts"
                )
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
    finally:
        env.close()
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
