"""Trajectory records (DESIGN.md §6): `TrajectoryWriter` writes them, `TrajectoryReader` reads them.

One writer records one run: every task (episode) gets its own folder
`<output_dir>/trajectories/<task_id>/` with `task.json`, `planners.jsonl`, `predictions.jsonl`,
`actions.jsonl` and `artifacts/` (PNG images of the pre-action observations). The writer is
also the run's `ProvenanceLog` (`recorders.provenance_records`): planners, VLA tools and
policy switches log through it.

Ids (`req-N`, `call-N`, `pred-N`) are unique over the writer's whole life, so an id kept from
an earlier task can never link to a record of the current one. An action label
(`set_action_source`) lasts until the next call or until the task is closed; a new task starts
with `default_source`.

Guarantees under long and unlucky runs (tests/recorders/test_memory_growth.py,
test_concurrent_writers.py, test_disk_full.py, test_record_kill.py):
- Memory stays flat: nothing is kept per step or per task (lines go to the OS as they are
  written; images wait in a bounded queue); 10^6 steps: bench/long_run_memory.py record.
- Writers never overwrite each other: a task folder is created with one `mkdir`, which fails
  when the name is taken, so writers in several processes can share a run folder (derived
  names get a suffix; an explicit `task_id` that is taken raises FileExistsError).
- A full disk raises `RecordWriteError` naming the file (`ImageWriteError` for an image), and
  the task stops taking records. Earlier tasks are untouched; the broken task's `task.json`
  says `result.record_write_error` when it can still be written (exported as reason
  "record_write_failed"), else it stays unfinished ("run_unfinished").
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import time
import weakref
from collections.abc import Mapping
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from recorders import record_format as fmt
from recorders.image_writer import DEFAULT_PNG_COMPRESSION, BackgroundImageWriter, ImageWriteError
from recorders.lerobot_io import is_image
from recorders.provenance import ActionSource
from recorders.provenance_records import ActionLabel, ProvenanceRecords
from recorders.record_format import RecordWriteError, TaskMetadata
from recorders.trajectory_reader import RecordError, TrajectoryReader, find_task_dirs

logger = logging.getLogger(__name__)
__all__ = [
    "ActionLabel",
    "RecordError",
    "RecordWriteError",
    "TaskMetadata",
    "TrajectoryReader",
    "TrajectoryWriter",
    "find_task_dirs",
]
END_REASONS = ("terminated", "truncated", "reset", "closed")


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class _OpenTask:
    """Files of the task being recorded."""

    def __init__(self, task_dir: Path, task_json: dict[str, Any]) -> None:
        self.dir = task_dir
        self.task_json = task_json
        (task_dir / fmt.ARTIFACTS_DIR).mkdir()
        fmt.write_json_atomic(task_dir / fmt.TASK_FILE, task_json)
        self.planners = fmt.JsonlAppender(task_dir / fmt.PLANNERS_FILE)
        self.predictions = fmt.JsonlAppender(task_dir / fmt.PREDICTIONS_FILE)
        self.actions = fmt.JsonlAppender(task_dir / fmt.ACTIONS_FILE)
        self.step = 0
        self.finished = False
        self.image_failures_before = 0

    @property
    def appenders(self) -> tuple[fmt.JsonlAppender, ...]:
        return self.planners, self.predictions, self.actions

    def write_failure(self) -> str | None:
        """Why a record line of the task could not be written (the first), None if none."""
        return next((a.failure for a in self.appenders if a.failure is not None), None)

    def close_files(self) -> None:
        for appender in self.appenders:
            appender.close()


class TrajectoryWriter(ProvenanceRecords):
    """Records tasks of one run under `output_dir/trajectories/` and logs their provenance.

    Implements `recorders.provenance.ProvenanceLog` (through `ProvenanceRecords`).
    `RecordTrajectory` drives it from an env; it can also be driven by hand (a real-robot
    script).

    Example:
        >>> writer = TrajectoryWriter("runs/r1", default_source="scripted")
        >>> writer.start_task(TaskMetadata(env_id="RPent/PegInsertionSideWideClearance-v1", fps=10))
        'RPent_PegInsertionSideWideClearance-v1-seedNone-ep0000'
        >>> writer.record_action(action, observation, reward=0.0, terminated=False, truncated=False)
        >>> writer.finish_task(environment_success=False, end_reason="truncated")
        >>> writer.close()
    """

    def __init__(
        self,
        output_dir: str | os.PathLike[str],
        *,
        default_source: ActionSource | None = None,
        image_writer_threads: int = 1,
        image_queue_size: int = 64,
        png_compression: int = DEFAULT_PNG_COMPRESSION,
    ) -> None:
        """Prepare `output_dir/trajectories/` (an existing run folder gets new tasks added).

        Args:
            output_dir: Run folder.
            default_source: Source recorded for actions nobody labelled (None: recorded as
                null, i.e. unknown; the exporter drops them).
            image_writer_threads: Threads writing PNG images (0: in the caller's thread).
            image_queue_size: Images that may wait for a writer thread before recording blocks.
            png_compression: zlib level of the PNG artifacts, 0 (default: fastest, ~2x the
                disk) to 9 (smallest, slowest).
        """
        super().__init__(default_source)
        self.output_dir = Path(output_dir)
        self.trajectories_dir = self.output_dir / fmt.TRAJECTORIES_DIR
        self.trajectories_dir.mkdir(parents=True, exist_ok=True)
        self._images = BackgroundImageWriter(
            image_writer_threads, image_queue_size, png_compression
        )
        self._task: _OpenTask | None = None
        self._tasks_started = 0
        self._closed = False
        # Finish the open task at interpreter exit (without keeping the writer alive).
        self._exit_hook = functools.partial(_close_if_alive, weakref.ref(self))
        atexit.register(self._exit_hook)

    @property
    def task_dir(self) -> Path | None:
        """Folder of the task being recorded, None between tasks."""
        return self._task.dir if self._task else None

    def start_task(self, metadata: TaskMetadata, task_id: str | None = None) -> str:
        """Open a new task folder (closing the current task first) and write its `task.json`.

        Args:
            metadata: What the task is (env, seed, instruction, ...).
            task_id: Folder name; None derives `<env>-seed<seed>-ep<episode>` and adds a
                suffix when that folder exists.

        Returns:
            The task id.

        Raises:
            FileExistsError: When the explicit `task_id` folder exists (never overwritten).
            ValueError: When `task_id` is not a plain folder name.
            RecordWriteError: When the task's folder or files cannot be created (disk full).
        """
        with self._lock:
            self._require_open()
            self.close_task()
            try:
                task_dir = self._make_task_dir(metadata, task_id)
                self._task = self._open_task(task_dir, metadata)
            except (FileExistsError, RecordWriteError):
                raise
            except OSError as error:
                raise RecordWriteError(
                    error.errno,
                    f"could not create a task in {self.trajectories_dir} ({error}); "
                    f"{fmt.FREE_SPACE_HINT}",
                ) from error
            self._task.image_failures_before = self._images.failure_count
            self._tasks_started += 1
            return task_dir.name

    def _open_task(self, task_dir: Path, metadata: TaskMetadata) -> _OpenTask:
        """The files of a new task, its first `task.json` written."""
        task_json = {
            "schema_version": fmt.SCHEMA_VERSION,
            "task_id": task_dir.name,
            "episode_index": self._tasks_started,
            **asdict(metadata),
            "default_source": self.default_source,
            "started_at": _now(),
            "finished_at": None,
            "result": {"environment_success": None, "end_reason": None, "steps": 0},
        }
        return _OpenTask(task_dir, task_json)

    def record_action(
        self,
        action: Any,
        observation: Mapping[str, Any],
        reward: float,
        terminated: bool,
        truncated: bool,
    ) -> None:
        """Append one executed action with its pre-action observation and the current label.

        Images of `observation` (uint8 HxWx3) go to `artifacts/` on the writer threads.

        Raises:
            RuntimeError: When no task is open.
            ImageWriteError: When an earlier image write failed.
        """
        with self._lock:
            task = self._require_task()
            step = task.step
            images, observation_record = self._split_observation(step, observation)
            record = {
                "step": step,
                "action": np.asarray(action),
                **self.take_action_label(),
                "observation": observation_record,
                "reward": float(reward),
                "terminated": bool(terminated),
                "truncated": bool(truncated),
                "time": time.time(),
            }
            task.actions.append(record)
            task.step += 1
            for relative_path, image in images:  # after the line: a failure loses no record
                self._images.submit(task.dir / relative_path, image)

    def finish_task(self, environment_success: bool | None, end_reason: str) -> None:
        """Write the final `task.json` of the open task (files stay open for late planner logs).

        Args:
            environment_success: The env's own verdict (`info["success"]`), None without one.
            end_reason: "terminated", "truncated", "reset" or "closed".

        Raises:
            ImageWriteError: When an image of the task could not be written (the final
                `task.json` is written first and names the error).
            RecordWriteError: When the final `task.json` cannot be written.
        """
        if end_reason not in END_REASONS:
            raise ValueError(f"end_reason={end_reason!r}: use one of {END_REASONS}")
        with self._lock:
            task = self._require_task()
            image_error = None
            try:
                self._images.flush()
            except ImageWriteError as error:
                image_error = error
            task.task_json["finished_at"] = _now()
            task.task_json["result"] = {
                "environment_success": environment_success,
                "end_reason": end_reason,
                "steps": task.step,
                "image_write_failures": self._images.failure_count - task.image_failures_before,
                "image_write_error": str(image_error) if image_error else None,
                "record_write_error": task.write_failure(),
            }
            fmt.write_json_atomic(task.dir / fmt.TASK_FILE, task.task_json)
            task.finished = True
            if image_error is not None:
                raise image_error

    def close_task(self, end_reason: str = "closed") -> None:
        """Close the open task's files; an unfinished task is finished without a verdict."""
        with self._lock:
            task = self._task
            if task is None:
                return
            try:
                if not task.finished:
                    self.finish_task(environment_success=None, end_reason=end_reason)
            finally:
                task.close_files()
                self._task = None
                self.reset_action_label()

    def close(self) -> None:
        """Close the open task and stop the image writers (idempotent)."""
        with self._lock:
            if self._closed:
                return
            try:
                self.close_task()
            finally:
                self._closed = True
                atexit.unregister(self._exit_hook)
                self._images.close()

    def raise_if_failed(self) -> None:
        """Raise `ImageWriteError` when a background image write failed."""
        self._images.raise_if_failed()

    # internals -----------------------------------------------------------------------------

    def _require_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"TrajectoryWriter({self.output_dir}) is closed")

    def _require_task(self) -> _OpenTask:
        self._require_open()
        if self._task is None:
            raise RuntimeError(
                "no task is being recorded: call env.reset() on the RecordTrajectory wrapper"
                " (or TrajectoryWriter.start_task) before logging"
            )
        return self._task

    def _make_task_dir(self, metadata: TaskMetadata, task_id: str | None) -> Path:
        if task_id is not None:
            return fmt.create_task_dir(self.trajectories_dir, task_id, derived=False)
        seed = metadata.seed if metadata.seed is not None else metadata.episode_seed
        env_name = fmt.safe_name(metadata.env_id or "env")
        base = f"{env_name}-seed{seed}-ep{self._tasks_started:04d}"
        return fmt.create_task_dir(self.trajectories_dir, base, derived=True)

    def _split_observation(
        self, step: int, observation: Mapping[str, Any]
    ) -> tuple[list[tuple[str, np.ndarray]], dict[str, Any]]:
        """Images to write (path under the task, array) and the record: vectors inline."""
        images: list[tuple[str, np.ndarray]] = []
        record: dict[str, Any] = {}
        for key, value in observation.items():
            array = np.asarray(value)
            if is_image(array):
                relative_path = f"{fmt.ARTIFACTS_DIR}/step{step:06d}_{fmt.safe_name(str(key))}.png"
                images.append((relative_path, array))
                record[key] = relative_path
            else:
                record[key] = array
        return images, record


def _close_if_alive(writer_ref: weakref.ref[TrajectoryWriter]) -> None:
    writer = writer_ref()
    if writer is None:
        return
    try:
        writer.close()
    except (RecordWriteError, ImageWriteError) as error:  # raised to the recording code before
        logger.warning("closing %s at exit: %s", writer.output_dir, error)
