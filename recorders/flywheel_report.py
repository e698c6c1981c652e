"""The flywheel export's report (`O/report.json`): what happened to every task, by reason."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from recorders.flywheel_rules import DEFAULT_SOURCES
from recorders.lerobot_io import KeyStyle


@dataclass
class TaskOutcome:
    """What the export did with one task folder.

    Attributes:
        path: Task folder relative to the input root.
        task_id: `task.json`'s task id (None when unreadable).
        reason: Why the whole task was not exported (None: exported).
        actions_seen: Lines of `actions.jsonl` (read only for successful tasks).
        episodes: Dataset episodes made from the task.
        frames: Dataset frames made from the task.
        excluded_actions: Dropped actions by reason.
        excluded_predictions: Invalid prediction records by reason.
        excluded_planner_records: Invalid planner records by reason.
    """

    path: str
    task_id: str | None = None
    reason: str | None = None
    actions_seen: int = 0
    episodes: int = 0
    frames: int = 0
    excluded_actions: Counter[str] = field(default_factory=Counter)
    excluded_predictions: Counter[str] = field(default_factory=Counter)
    excluded_planner_records: Counter[str] = field(default_factory=Counter)

    def to_json(self) -> dict[str, Any]:
        """The outcome as a JSON object (counters sorted by reason)."""
        return {
            key: dict(sorted(value.items())) if isinstance(value, Counter) else value
            for key, value in vars(self).items()
        }


@dataclass
class ExportReport:
    """Counts of one export; `to_json()` is what `report.json` holds."""

    input_root: str
    output_dir: str
    sources: tuple[str, ...] = DEFAULT_SOURCES
    key_style: KeyStyle = "rpent"
    dataset_dir: str | None = None
    env_id: str | None = None
    robot: str | None = None
    fps: int | None = None
    tasks: list[TaskOutcome] = field(default_factory=list)

    @property
    def frames(self) -> int:
        """Frames written to the dataset."""
        return sum(task.frames for task in self.tasks)

    @property
    def episodes(self) -> int:
        """Episodes written to the dataset."""
        return sum(task.episodes for task in self.tasks)

    def excluded(self, category: str) -> dict[str, int]:
        """Exclusion counts summed over tasks; `category` is "tasks" or a TaskOutcome counter."""
        if category == "tasks":
            return dict(sorted(Counter(t.reason for t in self.tasks if t.reason).items()))
        total: Counter[str] = Counter()
        for task in self.tasks:
            total.update(getattr(task, f"excluded_{category}"))
        return dict(sorted(total.items()))

    def to_json(self, with_tasks: bool = True) -> dict[str, Any]:
        """The report as a JSON object (counts first, then per-task details unless left out)."""
        report = {
            "input_root": self.input_root,
            "output_dir": self.output_dir,
            "sources": list(self.sources),
            "key_style": self.key_style,
            "dataset_dir": self.dataset_dir,
            "env_id": self.env_id,
            "robot": self.robot,
            "fps": self.fps,
            "counts": {
                "tasks_seen": len(self.tasks),
                "tasks_exported": sum(task.reason is None for task in self.tasks),
                "episodes": self.episodes,
                "frames": self.frames,
                "actions_seen": sum(task.actions_seen for task in self.tasks),
            },
            "excluded": {
                category: self.excluded(category)
                for category in ("tasks", "actions", "predictions", "planner_records")
            },
        }
        if with_tasks:
            report["tasks"] = [task.to_json() for task in self.tasks]
        return report
