"""Trajectory records and the flywheel export to LeRobot datasets.

Every module here is light (numpy, gymnasium, tqdm; LeRobot loads only when a dataset is
written), so the public names are imported eagerly: `from recorders import export_flywheel`.
"""

from recorders.flywheel import ExportReport, MixedRecordsError, export_flywheel
from recorders.provenance import (
    ACTION_SOURCES,
    ActionSource,
    NullProvenance,
    ProvenanceLog,
    provenance_of,
)
from recorders.record_format import SCHEMA_VERSION, TaskMetadata
from recorders.trajectory import TrajectoryWriter
from recorders.trajectory_reader import RecordError, TrajectoryReader, find_task_dirs

__all__ = [
    "ACTION_SOURCES",
    "SCHEMA_VERSION",
    "ActionSource",
    "ExportReport",
    "MixedRecordsError",
    "NullProvenance",
    "ProvenanceLog",
    "RecordError",
    "TaskMetadata",
    "TrajectoryReader",
    "TrajectoryWriter",
    "export_flywheel",
    "find_task_dirs",
    "provenance_of",
]
