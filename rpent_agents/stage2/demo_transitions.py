"""`rpent-demo-transitions`: Stage 1 demonstrations as Stage 2 replay transitions.

A frame cache of successful expert episodes (`rpent-collect --npz-cache` writes
`frames.npz`) becomes the transitions the live loop would have stored had the expert driven
those episodes: each episode is cut into chunks of the actor's length H from its first step,
each chunk's first frame is featurized by the checkpoint's feature model with the RLT
wrapper's own code (`wrappers.rlt.rlt_observations`: `z_rl`, `proprio` = the raw `state`,
`ref_chunk` clipped to the action bounds), and each chunk becomes a transition through
`stage2.transitions.build_transition` from the info the RLT env would report: the recorded
actions executed, `intervene_flag` set (an expert drove), the peg env's sparse reward (1 at
the step that solves the task, the episode's last: `rpent-collect` keeps an episode up to its
success, which terminates it; the last chunk is `done`), padded as an early episode end pads.

Two things a cache cannot give as the live loop has them, both stated where used: the
observation after the episode's last step (not recorded: the last chunk's next observation is
the episode's last frame with images; the chunk is done, so no target bootstraps from it), and
the critical phase (a cache keeps no grasp or hole signals: every chunk is stored, or the
episode's last `final_chunks`).

The output is the replay buffer's own `.npz` (`ReplayBuffer.save`), which a run preloads with
`Stage2Config.demo_transitions` (`stage2.demo_replay`).

    rpent-collect --output-dir demos/peg --num-episodes 20 --npz-cache
    rpent-demo-transitions --cache demos/peg/frames.npz --output demos/peg/transitions.npz
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import tyro
from tqdm import tqdm

from rpent_agents.common.cli import command
from rpent_agents.common.devices import resolve_device
from rpent_agents.features.checkpoint import DEFAULT_CHECKPOINT_DIR, load_featurizer, read_config
from rpent_agents.stage1.frame_cache import FrameCache
from rpent_agents.stage2.networks import RLTDims
from rpent_agents.stage2.replay import ReplayBuffer, RLTTransition
from rpent_agents.stage2.transitions import build_transition
from wrappers.rlt import RLTFeatureSource, rlt_observation_space, rlt_observations

logger = logging.getLogger(__name__)
FEATURIZE_BATCH = 64
"""Frames per feature-model call."""


@dataclass
class DemoTransitionArgs:
    """Turn a Stage 1 frame cache into Stage 2 replay transitions (rpent-demo-transitions)."""

    cache: Path
    """The frame cache (`rpent-collect --npz-cache` writes `frames.npz`)."""
    output: Path
    """The transitions file to write (`.npz`, the replay's format); it must not exist."""
    checkpoint: Path | None = None
    """Stage 1 checkpoint of the run's feature model; None: the embedded default."""
    chunk_len: int = 10
    """H, the run's chunk length (`--stage2.chunk-len`)."""
    reference_on_interventions: Literal["executed", "observed"] = "executed"
    """The run's `--stage2.reference-on-interventions` ("observed" in the sample-efficient
    presets and the sim stand-in): what the stored reference holds on expert steps."""
    final_chunks: int | None = None
    """Keep only each episode's last this many chunks (nearest the insertion, where the live
    loop's critical phase lies); None: every chunk."""
    device: str = "auto"
    """Torch device of the feature model ("auto": cuda when available, else cpu)."""


def demo_transitions(
    cache: FrameCache,
    featurizer: RLTFeatureSource,
    chunk_len: int,
    reference_on_interventions: str = "executed",
    final_chunks: int | None = None,
) -> list[RLTTransition]:
    """The transitions of every episode of `cache`, in order (see the module docstring).

    Args:
        cache: Successful expert episodes, each ending at the step that solved the task.
        featurizer: The run's feature model (`z_rl` and the reference chunk).
        chunk_len: H, the actor's chunk length.
        reference_on_interventions: As `Stage2Config.reference_on_interventions`.
        final_chunks: Keep each episode's last this many chunks; None: all.

    Raises:
        ValueError: When the cache's actions or the chunk length do not fit the feature
            model, or a chunk's first frame has no images.
    """
    check_fits(cache, featurizer, chunk_len, final_chunks)
    episodes = [np.flatnonzero(cache.episode_index == e) for e in np.unique(cache.episode_index)]
    starts = [chunk_starts(steps, chunk_len, final_chunks) for steps in episodes]
    finals = [last_image_step(cache, steps) for steps in episodes]
    observed_steps = sorted({int(step) for step in np.concatenate([*starts, finals])})
    observations = featurize_steps(cache, featurizer, observed_steps)
    transitions = []
    for steps, episode_starts, final in zip(episodes, starts, finals, strict=True):
        episode_end = int(steps[-1]) + 1
        next_steps = [*episode_starts[1:], final]
        for start, next_step in zip(episode_starts, next_steps, strict=True):
            end = min(start + chunk_len, episode_end)
            solved = end == episode_end  # the success step terminates the episode
            info = expert_chunk_info(cache.actions[start:end], solved)
            transitions.append(
                build_transition(
                    observations[start], observations[next_step], info,
                    terminated=solved, truncated=False, chunk_len=chunk_len,
                    reference_on_interventions=reference_on_interventions,
                )
            )  # fmt: skip
    return transitions


def check_fits(
    cache: FrameCache, featurizer: RLTFeatureSource, chunk_len: int, final_chunks: int | None
) -> None:
    """Refuse a cache or chunk length the feature model cannot serve, or no chunk kept.

    Raises:
        ValueError: Naming the mismatch and the fix.
    """
    action_dim = cache.actions.shape[-1]
    if action_dim != featurizer.action_dim:
        raise ValueError(
            f"frame cache actions have {action_dim} entries; the feature model acts with "
            f"{featurizer.action_dim}: convert demonstrations of the run's env with its checkpoint"
        )
    if not 1 <= chunk_len <= featurizer.chunk_len:
        raise ValueError(
            f"chunk_len={chunk_len} must lie in 1..{featurizer.chunk_len} (the feature model's "
            "reference chunk); give the run's --stage2.chunk-len"
        )
    if final_chunks is not None and final_chunks < 1:
        raise ValueError(f"final_chunks={final_chunks}: keep at least 1, or None (every chunk)")


def chunk_starts(steps: np.ndarray, chunk_len: int, final_chunks: int | None) -> np.ndarray:
    """The steps of one episode (`steps`, contiguous) where its chunks start."""
    starts = steps[::chunk_len]
    return starts if final_chunks is None else starts[-final_chunks:]


def last_image_step(cache: FrameCache, steps: np.ndarray) -> int:
    """The last step of one episode that has images (its final observation is not cached)."""
    imaged = np.intersect1d(cache.image_step, steps)
    if len(imaged) == 0:
        raise ValueError(f"frame cache: episode {cache.episode_index[steps[0]]} has no images")
    return int(imaged[-1])


def expert_chunk_info(executed_action: np.ndarray, solved: bool) -> dict[str, Any]:
    """The RLT env's info of a stored chunk the expert drove (read by `ChunkInfo`).

    The peg env's reward is sparse: 1 at the step that solves the task, the chunk's last
    when `solved`.
    """
    rewards = np.zeros(len(executed_action), np.float32)
    rewards[-1] = float(solved)
    return {
        "record_transition": True,
        "chunk_len": len(executed_action),
        "executed_action": executed_action,
        "chunk_rewards": rewards,
        "intervene_flag": True,
    }


def featurize_steps(
    cache: FrameCache, featurizer: RLTFeatureSource, steps: list[int]
) -> dict[int, dict[str, np.ndarray]]:
    """The RLT observation of each step of `steps`, as the RLT wrapper computes it.

    Raises:
        ValueError: When a step has no images (collected with --image-every not dividing H).
    """
    image_row = {int(step): row for row, step in enumerate(cache.image_step)}
    missing = sorted(set(steps) - set(image_row))
    if missing:
        raise ValueError(
            f"frame cache: steps {missing[:5]} start a chunk but have no images; collect with "
            "an --image-every that divides the chunk length"
        )
    state_space = gym.spaces.Box(-np.inf, np.inf, cache.state.shape[1:], np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (featurizer.action_dim,), np.float32)
    space = rlt_observation_space(featurizer, state_space, action_space)
    observations = {}
    for first in tqdm(range(0, len(steps), FEATURIZE_BATCH), desc="featurizing chunk starts"):
        batch_steps = steps[first : first + FEATURIZE_BATCH]
        raw = [raw_observation(cache, image_row[step], step) for step in batch_steps]
        tasks = [cache.tasks[cache.task_index[step]] for step in batch_steps]
        batch = rlt_observations(featurizer, raw, tasks, space)
        for index, step in enumerate(batch_steps):
            observations[step] = {key: values[index] for key, values in batch.items()}
    return observations


def raw_observation(cache: FrameCache, image_row: int, step: int) -> dict[str, np.ndarray]:
    """The raw env observation a cached frame was recorded from (DESIGN.md §2)."""
    return {
        "image": cache.image[image_row],
        "wrist_image": cache.wrist_image[image_row],
        "state": cache.state[step],
    }


def save_transitions(transitions: list[RLTTransition], dims: RLTDims, path: Path) -> None:
    """Write `transitions` in the replay buffer's `.npz` format (`ReplayBuffer.save`)."""
    chunk_len = len(transitions[0].action)
    buffer = ReplayBuffer(dims, chunk_len, capacity=len(transitions))
    stored = buffer.add_many(transitions)
    if stored != len(transitions):
        raise ValueError(
            f"{len(transitions) - stored} of {len(transitions)} demonstration transitions hold "
            "NaN or inf (see the warning above); drop or re-record those episodes"
        )
    buffer.save(path)


def check_image_size(cache: FrameCache, checkpoint_dir: Path) -> None:
    """Refuse images of another size than the env renders for the checkpoint.

    Raises:
        ValueError: Naming both sizes and the fix.
    """
    image_size = read_config(checkpoint_dir)["vla"]["image_size"]
    if cache.image.shape[1:3] != (image_size, image_size):
        raise ValueError(
            f"frame cache images are {cache.image.shape[1:3]}; the RLT env renders "
            f"{image_size}x{image_size} for {checkpoint_dir}: collect with --image-size "
            f"{image_size}"
        )


def convert(args: DemoTransitionArgs) -> int:
    """Write the transitions of `args.cache` to `args.output`; returns how many.

    Raises:
        FileExistsError: When the output exists.
        ValueError: When the cache does not fit the checkpoint or the chunk length.
    """
    if args.output.exists():
        raise FileExistsError(f"{args.output} exists; choose a new --output or remove it")
    if args.output.suffix != ".npz":
        raise ValueError(f"--output {args.output} must end in .npz")
    checkpoint_dir = args.checkpoint or DEFAULT_CHECKPOINT_DIR
    cache = FrameCache.load(args.cache)
    check_image_size(cache, checkpoint_dir)
    featurizer = load_featurizer(checkpoint_dir, resolve_device(args.device))
    transitions = demo_transitions(
        cache, featurizer, args.chunk_len, args.reference_on_interventions, args.final_chunks
    )
    first = transitions[0]
    dims = RLTDims(len(first.z_rl), len(first.proprio), *first.ref_chunk.shape)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    save_transitions(transitions, dims, args.output)
    return len(transitions)


def main() -> None:
    """Entry point of `rpent-demo-transitions`."""
    with command("rpent-demo-transitions"):
        args = tyro.cli(DemoTransitionArgs)
        count = convert(args)
        print(f"wrote {count} transitions to {args.output.resolve()}")


if __name__ == "__main__":
    main()
