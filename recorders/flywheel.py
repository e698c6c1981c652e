"""The flywheel export (DESIGN.md §7): trajectory records -> LeRobot dataset + report.

Successful, VLA-driven actions of trajectory records become a LeRobot v3.0 dataset at
`O/train/`, and `O/report.json` counts every exclusion by reason. The raw records are only
read. `O` must not exist and appears only when complete (it is built in a hidden temporary
sibling and renamed at the end). With nothing eligible, `O` holds only the report.

Opt in: `include_sources=("actor",)` also exports the RL actor's executed actions (linked to
the actor's predictions, `recorders.flywheel_rules`); `key_style="lerobot"` names the features
as LeRobot's policies expect (`recorders.lerobot_io`).
A full disk while writing raises `ExportWriteError` naming `O`, and removes the staging
sibling; a killed export leaves only that hidden sibling, never an `O` that looks complete.
A broken record is never an error: each task that is not exported is counted under its reason
(a task the recorder could not finish writing: "run_unfinished" or "record_write_failed").
Memory stays flat in the number of steps: frames stream into LeRobot's episode buffer,
decoded at most PREFETCH_FRAMES ahead of it. Per task only its report line and the three
`task.json` fields of the one-robot check are kept (bench/long_run_memory.py export).
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import json
import logging
import os
import shutil
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from recorders import record_format as fmt
from recorders.flywheel_report import ExportReport, TaskOutcome
from recorders.flywheel_rules import (
    VERDICT_REASONS,
    KeptAction,
    contiguous_runs,
    exported_sources,
    select_actions,
    task_exclusion,
)
from recorders.lerobot_io import (
    ACTION_KEY,
    KEY_STYLES,
    KeyStyle,
    create_dataset,
    dataset_features,
    staged_output_dir,
    staging_dir,
    styled_keys,
)
from recorders.trajectory_reader import RecordError, TrajectoryReader, find_task_dirs

logger = logging.getLogger(__name__)
REPORT_FILE = "report.json"
DATASET_DIR = "train"
PREFETCH_FRAMES = 32  # frames decoded ahead of the LeRobot writer (bounded memory)
TASK_KEY = "task"


class MixedRecordsError(ValueError):
    """The input holds records of more than one robot, env or control rate."""


class ExportWriteError(OSError):
    """The export could not be written (disk full, ...); no output folder was left behind."""


@dataclass
class _Task:
    """A task that passed `task.json`'s checks: only what the export needs of it is kept."""

    reader: TrajectoryReader
    robot_key: tuple[Any, Any, Any]  # env_id, robot, fps
    outcome: TaskOutcome


def _read_tasks(input_root: Path, report: ExportReport) -> list[_Task]:
    """Read every `task.json`; tasks that cannot be exported only get their outcome."""
    task_dirs, incomplete = find_task_dirs(input_root)
    for folder in incomplete:
        report.tasks.append(TaskOutcome(path=_relative(folder, input_root), reason="no_task_json"))
    readable = []
    for folder in task_dirs:
        outcome = TaskOutcome(path=_relative(folder, input_root))
        report.tasks.append(outcome)
        reader = TrajectoryReader(folder)
        try:
            task = reader.read_task()
        except RecordError as error:
            outcome.reason = error.reason
            continue
        outcome.task_id = task.get("task_id") if isinstance(task.get("task_id"), str) else None
        outcome.reason = task_exclusion(task)
        if outcome.reason is None or outcome.reason in VERDICT_REASONS:
            robot_key = (task["env_id"], task["robot"], task["fps"])
            readable.append(_Task(reader, robot_key, outcome))
    report.tasks.sort(key=lambda outcome: outcome.path)
    return readable


def _relative(folder: Path, root: Path) -> str:
    return folder.relative_to(root).as_posix() if folder != root else "."


def _check_one_robot(tasks: list[_Task], report: ExportReport) -> None:
    """Refuse inputs that mix env ids, robots or control rates (one robot per export)."""
    groups: dict[tuple[Any, Any, Any], list[str]] = {}
    for item in tasks:
        groups.setdefault(item.robot_key, []).append(item.outcome.path)
    if len(groups) > 1:
        listing = "; ".join(
            f"env_id={env_id!r} robot={robot!r} fps={fps}: {paths[0]} and {len(paths) - 1} more"
            for (env_id, robot, fps), paths in groups.items()
        )
        raise MixedRecordsError(
            f"{report.input_root} mixes records of different envs/robots ({listing}); export one"
            " robot at a time by passing a narrower --input-root"
        )
    if groups:
        report.env_id, report.robot, report.fps = next(iter(groups))


