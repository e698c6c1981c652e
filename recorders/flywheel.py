"""The flywheel export (DESIGN.md §7): trajectory records -> LeRobot dataset + report.

Successful, VLA-driven actions of trajectory records become a LeRobot v3.0 dataset at
`O/train/`, and `O/report.json` counts every exclusion by reason. `export_records` applies
the same rules with any `recorders.flywheel_sink.FrameSink` (a Stage 1 frame cache:
`rpent_agents.stage1.record_export`). The raw records are only read. `O` must not exist and
appears only when complete (it is built in a hidden temporary sibling and renamed at the
end). With nothing eligible, `O` holds only the report.

Opt in: `include_sources=("actor",)` also exports the RL actor's executed actions (linked to
the actor's predictions, `recorders.flywheel_rules`); `key_style="lerobot"` names the features
as LeRobot's policies expect (`recorders.lerobot_io`).
A full disk while writing raises `ExportWriteError` naming `O`, and removes the staging
sibling; a killed export leaves only that hidden sibling, never an `O` that looks complete.
A broken record is never an error: each task that is not exported is counted under its reason
(a task the recorder could not finish writing: "run_unfinished" or "record_write_failed").
Memory stays flat in the number of steps: frames stream into LeRobot's episode buffer,
decoded at most PREFETCH_FRAMES ahead of it (a frame cache, held in memory, grows). Per task
only its report line and the three `task.json` fields of the one-robot check are kept
(bench/long_run_memory.py export).
"""

from __future__ import annotations

import functools
import gc
import itertools
import json
import logging
import os
import shutil
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
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
from recorders.flywheel_sink import TASK_KEY, FrameSink, LeRobotSink, SinkFactory
from recorders.lerobot_io import ACTION_KEY, KEY_STYLES, KeyStyle, staged_output_dir, staging_dir
from recorders.trajectory_reader import RecordError, TrajectoryReader, find_task_dirs

logger = logging.getLogger(__name__)
REPORT_FILE = "report.json"
PREFETCH_FRAMES = 32  # frames decoded ahead of the sink (bounded memory)


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


class _FrameLayout:
    """The keys, shapes and dtypes of an export's first frame; every later frame must match."""

    def __init__(self) -> None:
        self.signature: dict[str, tuple[tuple[int, ...], str]] | None = None

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


def _end_episode(sink: FrameSink, outcome: TaskOutcome) -> None:
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


@dataclass
class _Destination:
    """Where an export's frames go, and what every frame is checked against."""

    sink: FrameSink
    sources: tuple[str, ...]
    layout: _FrameLayout = field(default_factory=_FrameLayout)


def _export_task(item: _Task, destination: _Destination, pool: ThreadPoolExecutor) -> None:
    """Select, load and write the frames of one successful task."""
    sink = destination.sink
    reader, outcome = item.reader, item.outcome
    actions = reader.read_records(fmt.ACTIONS_FILE)
    if actions.problems == [(0, "file_missing")]:
        outcome.reason = "actions_file_missing"
        return
    selection = select_actions(
        reader.read_records(fmt.PLANNERS_FILE),
        reader.read_records(fmt.PREDICTIONS_FILE),
        actions,
        destination.sources,
    )
    outcome.actions_seen = selection.actions_seen
    outcome.excluded_actions = selection.excluded_actions
    outcome.excluded_predictions = selection.excluded_predictions
    outcome.excluded_planner_records = selection.excluded_planner_records
    loaded = _prefetched(pool, reader, selection.kept)
    for run in contiguous_runs(selection.kept):
        for kept in run:
            try:
                frame = next(loaded).result()
                destination.layout.check(frame)
            except RecordError as error:
                outcome.excluded_actions[error.reason] += 1
                _end_episode(sink, outcome)  # a dropped action ends the run
                continue
            sink.add_frame(frame, kept.starts_chunk)
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
    tasks: list[_Task],
    report: ExportReport,
    output_dir: Path,
    sink_factory: SinkFactory,
    read_threads: int,
) -> None:
    """Write the frames and the report into a staging folder renamed to `output_dir` at the end."""
    with staged_output_dir(output_dir) as staging:
        staging.mkdir()
        destination = _Destination(sink_factory(staging, report), report.sources)
        eligible = [item for item in tasks if item.outcome.reason is None]
        try:
            with ThreadPoolExecutor(max(1, read_threads), "rpent-flywheel-read") as pool:
                for item in tqdm(eligible, desc="exporting tasks", disable=not eligible):
                    _export_task(item, destination, pool)
            written = destination.sink.finalize()
        except BaseException:
            destination.sink.abort()
            raise
        if written is not None:
            report.dataset_dir = str(output_dir / written)
        text = json.dumps(report.to_json(), indent=2)
        (staging / REPORT_FILE).write_text(text + "\n", encoding="utf-8")


def export_records(
    input_root: str | os.PathLike[str],
    output_dir: str | os.PathLike[str],
    sink_factory: SinkFactory,
    include_sources: tuple[str, ...] = (),
    read_threads: int = 1,
    key_style: KeyStyle = "rpent",
) -> ExportReport:
    """Export the kept actions under `input_root` through a sink, with `report.json`.

    The rules, the one-robot check, the staging folder and the report are the same whatever
    the sink writes (`export_flywheel`: a LeRobot dataset;
    `rpent_agents.stage1.record_export`: a Stage 1 frame cache).

    Args:
        input_root: One task folder (holds `task.json`), a run folder or any parent.
        output_dir: Folder to create: what the sink writes, counts in `report.json`.
        sink_factory: Makes the sink from the staging folder and the report.
        include_sources: Sources exported besides the VLA's: ("actor",) adds the RL actor's
            executed actions (the actor-data flywheel); () keeps the default rules.
        read_threads: Threads decoding the recorded images ahead of the sink (at least one).
        key_style: The feature names the report records (and a LeRobot sink uses).

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
        _write_export(tasks, report, output_dir, sink_factory, read_threads)
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


def export_flywheel(
    input_root: str | os.PathLike[str],
    output_dir: str | os.PathLike[str],
    image_writer_threads: int = 0,
    use_videos: bool = True,
    include_sources: tuple[str, ...] = (),
    key_style: KeyStyle = "rpent",
) -> ExportReport:
    """Export the successful, VLA-driven actions under `input_root` to a LeRobot dataset.

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
        ValueError: For bad options or an `output_dir` inside `input_root`.
        ExportWriteError: When writing the output fails (nothing is left at `output_dir`).
    """
    sink_factory = functools.partial(
        LeRobotSink, use_videos=use_videos, image_writer_threads=image_writer_threads
    )
    return export_records(
        input_root, output_dir, sink_factory, include_sources, image_writer_threads, key_style
    )
