"""`rpent-flywheel` as a user runs it: a real subprocess, its exit status and its messages."""

import json
import os
import resource
import subprocess
import sys

import pytest
from conftest import record_good_task

from recorders.trajectory import TrajectoryWriter

pytestmark = pytest.mark.subprocess

FLYWHEEL = [sys.executable, "-m", "recorders.cli"]
FILE_SIZE_LIMIT_BYTES = 4096


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("cli") / "run"
    writer = TrajectoryWriter(run_dir)
    record_good_task(writer, "good-1")
    record_good_task(writer, "good-2")
    writer.close()
    return run_dir


def flywheel(*args, **kwargs):
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(
        [*FLYWHEEL, *map(str, args)], capture_output=True, text=True, env=env, **kwargs
    )


def test_cli_exports_and_prints_the_counts(run_dir, tmp_path):
    output_dir = tmp_path / "out"
    result = flywheel(
        "--input-root", run_dir, "--output-dir", output_dir,
        "--image-writer-threads", 2, "--no-use-videos",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["counts"] == {
        "tasks_seen": 2,
        "tasks_exported": 2,
        "episodes": 4,
        "frames": 14,
        "actions_seen": 16,
    }
    assert summary["excluded"]["actions"] == {"source_scripted": 2}
    assert (output_dir / "train" / "meta" / "info.json").is_file()
    rerun = flywheel("--input-root", run_dir, "--output-dir", output_dir)
    assert rerun.returncode == 1 and "already exists" in rerun.stderr


def test_cli_refuses_mixed_robots(run_dir, tmp_path):
    mixed = tmp_path / "mixed"
    writer = TrajectoryWriter(mixed / "panda-run")
    record_good_task(writer, "a")
    writer.close()
    writer = TrajectoryWriter(mixed / "ur5-run")
    record_good_task(writer, "b", robot="ur5")
    writer.close()
    result = flywheel("--input-root", mixed, "--output-dir", tmp_path / "out")
    assert result.returncode == 1
    assert "mixes records of different envs/robots" in result.stderr
    assert "robot='ur5'" in result.stderr and "robot='panda'" in result.stderr
    assert not (tmp_path / "out").exists()


def test_crash_during_export_leaves_no_output(run_dir, tmp_path):
    def limit_file_size():  # any write past the limit fails with EFBIG: a real mid-export crash
        resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT_BYTES, FILE_SIZE_LIMIT_BYTES))

    output_dir = tmp_path / "out"
    result = flywheel(
        "--input-root", run_dir, "--output-dir", output_dir, "--no-use-videos",
        preexec_fn=limit_file_size,
    )  # fmt: skip
    assert result.returncode != 0
    assert f"could not write the export to {output_dir}" in result.stderr
    assert "File too large" in result.stderr
    assert list(tmp_path.iterdir()) == []  # neither `out` nor its hidden staging folder