def _vector(values: Any) -> np.ndarray:
    floats = [fmt.float_from_json(value) for value in values] if isinstance(values, list) else None
    if not floats or any(value is None for value in floats):
        raise RecordError("observation_wrong_type", f"observation vector {values!r}")
    vector = np.asarray(floats, dtype=np.float32)
    if not np.all(np.isfinite(vector)):
        raise RecordError("observation_not_finite", f"observation vector {values!r}")
    return vector


def load_frame(reader: TrajectoryReader, kept: KeptAction) -> dict[str, Any]:
    """A LeRobot frame (observation arrays, action, instruction) of one kept action.

    Raises:
        RecordError: When an image is missing or unreadable, or a vector is malformed.
    """
    frame: dict[str, Any] = {}
    for key, value in kept.observation.items():
        frame[key] = reader.load_image(value) if isinstance(value, str) else _vector(value)
    frame[ACTION_KEY] = kept.action
    frame[TASK_KEY] = kept.instruction
    return frame


class _DatasetSink:
    """Creates the dataset at the first frame; frames stream into the episode being written.

    Only LeRobot's episode buffer grows with an episode's length, never a list of decoded
    frames, so memory stays flat however long the episodes are.
    """

    def __init__(self, root: Path, report: ExportReport, use_videos: bool, threads: int) -> None:
        self.root = root
        self.report = report
        self.use_videos = use_videos
        self.threads = threads
        self.dataset = None
        self.signature: dict[str, tuple[tuple[int, ...], str]] | None = None
        self.dataset_keys: dict[str, str] = {}  # frame key -> feature name in the key style
        self.episode_frames = 0

    def check(self, frame: dict[str, Any]) -> None:
        """Raise RecordError("observation_mismatch") when `frame` differs from the first."""
        signature = {
            key: (np.shape(value), np.asarray(value).dtype.str)
            for key, value in frame.items()
            if key != TASK_KEY
        }
        if self.signature is None:
            self.signature = signature
        elif signature != self.signature:
            raise RecordError("observation_mismatch", f"frame keys/shapes {signature}")

    def add_frame(self, frame: dict[str, Any]) -> None:
        """Append a checked frame to the episode being written."""
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

    def finalize(self) -> None:
        if self.dataset is not None:
            self.dataset.finalize()
            # LeRobot leaves its (now empty) image staging folders behind.
            shutil.rmtree(self.root / "images", ignore_errors=True)


def _end_episode(sink: _DatasetSink, outcome: TaskOutcome) -> None:
    frames = sink.end_episode()
    if frames:
        outcome.episodes += 1
        outcome.frames += frames


def _prefetched(
    pool: ThreadPoolExecutor, reader: TrajectoryReader, kept_actions: list[KeptAction]
) -> Iterator[Future[dict[str, Any]]]:
    """Futures of `load_frame` in order, decoded up to PREFETCH_FRAMES ahead on `pool`.

    Decoding the next frames overlaps with LeRobot writing the current ones.
    """
    pending: deque[Future[dict[str, Any]]] = deque()
    remaining = iter(kept_actions)
    for kept in itertools.islice(remaining, PREFETCH_FRAMES):
        pending.append(pool.submit(load_frame, reader, kept))
    while pending:
        future = pending.popleft()
        for kept in itertools.islice(remaining, 1):
            pending.append(pool.submit(load_frame, reader, kept))
        yield future


def _export_task(item: _Task, sink: _DatasetSink, pool: ThreadPoolExecutor) -> None:
    """Select, load and write the frames of one successful task."""
    reader, outcome = item.reader, item.outcome
    actions = reader.read_records(fmt.ACTIONS_FILE)
    if actions.problems == [(0, "file_missing")]:
        outcome.reason = "actions_file_missing"
        return
    selection = select_actions(
        reader.read_records(fmt.PLANNERS_FILE),
        reader.read_records(fmt.PREDICTIONS_FILE),
        actions,
        sink.report.sources,
    )
    outcome.actions_seen = selection.actions_seen
    outcome.excluded_actions = selection.excluded_actions
    outcome.excluded_predictions = selection.excluded_predictions
    outcome.excluded_planner_records = selection.excluded_planner_records
    loaded = _prefetched(pool, reader, selection.kept)
    for run in contiguous_runs(selection.kept):
        for _ in run:
            try:
                frame = next(loaded).result()
                sink.check(frame)
            except RecordError as error:
                outcome.excluded_actions[error.reason] += 1
                _end_episode(sink, outcome)  # a dropped action ends the run
                continue
            sink.add_frame(frame)
        _end_episode(sink, outcome)
    if outcome.frames == 0:
        outcome.reason = "no_exportable_actions"


