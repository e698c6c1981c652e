"""A disk that fills up (a small real tmpfs) while recording and while exporting.

Needs root to mount the tmpfs (`small_disk` in tests/conftest.py), as CI has (`.ci/run` runs
as root); a failed mount fails.
"""

import errno
import json
import os

import numpy as np
import pytest
from conftest import Recorder, record_good_task, tree_digest

from recorders.flywheel import ExportWriteError, export_flywheel
from recorders.image_writer import ImageWriteError
from recorders.record_format import RecordWriteError, read_jsonl, write_json_atomic
from recorders.trajectory import TrajectoryWriter

pytestmark = pytest.mark.subprocess

PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


def fill_leaving(disk, free_pages):
    """Fill `disk` with one file so that only `free_pages` pages stay free."""
    stats = os.statvfs(disk)
    filler = disk / "filler"
    filler.write_bytes(b"\0" * ((stats.f_bavail - free_pages) * stats.f_frsize))
    return filler


def record_until_the_disk_is_full(recorder, max_steps=10_000):
    with pytest.raises((RecordWriteError, ImageWriteError)) as raised:
        for _ in range(max_steps):
            recorder.vla(1)
    return raised.value


def test_a_disk_full_mid_task_names_the_task_and_keeps_the_finished_tasks(small_disk, tmp_path):
    disk = small_disk(1024)
    writer = TrajectoryWriter(disk / "run", image_writer_threads=0)
    finished = [record_good_task(writer, f"done-{index}") for index in range(2)]
    digests = [tree_digest(task_dir) for task_dir in finished]
    fill_leaving(disk, free_pages=6)
    recorder = Recorder(writer, "broken")
    error = record_until_the_disk_is_full(recorder)
    assert "No space left on device" in str(error)
    assert str(disk / "run" / "trajectories" / "broken") in str(error)
    with pytest.raises(RecordWriteError, match="broken"):  # task.json cannot be finished
        writer.close()
    assert [tree_digest(task_dir) for task_dir in finished] == digests
    report = export_flywheel(disk / "run", tmp_path / "export", use_videos=False)
    reasons = {outcome.path.split("/")[-1]: outcome.reason for outcome in report.tasks}
    assert reasons == {"done-0": None, "done-1": None, "broken": "run_unfinished"}
    assert report.frames == 2 * 7


def record_state_only_until_the_disk_is_full(writer, max_steps=100_000):
    """VLA actions with a state-only observation, so that a JSONL line is what fails."""
    with pytest.raises(RecordWriteError) as raised:
        for _ in range(max_steps):
            writer.record_action(np.zeros(4, np.float32), {"state": np.ones(3)}, 0.0, False, False)
    return raised.value


def test_a_lost_line_marks_the_task_once_space_is_back(small_disk, tmp_path):
    disk = small_disk(256)
    writer = TrajectoryWriter(disk / "run", image_writer_threads=0)
    record_good_task(writer, "done")
    Recorder(writer, "broken").vla(1)
    filler = fill_leaving(disk, free_pages=0)  # the task's open pages still take some lines
    error = record_state_only_until_the_disk_is_full(writer)
    actions = disk / "run" / "trajectories" / "broken" / "actions.jsonl"
    assert f"could not append a line to {actions}" in str(error) and error.errno == errno.ENOSPC
    filler.unlink()  # the operator frees space: the task still takes no more lines
    with pytest.raises(RecordWriteError, match="takes no more"):
        writer.record_action(np.zeros(4, np.float32), {"state": np.ones(3)}, 0.0, False, False)
    writer.finish_task(True, "terminated")
    writer.close()
    task = json.loads((actions.parent / "task.json").read_text())
    assert "No space left on device" in task["result"]["record_write_error"]
    problems = read_jsonl(actions).problems
    assert problems in ([], [(problems[0][0], "truncated_last_line")])  # at most one cut line
    report = export_flywheel(disk / "run", tmp_path / "export", use_videos=False)
    reasons = {outcome.path.split("/")[-1]: outcome.reason for outcome in report.tasks}
    assert reasons == {"done": None, "broken": "record_write_failed"}


def test_task_json_is_unchanged_when_its_rewrite_finds_the_disk_full(small_disk):
    disk = small_disk(64)
    path = disk / "task.json"
    write_json_atomic(path, {"finished_at": None})
    fill_leaving(disk, free_pages=0)
    with pytest.raises(RecordWriteError, match=f"could not write {path}.*unchanged"):
        write_json_atomic(path, {"finished_at": "now", "padding": "x" * PAGE_BYTES})
    assert json.loads(path.read_text()) == {"finished_at": None}
    assert sorted(p.name for p in disk.iterdir()) == ["filler", "task.json"]


def test_an_export_onto_a_full_disk_leaves_no_output_folder(small_disk, tmp_path):
    writer = TrajectoryWriter(tmp_path / "run")
    for index in range(3):
        record_good_task(writer, f"task-{index}")
    writer.close()
    disk = small_disk(256)
    fill_leaving(disk, free_pages=8)
    with pytest.raises(ExportWriteError, match=f"{disk / 'export'}.*No space left"):
        export_flywheel(tmp_path / "run", disk / "export", use_videos=False)
    assert [path.name for path in disk.iterdir()] == ["filler"]
    report = export_flywheel(tmp_path / "run", tmp_path / "export", use_videos=False)
    assert report.frames == 3 * 7
