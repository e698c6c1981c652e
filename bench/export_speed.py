"""Flywheel export speed: frames/s of `export_flywheel` against a bare LeRobot add_frame loop.

Records expert episodes of the peg env (every action labelled as a VLA prediction, so every
frame is exported), then times in rounds (after one warm-up round), back to back:
- bare: `LeRobotDataset.create / add_frame / save_episode / finalize` on the same frames,
  already decoded in memory (the floor any exporter pays);
- export: `export_flywheel` with 0 and with `--threads` image writer threads (reads the JSONL,
  checks every rule, decodes the PNG artifacts, writes the same dataset).
Goals: export(0) >= 0.9x bare(0); export(threads) >= 2x export(0). Ratios are taken within
each round (same machine load), the median over rounds is printed.

Usage: .venv/bin/python bench/export_speed.py [--episodes 4] [--image-size 128] [--no-use-videos]
"""

import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import gymnasium as gym
import tyro

import rpent_envs
from recorders.flywheel import export_flywheel, load_frame
from recorders.flywheel_rules import contiguous_runs, select_actions
from recorders.lerobot_io import ACTION_KEY, create_dataset, dataset_features
from recorders.provenance import provenance_of
from recorders.trajectory import TrajectoryReader, find_task_dirs
from rpent_envs.maniskill.expert import PegInsertionExpert
from wrappers.record import RecordTrajectory


@dataclass
class Args:
    episodes: int = 4
    """Expert episodes to record (each one dataset episode)."""
    image_size: int = 128
    threads: int = 4
    """Image writer threads of the threaded export."""
    use_videos: bool = True
    repeats: int = 3
    """Timed rounds after the warm-up; ratios are taken within a round, then the median."""
    render_backend: Literal["auto", "cpu", "gpu"] = "auto"


def record_expert_episodes(run_dir: Path, args: Args) -> None:
    env = gym.make(
        rpent_envs.PEG_INSERTION_ID,
        obs_mode="rgb",
        image_size=args.image_size,
        render_backend=args.render_backend,
    )
    env = RecordTrajectory(env, run_dir, robot="panda")
    log, expert = provenance_of(env), PegInsertionExpert(env)
    for seed in range(args.episodes):
        _, info = env.reset(seed=seed)
        call_id = log.tool_call("vla", {"instruction": info["task"]})
        log.set_action_source("vla", call_id, log.vla_prediction(call_id, info["task"], "expert"))
        terminated = truncated = False
        while not (terminated or truncated):
            _, _, terminated, truncated, info = env.step(expert.act())
        assert info["success"], f"expert failed on seed {seed}; pick other seeds"
    env.close()


def decoded_episodes(run_dir: Path) -> list[list[dict]]:
    episodes = []
    for task_dir in find_task_dirs(run_dir)[0]:
        reader = TrajectoryReader(task_dir)
        selection = select_actions(
            reader.read_records("planners.jsonl"),
            reader.read_records("predictions.jsonl"),
            reader.read_records("actions.jsonl"),
        )
        for run in contiguous_runs(selection.kept):
            episodes.append([load_frame(reader, kept) for kept in run])
    return episodes


def bare_loop(episodes: list[list[dict]], root: Path, use_videos: bool) -> None:
    first = episodes[0][0]
    observation = {k: v for k, v in first.items() if k not in (ACTION_KEY, "task")}
    features = dataset_features(observation, len(first[ACTION_KEY]), use_videos)
    dataset = create_dataset(root, 10, features, "panda", "bare", image_writer_threads=0)
    for frames in episodes:
        for frame in frames:
            dataset.add_frame(dict(frame))  # add_frame pops "task"
        dataset.save_episode()
    dataset.finalize()


def seconds(function, *arguments, **keywords) -> float:
    start = time.perf_counter()
    function(*arguments, **keywords)
    return time.perf_counter() - start


def timed_round(work: Path, episodes: list[list[dict]], round_index: int, args: Args) -> dict:
    """Seconds of the bare loop and of both exports, run back to back (same machine load)."""
    out = work / f"out{round_index}"
    times = {"bare": seconds(bare_loop, episodes, out / "bare", args.use_videos)}
    for threads in (0, args.threads):
        times[f"export_{threads}"] = seconds(
            export_flywheel,
            work / "run",
            out / f"export_{threads}",
            image_writer_threads=threads,
            use_videos=args.use_videos,
        )
    shutil.rmtree(out)
    return times


def main(args: Args) -> None:
    work = Path(tempfile.mkdtemp(prefix="rpent-export-bench-"))
    try:
        record_expert_episodes(work / "run", args)
        episodes = decoded_episodes(work / "run")
        timed_round(work, episodes, 0, args)  # warms up LeRobot and the codecs
        rounds = [timed_round(work, episodes, index, args) for index in range(1, args.repeats + 1)]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    frames = sum(len(frames) for frames in episodes)
    threaded = f"export_{args.threads}"
    fps = {name: frames / statistics.median(r[name] for r in rounds) for name in rounds[0]}
    vs_bare = statistics.median(r["bare"] / r["export_0"] for r in rounds)
    vs_serial = statistics.median(r["export_0"] / r[threaded] for r in rounds)
    print(
        f"frames={frames} episodes={len(episodes)} image_size={args.image_size}"
        f" use_videos={args.use_videos} rounds={args.repeats} (medians): "
        + ", ".join(f"{name} {value:.1f} frames/s" for name, value in fps.items())
        + f"; export_0/bare = {vs_bare:.2f}x, {threaded}/export_0 = {vs_serial:.2f}x"
    )


if __name__ == "__main__":
    main(tyro.cli(Args))