def _remove_late_writes(output_dir: Path) -> None:
    """Remove what a half-written dataset's finalizers wrote after the staging folder was gone.

    LeRobot flushes its buffered metadata when the dataset object is collected; after a failed
    write (a full disk) that happens once the failure's traceback is released.
    """
    gc.collect()
    shutil.rmtree(staging_dir(output_dir), ignore_errors=True)


def _write_export(
    tasks: list[_Task], report: ExportReport, output_dir: Path, use_videos: bool, threads: int
) -> None:
    """Write the dataset and the report into a staging folder renamed to `output_dir` at the end."""
    with staged_output_dir(output_dir) as staging:
        staging.mkdir()
        sink = _DatasetSink(staging / DATASET_DIR, report, use_videos, threads)
        eligible = [item for item in tasks if item.outcome.reason is None]
        try:
            with ThreadPoolExecutor(max(1, threads), "rpent-flywheel-read") as pool:
                for item in tqdm(eligible, desc="exporting tasks", disable=not eligible):
                    _export_task(item, sink, pool)
            sink.finalize()
        except BaseException:
            sink.abort()
            raise
        if sink.dataset is not None:
            report.dataset_dir = str(output_dir / DATASET_DIR)
        text = json.dumps(report.to_json(), indent=2)
        (staging / REPORT_FILE).write_text(text + "\n", encoding="utf-8")


def export_flywheel(
    input_root: str | os.PathLike[str],
    output_dir: str | os.PathLike[str],
    image_writer_threads: int = 0,
    use_videos: bool = True,
    include_sources: tuple[str, ...] = (),
    key_style: KeyStyle = "rpent",
) -> ExportReport:
    """Export the successful, VLA-driven actions under `input_root` to `output_dir`.

    Args:
        input_root: One task folder (holds `task.json`), a run folder or any parent.
        output_dir: Folder to create: dataset in `train/`, counts in `report.json`.
        image_writer_threads: LeRobot image writer threads (0: one image at a time); as many
            threads (at least one) decode the recorded images ahead of the writer.
        use_videos: Store camera images as MP4 videos (True) or PNG frames (False).
        include_sources: Sources exported besides the VLA's: ("actor",) adds the RL actor's
            executed actions (the actor-data flywheel); () keeps the default rules.
        key_style: Feature names: "rpent" (`image`, `state`, `actions`, ...) or "lerobot"
            (`observation.images.image`, `observation.state`, `action`, ...).

    Returns:
        The report (also written to `output_dir/report.json`).

    Raises:
        FileExistsError: When `output_dir` exists.
        FileNotFoundError: When `input_root` is not a folder.
        MixedRecordsError: When the records mix envs, robots or control rates.
        ValueError: When `output_dir` lies inside `input_root`, or for a source that cannot
            be included.
        ExportWriteError: When writing the output fails (a full disk); `output_dir` and its
            staging folder are then absent.
    """
    sources = exported_sources(tuple(include_sources))
    if key_style not in KEY_STYLES:
        raise ValueError(f"key_style={key_style!r}: use one of {KEY_STYLES}")
    input_root, output_dir = Path(input_root).resolve(), Path(output_dir).resolve()
    if output_dir.is_relative_to(input_root):
        raise ValueError(
            f"output dir {output_dir} is inside input root {input_root}; raw records are never"
            " modified, choose an output dir outside it"
        )
    if output_dir.exists():
        raise FileExistsError(f"output dir {output_dir} already exists; choose a new path")
    report = ExportReport(str(input_root), str(output_dir), sources, key_style)
    tasks = _read_tasks(input_root, report)
    _check_one_robot(tasks, report)
    failure = None
    try:
        _write_export(tasks, report, output_dir, use_videos, image_writer_threads)
    except OSError as error:
        logger.debug("writing %s failed", output_dir, exc_info=True)
        failure = ExportWriteError(
            error.errno,
            f"could not write the export to {output_dir} ({error}); nothing is left there: "
            "free space on that disk or choose another --output-dir",
        )
    if failure is not None:  # outside the handler: its traceback no longer holds the dataset
        _remove_late_writes(output_dir)
        raise failure
    logger.info("exported %d frames, %d episodes to %s", report.frames, report.episodes, output_dir)
    return report
