"""Trajectory records -> Stage 1 frame cache, under the flywheel's rules, without lerobot.

`rpent-stage1 export-cache --from-records R --output-dir O [--include-sources actor]` is
`rpent-flywheel` with another sink: the same rules (`recorders.flywheel_rules`: successful
tasks, executed actions linked to a valid prediction of an exported source), the same episodes
(one per contiguous run of kept actions) and the same `O/report.json`, but the frames go to
`O/frames.npz` (`FrameCache`) instead of a LeRobot dataset in `O/train/`. Only numpy, Pillow
and the recorders are needed, so a machine without lerobot (the GPU machine) turns its own
records into fine-tuning data for `rpent-stage1 train --data O/frames.npz --init-from C`.

The cache keeps `state`, `actions` and the instruction of each frame, and the two cameras
(`image`, `wrist_image`) of the frames that start a chunk: the steps a prediction was made
from. Those are the frames Stage 1 trains on. A policy that executes its chunks open loop
chose the action of a mid-chunk frame from an observation steps earlier; trained to predict
the next chunk from the mid-chunk frame, the VLA learns to continue a plan it cannot see. On
the peg task the embedded default reproduces its own recorded chunk at chunk starts (squared
error 0.000) but not from mid-chunk frames (0.06-0.21 in normalised units), and a fine-tune
on every frame lost 19-24 points (bench/RESULTS.md). Other observation keys are not kept.
The cache is built in memory (~100 KB an image frame at 128 px) and written when the export
ends.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from recorders.flywheel import export_records
from recorders.flywheel_report import ExportReport
from rpent_agents.stage1.frame_cache import (
    CACHE_FILE,
    IMAGE_KEYS,
    NotDemonstrationDataError,
    cache_from_episodes,
)

FRAME_KEYS = (*IMAGE_KEYS, "state", "actions", "task")
"""What the cache keeps of a frame that starts a chunk (the others: all but the images)."""

logger = logging.getLogger(__name__)


class FrameCacheSink:
    """A `recorders.flywheel_sink.FrameSink` gathering the export's frames into `frames.npz`."""

    def __init__(self, export_dir: Path, report: ExportReport) -> None:
        """Write `export_dir/frames.npz` at `finalize()`; `report` names the records."""
        self.path = Path(export_dir) / CACHE_FILE
        self.input_root = report.input_root
        self.episodes: list[list[dict[str, Any]]] = []
        self.episode: list[dict[str, Any]] = []

    def add_frame(self, frame: dict[str, Any], starts_chunk: bool) -> None:
        """Keep the cache's keys of `frame` in the episode being gathered.

        Every frame keeps its state, action and instruction (the chunk targets of the frames
        before it); only a frame that starts its prediction's chunk keeps its images, so only
        such frames are trained on.

        Raises:
            NotDemonstrationDataError: When the recorded observation lacks a camera or `state`.
        """
        missing = [key for key in FRAME_KEYS if key not in frame]
        if missing:
            raise NotDemonstrationDataError(
                f"{self.input_root}: the recorded frames hold {sorted(frame)}, without"
                f" {missing}; a Stage 1 frame cache needs {list(FRAME_KEYS)}: record an env with"
                " both cameras and a state (the peg env with obs_mode 'rgb')"
            )
        kept_keys = FRAME_KEYS if starts_chunk else FRAME_KEYS[len(IMAGE_KEYS) :]
        self.episode.append({key: frame[key] for key in kept_keys})

    def end_episode(self) -> int:
        """Close the episode being gathered; returns its frames."""
        frames = len(self.episode)
        if frames:
            self.episodes.append(self.episode)
        self.episode = []
        return frames

    def abort(self) -> None:
        """Drop the gathered frames."""
        self.episodes, self.episode = [], []

    def finalize(self) -> str | None:
        """Write the cache; returns "frames.npz" (None when no frame starting a chunk came)."""
        if not any(IMAGE_KEYS[0] in frame for episode in self.episodes for frame in episode):
            return None
        cache = cache_from_episodes(self.episodes)
        logger.info(
            "%d frames, %d of them start a chunk (trained on)", len(cache), len(cache.image_step)
        )
        cache.save(self.path)
        self.episodes = []
        return CACHE_FILE


def export_frame_cache(
    input_root: str | os.PathLike[str],
    output_dir: str | os.PathLike[str],
    include_sources: tuple[str, ...] = (),
    read_threads: int = 4,
) -> ExportReport:
    """Export the records under `input_root` to `output_dir/frames.npz` and `report.json`.

    Args:
        input_root: One task folder (holds `task.json`), a run folder or any parent.
        output_dir: Folder to create (must not exist); with nothing eligible it holds only
            the report.
        include_sources: ("actor",) also exports the RL actor's executed actions.
        read_threads: Threads decoding the recorded PNG images.

    Returns:
        The report (`dataset_dir` names the cache file).

    Raises:
        NotDemonstrationDataError: When the recorded frames lack a camera or `state`.
        FileExistsError: When `output_dir` exists.
        MixedRecordsError: When the records mix envs, robots or control rates (and the other
            errors of `recorders.flywheel.export_records`).
    """
    return export_records(input_root, output_dir, FrameCacheSink, include_sources, read_threads)
