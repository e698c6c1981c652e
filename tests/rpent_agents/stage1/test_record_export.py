"""`rpent-stage1 export-cache --from-records`: the flywheel's rules, a frame cache, no lerobot."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from agent_helpers import tiny_checkpoint

from recorders.flywheel import REPORT_FILE, export_flywheel
from recorders.trajectory import TaskMetadata, TrajectoryWriter
from rpent_agents.stage1.frame_cache import CACHE_FILE, FrameCache, cache_from_lerobot
from rpent_agents.stage1.record_export import export_frame_cache

IMAGE_SIZE, STATE_DIM, ACTION_DIM = 32, 9, 8
INSERT, PUSH = "insert the peg in the hole", "push the peg"


class Task:
    """One recorded task: chunks of a source, each its own tool call and prediction."""

    def __init__(self, writer, task_id, instruction=INSERT):
        self.writer, self.instruction, self.step = writer, instruction, 0
        metadata = TaskMetadata(env_id="RPentTest/TwoCameras-v0", fps=10, robot="panda")
        writer.start_task(metadata, task_id=task_id)

    def chunk(self, source, steps):
        call_id = self.writer.tool_call(source, {"instruction": self.instruction})
        if source in ("vla", "actor"):
            prediction = self.writer.prediction(call_id, self.instruction, f"tiny-{source}", source)
            self.writer.set_action_source(source, call_id=call_id, prediction_id=prediction)
        else:
            self.writer.set_action_source(source, call_id=call_id)
        for _ in range(steps):
            rng = np.random.default_rng(self.step)
            observation = {
                key: rng.integers(0, 256, (IMAGE_SIZE, IMAGE_SIZE, 3), dtype=np.uint8)
                for key in ("image", "wrist_image")
            }
            observation["state"] = np.full(STATE_DIM, self.step / 10, np.float32)
            action = np.linspace(-1, 1, ACTION_DIM, dtype=np.float32) * (self.step % 7) / 7
            self.writer.record_action(action, observation, 0.0, False, False)
            self.step += 1
        return self

    def finish(self, success=True):
        task_dir = self.writer.task_dir
        self.writer.finish_task(success, "terminated" if success else "truncated")
        self.writer.close_task()
        return task_dir


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """Four tasks: kept runs split by a scripted chunk, an actor chunk, a failure, a lost image."""
    run = tmp_path_factory.mktemp("records") / "run"
    writer = TrajectoryWriter(run)
    Task(writer, "a_split").chunk("vla", 4).chunk("scripted", 1).chunk("vla", 3).finish()
    Task(writer, "b_actor", PUSH).chunk("vla", 3).chunk("actor", 4).chunk("vla", 2).finish()
    Task(writer, "c_failed").chunk("vla", 3).finish(success=False)
    lost = Task(writer, "d_lost_image").chunk("vla", 5).finish()
    writer.close()
    (lost / "artifacts" / "step000002_wrist_image.png").unlink()
    return run


def report_without_paths(export_dir):
    report = json.loads((export_dir / REPORT_FILE).read_text())
    for key in ("output_dir", "dataset_dir"):
        report.pop(key)
    return report


@pytest.mark.parametrize(
    ("include_sources", "episode_frames", "chunk_starts", "excluded_actions"),
    [
        (
            (),
            [4, 3, 3, 2, 2, 2],
            [0, 4, 7, 10, 12],
            {"image_missing": 1, "source_actor": 4, "source_scripted": 1},
        ),
        (
            ("actor",),
            [4, 3, 9, 2, 2],
            [0, 4, 7, 10, 14, 16],
            {"image_missing": 1, "source_scripted": 1},
        ),
    ],
)
@pytest.mark.slow
def test_the_cache_holds_the_lerobot_exports_frames_and_report(
    run_dir, tmp_path, include_sources, episode_frames, chunk_starts, excluded_actions
):
    """Same frames and report as the LeRobot export; images only where a chunk starts."""
    cache_report = export_frame_cache(run_dir, tmp_path / "cache", include_sources)
    export_flywheel(
        run_dir, tmp_path / "lerobot", use_videos=False, include_sources=include_sources
    )

    assert report_without_paths(tmp_path / "cache") == report_without_paths(tmp_path / "lerobot")
    assert cache_report.dataset_dir == str(tmp_path / "cache" / CACHE_FILE)
    summary = cache_report.to_json(with_tasks=False)
    assert summary["excluded"]["tasks"] == {"environment_success_false": 1}
    assert summary["excluded"]["actions"] == excluded_actions

    cache = FrameCache.load(tmp_path / "cache" / CACHE_FILE)
    reference = cache_from_lerobot(tmp_path / "lerobot" / "train")
    assert np.bincount(cache.episode_index).tolist() == episode_frames
    for key in ("state", "actions", "episode_index"):
        np.testing.assert_array_equal(getattr(cache, key), getattr(reference, key), err_msg=key)
    assert cache.image_step.tolist() == chunk_starts
    for key in ("image", "wrist_image"):
        np.testing.assert_array_equal(getattr(cache, key), getattr(reference, key)[chunk_starts])
    instructions = [[c.tasks[i] for i in c.task_index] for c in (cache, reference)]
    assert instructions[0] == instructions[1] and set(instructions[0]) == {INSERT, PUSH}


def test_nothing_eligible_leaves_only_the_report(tmp_path):
    writer = TrajectoryWriter(tmp_path / "run")
    Task(writer, "failed").chunk("vla", 2).finish(success=False)
    writer.close()
    report = export_frame_cache(tmp_path / "run", tmp_path / "cache")
    assert report.dataset_dir is None
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [REPORT_FILE]


def cli(*arguments, env):
    result = subprocess.run(
        [sys.executable, "-m", "rpent_agents.stage1.train", *map(str, arguments)],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    return result


@pytest.mark.subprocess
def test_export_and_fine_tune_run_where_lerobot_cannot_be_imported(run_dir, tmp_path):
    """As on the GPU machine: records -> cache -> `train --init-from`, lerobot unimportable."""
    hidden = tmp_path / "no_lerobot" / "lerobot"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text("raise ImportError('lerobot is hidden in this test')\n")
    path = os.pathsep.join(filter(None, [str(hidden.parent), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    export = cli(
        "export-cache", "--from-records", run_dir, "--output-dir", tmp_path / "cache",
        "--include-sources", "actor", env=env,
    )  # fmt: skip
    assert export.returncode == 0, export.stderr[-3000:]
    assert json.loads(export.stdout)["counts"]["frames"] == 20
    source = tiny_checkpoint(tmp_path / "source", STATE_DIM, ACTION_DIM, chunk_len=4)
    train = cli(
        "train", "--data", tmp_path / "cache" / CACHE_FILE, "--init-from", source,
        "--output-dir", tmp_path / "ft", "--steps", 1, "--batch-size", 4, "--val-episodes", 1,
        "--device", "cpu", env=env,
    )  # fmt: skip
    assert train.returncode == 0, train.stderr[-3000:]
    metadata = json.loads((tmp_path / "ft" / "config.json").read_text())["metadata"]
    assert (metadata["init_from"], metadata["step"]) == (str(source), 1)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--output", "x.npz"], "give either --dataset D --output F.npz or --from-records R"),
        (["--from-records", "runs/r", "--output", "x.npz"], "writes a folder: give --output-dir"),
        (["--dataset", "d", "--output-dir", "o"], "writes one file: give --output F.npz"),
    ],
)
@pytest.mark.subprocess
def test_export_cache_options_that_do_not_fit_are_refused(arguments, message):
    result = cli("export-cache", *arguments, env=dict(os.environ))
    assert result.returncode == 1 and message in result.stderr
