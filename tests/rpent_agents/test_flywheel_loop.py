"""The flywheel loop of docs/flywheel.md as a user runs it: run+record, export, fine-tune, run."""

import json
import subprocess
import sys

import numpy as np
import pytest
from agent_helpers import tiny_checkpoint
from lerobot.datasets.lerobot_dataset import LeRobotDataset

from recorders.trajectory import TrajectoryReader
from rpent_agents.features.checkpoint import load_checkpoint
from rpent_agents.stage1.frame_cache import CACHE_FILE, FrameCache, cache_from_lerobot

pytestmark = [pytest.mark.sim, pytest.mark.subprocess]

PEG_KWARGS = json.dumps({"image_size": 32, "render_backend": "cpu"})


def command(module, *arguments):
    result = subprocess.run(
        [sys.executable, "-m", module, *map(str, arguments)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


@pytest.fixture(scope="module")
def loop(tmp_path_factory):
    root = tmp_path_factory.mktemp("loop")
    summary = command(
        "rpent_agents.run.cli", "--policy", "expert", "--seeds", 0, 1, "--num-workers", 2,
        "--env-kwargs", PEG_KWARGS, "--record-trajectory", "--output-dir", root / "run",
    )  # fmt: skip
    command(
        "recorders.cli", "--input-root", root / "run", "--output-dir", root / "export",
        "--no-use-videos",
    )  # fmt: skip
    source = tiny_checkpoint(root / "source", state_dim=9, action_dim=8, chunk_len=10)
    command(
        "rpent_agents.stage1.train", "train", "--data", root / "export" / "train",
        "--init-from", source, "--output-dir", root / "finetuned", "--steps", 2,
        "--batch-size", 4, "--val-episodes", 1, "--device", "cpu",
    )  # fmt: skip
    return root, json.loads(summary), source


def test_the_recorded_run_exports_and_reloads_with_lerobot(loop):
    root, summary, _ = loop
    assert summary["successes"] == 2 and summary["successful_seeds"] == [0, 1]
    outcomes = json.loads((root / "run" / "run_summary.json").read_text())["episode_outcomes"]
    task_dirs = sorted((root / "run" / "trajectories").iterdir())
    assert sorted(outcome["task_dir"] for outcome in outcomes) == [str(d) for d in task_dirs]
    for task_dir in task_dirs:  # every worker finished its task with the env's verdict
        assert json.loads((task_dir / "task.json").read_text())["result"]["environment_success"]
    report = json.loads((root / "export" / "report.json").read_text())
    recorded = [
        record
        for task_dir in task_dirs
        for _, record in TrajectoryReader(task_dir).read_records("actions.jsonl").records
    ]
    assert report["counts"]["frames"] == len(recorded) and report["excluded"]["actions"] == {}
    dataset = LeRobotDataset("local/export", root=root / "export" / "train")
    assert (dataset.num_episodes, len(dataset), dataset.meta.robot_type) == (
        2,
        len(recorded),
        "panda",
    )
    for index in (0, len(dataset) - 1):
        frame = dataset[index]
        np.testing.assert_allclose(frame["actions"].numpy(), recorded[index]["action"], rtol=1e-6)
        np.testing.assert_allclose(
            frame["state"].numpy(), recorded[index]["observation"]["state"], rtol=1e-6
        )
        assert frame["task"] == "insert the peg in the hole"


def test_the_fine_tuned_checkpoint_keeps_the_source_norm_stats_and_runs(loop):
    root, _, source = loop
    finetuned, _, config = load_checkpoint(root / "finetuned")
    assert config["metadata"]["init_from"] == str(source)
    source_vla, _, _ = load_checkpoint(source)
    assert finetuned.norm_stats == source_vla.norm_stats
    summary = command(
        "rpent_agents.run.cli", "--policy", "vla", "--checkpoint", root / "finetuned",
        "--seeds", 0, "--env-kwargs", PEG_KWARGS, "--max-episode-steps", 10,
        "--output-dir", root / "eval",
    )  # fmt: skip
    assert json.loads(summary)["episodes"] == 1
    assert (root / "eval" / "run_summary.json").is_file()


def test_the_records_export_to_a_frame_cache_equal_to_the_lerobot_export(loop):
    root, _, _ = loop
    command(
        "rpent_agents.stage1.train", "export-cache", "--from-records", root / "run",
        "--output-dir", root / "cache",
    )  # fmt: skip
    cache = FrameCache.load(root / "cache" / CACHE_FILE)
    reference = cache_from_lerobot(root / "export" / "train")
    assert len(cache) == len(reference) > 0
    for key in ("state", "actions", "episode_index"):
        np.testing.assert_array_equal(getattr(cache, key), getattr(reference, key), err_msg=key)
    # images (training frames) only where the VLA predicted a chunk: every 10th step of an episode
    episode_start = np.searchsorted(cache.episode_index, cache.episode_index)
    chunk_starts = np.flatnonzero((np.arange(len(cache)) - episode_start) % 10 == 0)
    np.testing.assert_array_equal(cache.image_step, chunk_starts)
    for key in ("image", "wrist_image"):
        np.testing.assert_array_equal(getattr(cache, key), getattr(reference, key)[chunk_starts])
    assert cache.tasks == reference.tasks == ["insert the peg in the hole"]
