"""The trajectory record format on disk: names, task.json fields, NaN-safe JSON, safe writes.

One task is one folder `<output-dir>/trajectories/<task_id>/` (DESIGN.md §6). JSON never
contains NaN or infinity: non-finite floats are written as the strings "NaN", "Infinity" and
"-Infinity", so every line stays valid JSON even when an action or a reward is not a number.

A write that fails (the disk is full, the folder was removed) raises `RecordWriteError`
naming the file: `task.json` keeps its previous content, and a JSONL file keeps every line
before the failed one (at most that line is cut, which readers report as
"truncated_last_line") and accepts no further line, so nothing is ever glued onto a cut one.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

SCHEMA_VERSION = 1
TRAJECTORIES_DIR = "trajectories"
TASK_FILE = "task.json"
PLANNERS_FILE = "planners.jsonl"
PREDICTIONS_FILE = "predictions.jsonl"
ACTIONS_FILE = "actions.jsonl"
ARTIFACTS_DIR = "artifacts"
NON_FINITE_NAMES = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
FREE_SPACE_HINT = "free space on that disk or record into another folder"


class RecordWriteError(OSError):
    """A record file could not be written (disk full, ...); `errno` is the system's reason."""


@dataclass
class TaskMetadata:
    """What `task.json` says about a task, so that its episode can be replayed and grouped.

    Attributes:
        env_id: Gymnasium id of the env (`env.spec.id`), None when it was not made by id.
        env_kwargs: Keyword arguments the env was made with (`env.spec.kwargs`).
        robot: Robot name (one robot per export); None when unknown.
        fps: Control frequency, the dataset's frames per second.
        instruction: The env's language instruction.
        seed: Seed passed to `reset`, None when unseeded.
        episode_seed: Seed that replays the episode (`info["episode_seed"]`) when the env says.
        reset_options: `options` passed to `reset`.
        suite: Benchmark suite (LIBERO, ...), when there is one.
        task_index: Task index within the suite.
        planner: Who planned, e.g. {"kind": "llm", "model": "..."}.
        extra: Anything else the caller wants stored.
    """

    env_id: str | None
    fps: int
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    robot: str | None = None
    instruction: str | None = None
    seed: int | None = None
    episode_seed: int | None = None
    reset_options: dict[str, Any] | None = None
    suite: str | None = None
    task_index: int | None = None
    planner: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def safe_name(text: str) -> str:
    """`text` as a folder or file name: runs of other characters than [A-Za-z0-9._-] become _."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._") or "task"


def create_task_dir(trajectories_dir: Path, name: str, derived: bool) -> Path:
    """Create a new task folder; an existing one is never reused or overwritten.

    Args:
        trajectories_dir: The run's `trajectories/` folder.
        name: Folder name (a plain name: letters, digits, '.', '_', '-').
        derived: The name was made up by the recorder: add `-1`, `-2`, ... when it is taken.

    Raises:
        FileExistsError: When a caller-given `name` is taken.
        ValueError: When `name` is not a plain folder name.
    """
    if safe_name(name) != name:
        raise ValueError(
            f"task_id={name!r}: use a plain folder name of letters, digits, '.', '_' and '-'"
        )
    for attempt in range(10_000 if derived else 1):
        task_dir = trajectories_dir / (name if attempt == 0 else f"{name}-{attempt}")
        try:
            task_dir.mkdir()
            return task_dir
        except FileExistsError:
            continue
    raise FileExistsError(
        f"task folder {trajectories_dir / name} already exists; records are never overwritten,"
        " choose another task_id"
    )


def _float_to_json(value: float) -> float | str:
    if math.isfinite(value):
        return value
    if math.isnan(value):
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


def to_json_safe(value: Any) -> Any:
    """Convert numpy arrays and scalars, tuples and paths into plain JSON values.

    Non-finite floats become "NaN" / "Infinity" / "-Infinity"; objects JSON cannot hold become
    their `repr`, so a record is always written rather than lost.

    Args:
        value: Any nested structure of dicts, lists, numbers, strings and arrays.

    Returns:
        A structure `json.dumps(..., allow_nan=False)` accepts.
    """
    if isinstance(value, np.ndarray):
        if value.dtype.kind == "f" and np.isfinite(value).all():
            return value.tolist()
        return to_json_safe(value.tolist())
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        return _float_to_json(value)
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, Mapping):
        return {str(key): to_json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [to_json_safe(item) for item in value]
    if isinstance(value, Path):
        return value.as_posix()
    return repr(value)


def dumps_record(record: Mapping[str, Any]) -> str:
    """One JSON line (no newline) for `record`, NaN-safe."""
    return json.dumps(to_json_safe(record), allow_nan=False, separators=(",", ":"))


def float_from_json(value: Any) -> float | None:
    """A float from a JSON number or a non-finite name; None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        return NON_FINITE_NAMES.get(value)
    return None


