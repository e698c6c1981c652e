"""examples/record_and_export.py end to end, as a user runs it (small images, one episode)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from lerobot.datasets.lerobot_dataset import LeRobotDataset

from recorders.trajectory import TrajectoryReader

pytestmark = [pytest.mark.sim, pytest.mark.subprocess]

EXAMPLE = Path(__file__).parents[2] / "examples" / "record_and_export.py"


def test_example_records_and_exports_only_vla_actions(tmp_path):
    run_dir, export_dir = tmp_path / "run", tmp_path / "export"
    result = subprocess.run(
        [
            sys.executable, str(EXAMPLE), "--run-dir", str(run_dir), "--export-dir",
            str(export_dir), "--num-episodes", "1", "--image-size", "32", "--max-steps", "150",
        ],
        capture_output=True,
        text=True,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "episode 0: environment_success=True" in result.stdout
    report = json.loads(result.stdout[result.stdout.index("{") :])

    (task_dir,) = (run_dir / "trajectories").iterdir()
    reader = TrajectoryReader(task_dir)
    actions = [record for _, record in reader.read_records("actions.jsonl").records]
    vla = [record for record in actions if record["source"] == "vla"]
    scripted = [record for record in actions if record["source"] == "scripted"]
    assert len(vla) + len(scripted) == len(actions) and scripted and vla
    assert report["counts"]["frames"] == len(vla) and report["counts"]["tasks_exported"] == 1
    assert report["excluded"]["actions"] == {"source_scripted": len(scripted)}
    assert report["counts"]["episodes"] >= 2  # hold_still calls split the VLA runs

    planners = [record for _, record in reader.read_records("planners.jsonl").records]
    tools = [record["name"] for record in planners if record["type"] == "tool_call"]
    assert tools[:4] == ["open_gripper", "vla", "vla", "hold_still"]
    assert planners[-1] == {**planners[-1], "type": "model_reply", "content": "done"}

    dataset = LeRobotDataset("local/export", root=export_dir / "train")
    assert len(dataset) == len(vla) and dataset.num_episodes == report["counts"]["episodes"]
    first = dataset[0]
    assert first["task"] == "insert the peg in the hole"
    assert first["image"].shape == (3, 32, 32) and first["actions"].shape == (8,)
