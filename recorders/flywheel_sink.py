"""Where the flywheel export's frames go: the `FrameSink` protocol and its LeRobot sink.

The exporter (`recorders.flywheel.export_records`) applies the rules and hands each kept frame
to a sink, one episode per contiguous run of kept actions. `LeRobotSink` writes a LeRobot v3.0
dataset (`rpent-flywheel`); `rpent_agents.stage1.record_export.FrameCacheSink` writes a Stage 1
frame cache (`rpent-stage1 export-cache --from-records`), so both outputs hold the same frames.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from recorders.flywheel_report import ExportReport
from recorders.lerobot_io import ACTION_KEY, create_dataset, dataset_features, styled_keys

DATASET_DIR = "train"
TASK_KEY = "task"


class FrameSink(Protocol):
    """Receives the kept frames of an export, episode by episode.

    A frame is a flat dict: the observation's arrays (HxWx3 uint8 images, 1-D float32
    vectors), `actions` (float32) and `task` (the instruction). Every frame of one export has
    the same keys, shapes and dtypes (the exporter checks it before handing a frame over).
    """

    def add_frame(self, frame: dict[str, Any], starts_chunk: bool) -> None:
        """Append `frame` to the episode being written.

        `starts_chunk`: the frame's action is the first of its prediction's chunk, so the
        frame's observation is the one the prediction was made from.
        """

    def end_episode(self) -> int:
        """Close the episode being written; returns its frames (0: none, nothing written)."""

    def abort(self) -> None:
        """Drop what is half-written after a failure (the staging folder is removed next)."""

    def finalize(self) -> str | None:
        """Write what is left; returns what it wrote in the export folder (None: nothing)."""


SinkFactory = Callable[[Path, ExportReport], FrameSink]
"""Makes the sink of one export from the folder it writes in (the export's staging folder,
renamed to the output folder at the end) and the export's report (fps, robot, key style)."""


class LeRobotSink:
    """Creates a LeRobot dataset at the first frame; frames stream into the episode being written.

    Only LeRobot's episode buffer grows with an episode's length, never a list of decoded
    frames, so memory stays flat however long the episodes are.
    """

    def __init__(
        self,
        export_dir: Path,
        report: ExportReport,
        use_videos: bool = True,
        image_writer_threads: int = 0,
    ) -> None:
        """Write the dataset at `export_dir/train/`, named and styled after `report`."""
        self.root = export_dir / DATASET_DIR
        self.report = report
        self.use_videos = use_videos
        self.threads = image_writer_threads
        self.dataset = None
        self.dataset_keys: dict[str, str] = {}  # frame key -> feature name in the key style
        self.episode_frames = 0

    def add_frame(self, frame: dict[str, Any], starts_chunk: bool) -> None:
        """Append a checked frame to the episode being written (every frame, LeRobot-style)."""
        if self.dataset is None:
            observation = {k: v for k, v in frame.items() if k not in (ACTION_KEY, TASK_KEY)}
            features = dataset_features(
                observation, len(frame[ACTION_KEY]), use_videos=self.use_videos
            )
            self.dataset_keys = styled_keys(features, self.report.key_style)
            self.dataset = create_dataset(
                self.root,
                self.report.fps,
                {self.dataset_keys[key]: spec for key, spec in features.items()},
                robot_type=self.report.robot or "unknown",
                dataset_name=Path(self.report.output_dir).name,
                image_writer_threads=self.threads,
            )
        self.dataset.add_frame({self.dataset_keys.get(k, k): v for k, v in frame.items()})
        self.episode_frames += 1

    def end_episode(self) -> int:
        """Save the episode being written, if it has frames; returns how many it has."""
        frames, self.episode_frames = self.episode_frames, 0
        if frames:
            self.dataset.save_episode()
        return frames

    def abort(self) -> None:
        """Close a half-written dataset now: its finalizer must not write after the cleanup."""
        if self.dataset is not None:
            with contextlib.suppress(Exception):
                self.dataset.finalize()
            self.dataset = None

    def finalize(self) -> str | None:
        """Finish the dataset files; returns "train" (None when no frame came)."""
        if self.dataset is None:
            return None
        self.dataset.finalize()
        # LeRobot leaves its (now empty) image staging folders behind.
        shutil.rmtree(self.root / "images", ignore_errors=True)
        return DATASET_DIR
