"""Reading trajectory records (DESIGN.md §6) without ever modifying them.

Every way a record can be broken surfaces as a `RecordError` whose `reason` names the broken
rule, so that the flywheel exporter can count it in its report instead of crashing.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from recorders import record_format as fmt


class RecordError(ValueError):
    """A record that breaks the format; `reason` names the broken rule (a report key)."""

    def __init__(self, reason: str, message: str) -> None:
        """Store the reason next to the human-readable message."""
        super().__init__(message)
        self.reason = reason


class TrajectoryReader:
    """Reads one task folder without ever modifying it; bad content never raises unnamed errors.

    Example:
        >>> reader = TrajectoryReader("runs/r1/trajectories/my-task")
        >>> reader.read_task()["result"]["environment_success"]
        True
        >>> [record for _, record in reader.read_records("actions.jsonl").records]
    """

    def __init__(self, task_dir: str | os.PathLike[str]) -> None:
        """Point at a task folder (one that holds `task.json`)."""
        self.task_dir = Path(task_dir)

    def read_task(self) -> dict[str, Any]:
        """The parsed `task.json`.

        Raises:
            RecordError: "task_json_missing", "task_json_unreadable" or "task_json_invalid".
        """
        path = self.task_dir / fmt.TASK_FILE
        try:
            text = path.read_bytes().decode("utf-8")
        except FileNotFoundError:
            raise RecordError("task_json_missing", f"{path} does not exist") from None
        except (OSError, UnicodeDecodeError) as error:
            raise RecordError("task_json_unreadable", f"{path}: {error}") from None
        try:
            task = json.loads(text, parse_constant=str)
        except json.JSONDecodeError as error:
            raise RecordError("task_json_invalid", f"{path} is not valid JSON: {error}") from None
        if not isinstance(task, dict):
            kind = type(task).__name__
            raise RecordError("task_json_invalid", f"{path} holds a JSON {kind}, not an object")
        return task

    def read_records(self, file_name: str) -> fmt.JsonlContents:
        """The readable lines of one JSONL file of the task; a missing file has one problem."""
        path = self.task_dir / file_name
        if not path.is_file():
            return fmt.JsonlContents(problems=[(0, "file_missing")])
        return fmt.read_jsonl(path)

    def load_image(self, relative_path: Any) -> np.ndarray:
        """Decode an image an observation refers to (a path under the task folder).

        Raises:
            RecordError: "image_path_invalid" (not a relative path inside the task folder),
                "image_missing" or "image_unreadable".
        """
        from PIL import Image

        root = self.task_dir.resolve()
        if not isinstance(relative_path, str) or not relative_path:
            raise RecordError("image_path_invalid", f"image path {relative_path!r} is not a string")
        path = (root / relative_path).resolve()
        if not path.is_relative_to(root):
            raise RecordError("image_path_invalid", f"image path {relative_path!r} leaves {root}")
        if not path.is_file():
            raise RecordError("image_missing", f"image {path} does not exist")
        try:
            with Image.open(path) as image:
                return np.asarray(image.convert("RGB") if image.mode != "RGB" else image)
        except (OSError, ValueError, Image.DecompressionBombError) as error:
            raise RecordError("image_unreadable", f"image {path}: {error}") from None


def find_task_dirs(input_root: str | os.PathLike[str]) -> tuple[list[Path], list[Path]]:
    """Every task folder under `input_root` (or `input_root` itself when it is one).

    Args:
        input_root: One task folder (holds `task.json`), a run folder or any parent.

    Returns:
        Task folders with a `task.json`, and folders under a `trajectories/` folder without one
        (a recorder killed while creating them), both sorted.

    Raises:
        FileNotFoundError: When `input_root` is not a folder.
    """
    root = Path(input_root)
    if not root.is_dir():
        raise FileNotFoundError(f"input root {root} is not a folder; pass a run or task folder")
    if (root / fmt.TASK_FILE).is_file():
        return [root], []
    task_dirs, incomplete = [], []
    for folder, subfolders, files in os.walk(root):
        folder_path = Path(folder)
        if fmt.TASK_FILE in files:
            task_dirs.append(folder_path)
            subfolders.clear()  # a task's artifacts hold no further tasks
        elif folder_path.parent.name == fmt.TRAJECTORIES_DIR:
            incomplete.append(folder_path)
            subfolders.clear()
        else:
            subfolders.sort()
    return sorted(task_dirs), sorted(incomplete)
