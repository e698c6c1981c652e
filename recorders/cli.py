"""`rpent-flywheel`: export recorded trajectories to a LeRobot dataset (DESIGN.md §7).

`rpent-flywheel --input-root R --output-dir O [--image-writer-threads N]` writes `O/train/`
(only when something is eligible) and `O/report.json`, and prints the report's counts and
exclusions. Exit status 0 on success, 1 with a message naming the problem otherwise.

`--include-sources actor` also exports the RL actor's executed actions (the actor-data
flywheel; docs/flywheel.md says how they are linked); `--key-style lerobot` names the features
`observation.images.*`, `observation.state` and `action` for LeRobot's own policies.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import tyro

from recorders.flywheel import ExportWriteError, MixedRecordsError, export_flywheel
from recorders.lerobot_io import KeyStyle


@dataclass
class FlywheelArgs:
    """Export successful VLA-driven actions of trajectory records to a LeRobot v3.0 dataset."""

    input_root: Path
    """One trajectory folder (holds task.json), a run folder or any parent of runs."""
    output_dir: Path
    """Folder to create (must not exist): dataset in train/, counts in report.json."""
    image_writer_threads: int = 0
    """LeRobot image writer threads (0: one image at a time, in the exporting thread)."""
    use_videos: bool = True
    """Store camera images as MP4 videos (True) or PNG frames (False)."""
    include_sources: tuple[Literal["actor"], ...] = ()
    """Sources exported besides the VLA's: `actor` adds the RL actor's executed actions,
    each linked to the actor's prediction in its own `actor` tool call."""
    key_style: KeyStyle = "rpent"
    """Feature names: "rpent" (image, wrist_image, state, actions: the OpenPI/RLinf data
    configs) or "lerobot" (observation.images.*, observation.state, action)."""


def main() -> None:
    """Entry point of `rpent-flywheel`."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = tyro.cli(FlywheelArgs)
    try:
        report = export_flywheel(
            args.input_root,
            args.output_dir,
            image_writer_threads=args.image_writer_threads,
            use_videos=args.use_videos,
            include_sources=args.include_sources,
            key_style=args.key_style,
        )
    except (
        ExportWriteError,
        FileExistsError,
        FileNotFoundError,
        MixedRecordsError,
        ValueError,
    ) as error:
        raise SystemExit(f"rpent-flywheel: {error}") from error
    print(json.dumps(report.to_json(with_tasks=False), indent=2))


if __name__ == "__main__":
    main()
