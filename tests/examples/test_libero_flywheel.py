"""examples/libero_flywheel.py end to end: record LIBERO episodes, export with rpent-flywheel."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from lerobot.datasets.lerobot_dataset import LeRobotDataset

from recorders.trajectory import TrajectoryReader

pytestmark = [pytest.mark.sim, pytest.mark.subprocess]

EXAMPLE = Path(__file__).parents[2] / "examples" / "libero_flywheel.py"
PICK = "pick up the akita black bowl"
PLACE = "put the bowl on the plate"


def run_example(*args):
    command = [sys.executable, str(EXAMPLE), "--image-size", "32", *args]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def read_actions(task_dir):
    records = TrajectoryReader(task_dir).read_records("actions.jsonl").records
    return [record for _, record in records]


def test_only_vla_actions_of_successful_tasks_are_exported(tmp_path):
    run_dir, export_dir = tmp_path / "run", tmp_path / "export"
    # a planner out of time: the episode is truncated, the env's verdict is false
    failed = run_example("--run-dir", str(run_dir), "--init-state-ids", "0", "--max-steps", "25")
    assert "init state 0: environment_success=False" in failed
    solved = run_example(
        "--run-dir", str(run_dir), "--export-dir", str(export_dir), "--init-state-ids", "1",
        "--no-export-videos",
    )  # fmt: skip
    assert "init state 1: environment_success=True" in solved

    task_dirs = sorted((run_dir / "trajectories").iterdir())
    task_jsons = [json.loads((folder / "task.json").read_text()) for folder in task_dirs]
    (success_dir,) = [
        folder
        for folder, task in zip(task_dirs, task_jsons, strict=True)
        if task["result"]["environment_success"] is True
    ]
    actions = read_actions(success_dir)
    vla = [record for record in actions if record["source"] == "vla"]
    scripted = [record for record in actions if record["source"] == "scripted"]
    assert len(vla) + len(scripted) == len(actions) and len(scripted) == 8  # open + lift

    report = json.loads((export_dir / "report.json").read_text())
    assert report["counts"]["tasks_seen"] == 2 and report["counts"]["tasks_exported"] == 1
    assert report["excluded"]["tasks"] == {"environment_success_false": 1}
    assert report["excluded"]["actions"] == {"source_scripted": len(scripted)}
    assert report["counts"]["frames"] == len(vla)
    assert report["counts"]["episodes"] == 2  # the scripted lift splits pick from place

    dataset = LeRobotDataset("local/libero", root=export_dir / "train")
    assert len(dataset) == len(vla) and dataset.num_episodes == 2
    first, last = dataset[0], dataset[len(dataset) - 1]
    assert (first["task"], last["task"]) == (PICK, PLACE)
    assert first["image"].shape == (3, 32, 32) and first["wrist_image"].shape == (3, 32, 32)
    assert first["state"].shape == (8,) and first["actions"].shape == (7,)
    np.testing.assert_allclose(first["actions"].numpy(), vla[0]["action"], atol=1e-6)
    np.testing.assert_allclose(last["actions"].numpy(), vla[-1]["action"], atol=1e-6)
    np.testing.assert_allclose(first["state"].numpy(), vla[0]["observation"]["state"], atol=1e-6)