def write_json_atomic(path: Path, payload: Mapping[str, Any]) -> None:
    """Write `payload` to `path` through a temporary sibling and a rename (never half-written).

    Args:
        path: Destination file.
        payload: JSON object to write (made NaN-safe).

    Raises:
        RecordWriteError: When the file cannot be written (`path` is then unchanged).
    """
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    text = json.dumps(to_json_safe(payload), allow_nan=False, indent=2)
    try:
        with open(temporary, "w", encoding="utf-8") as handle:
            handle.write(text + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except OSError as error:
        temporary.unlink(missing_ok=True)
        raise RecordWriteError(
            error.errno, f"could not write {path} ({error}); it is unchanged: {FREE_SPACE_HINT}"
        ) from error


class JsonlAppender:
    """An append-only JSONL file: each record is one full line handed to the OS at once.

    A crash (even SIGKILL) loses at most the record being written; every earlier line is
    complete on disk. After a failed write the file takes no more lines (see the module).
    """

    def __init__(self, path: Path) -> None:
        """Open `path` for appending (created when missing), unbuffered."""
        self.path = path
        self._file = open(path, "ab", buffering=0)
        self.failure: str | None = None
        """Why a write failed (the file then takes no more lines); None while all succeeded."""
        self._failure_errno: int | None = None

    def append(self, record: Mapping[str, Any]) -> None:
        """Write `record` as one line.

        Raises:
            RecordWriteError: When this or an earlier line could not be written.
        """
        if self.failure is not None:
            raise RecordWriteError(self._failure_errno, self.failure)
        line = memoryview((dumps_record(record) + "\n").encode("utf-8"))
        try:
            while line:  # a write to a nearly full disk may take only part of the line
                line = line[self._file.write(line) :]
        except OSError as error:
            self._failure_errno = error.errno
            self.failure = (
                f"could not append a line to {self.path} ({error}); its earlier lines are "
                f"intact and it takes no more: {FREE_SPACE_HINT}"
            )
            raise RecordWriteError(error.errno, self.failure) from error

    def close(self) -> None:
        """Close the file (idempotent)."""
        self._file.close()


@dataclass
class JsonlContents:
    """The readable records of a JSONL file and the lines that could not be read.

    Attributes:
        records: (line number from 1, parsed JSON object) of every valid line.
        problems: (line number, reason) of every unreadable line; reasons are
            "truncated_last_line" (an unterminated last line, e.g. after a crash),
            "invalid_json" and "not_an_object".
    """

    records: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    problems: list[tuple[int, str]] = field(default_factory=list)


def _parse_line(raw_line: bytes) -> dict[str, Any] | str:
    """The JSON object of one line, or the reason it is not one."""
    try:
        value = json.loads(raw_line.decode("utf-8"), parse_constant=lambda name: name)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return "invalid_json"
    return value if isinstance(value, dict) else "not_an_object"


def read_jsonl(path: Path) -> JsonlContents:
    """Read every complete JSON-object line of `path`; never raises on bad content.

    Args:
        path: A JSONL file written by `JsonlAppender` (or damaged by hand or by a crash).

    Returns:
        The readable records and the problems found, in line order.
    """
    contents = JsonlContents()
    data = path.read_bytes()
    lines = data.split(b"\n")
    for index, raw_line in enumerate(lines):
        is_last = index == len(lines) - 1
        if not raw_line.strip():
            continue
        parsed = _parse_line(raw_line)
        if isinstance(parsed, dict):
            contents.records.append((index + 1, parsed))
        elif is_last:  # the file does not end with a newline: the writer stopped mid-line
            contents.problems.append((index + 1, "truncated_last_line"))
        else:
            contents.problems.append((index + 1, parsed))
    return contents
