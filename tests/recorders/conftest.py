"""Trajectory records written by the real TrajectoryWriter from small synthetic observations."""

import hashlib
from pathlib import Path

import numpy as np
import pytest

from recorders.trajectory import TaskMetadata, TrajectoryWriter

ENV_ID = "RPentTest/Synthetic-v0"
INSTRUCTION = "insert the peg in the hole"
IMAGE_SIZE = 8


def observation(step: int) -> dict:
    rng = np.random.default_rng(step)
    return {
        "image": rng.integers(0, 256, (IMAGE_SIZE, IMAGE_SIZE, 3), dtype=np.uint8),
        "state": np.full(3, step, dtype=np.float32),
    }


def action(step: int) -> np.ndarray:
    return np.linspace(-1, 1, 4, dtype=np.float32) * (step % 5) / 5


class Recorder:
    """Drives a TrajectoryWriter like a planner + VLA tool would."""

    def __init__(self, writer: TrajectoryWriter, task_id: str, robot: str = "panda"):
        self.writer = writer
        self.step = 0
        writer.start_task(
            TaskMetadata(env_id=ENV_ID, fps=10, robot=robot, instruction=INSTRUCTION, seed=0),
            task_id=task_id,
        )
        self.request_id = writer.model_request("planner", [{"role": "user", "content": "go"}])

    def act(self, count: int, action_fn=action) -> None:
        for _ in range(count):
            obs = observation(self.step)
            self.writer.record_action(action_fn(self.step), obs, 0.0, False, False)
            self.step += 1

    def vla(self, count: int, instruction: str = INSTRUCTION) -> tuple[str, str]:
        return self.predicted("vla", count, instruction)

    def actor(self, count: int, instruction: str = INSTRUCTION) -> tuple[str, str]:
        """The actor-data flywheel's link: an actor prediction in its own `actor` tool call."""
        return self.predicted("actor", count, instruction)

    def predicted(self, source: str, count: int, instruction: str) -> tuple[str, str]:
        call_id = self.writer.tool_call(source, {"instruction": instruction}, self.request_id)
        prediction_id = self.writer.prediction(call_id, instruction, f"tiny-{source}", source)
        self.writer.set_action_source(source, call_id=call_id, prediction_id=prediction_id)
        self.act(count)
        self.writer.tool_result(call_id, {"steps": count})
        return call_id, prediction_id

    def scripted(self, count: int) -> str:
        call_id = self.writer.tool_call("hold_still", {}, self.request_id)
        self.writer.set_action_source("scripted", call_id=call_id)
        self.act(count)
        return call_id

    def finish(self, success: bool | None = True) -> Path:
        task_dir = self.writer.task_dir
        if success is None:
            self.writer.close_task()
        else:
            self.writer.finish_task(success, "terminated" if success else "truncated")
            self.writer.close_task()
        return task_dir


def record_good_task(writer: TrajectoryWriter, task_id: str, robot: str = "panda") -> Path:
    """vla 4, scripted 1, vla 3: two episodes of 4 and 3 frames."""
    recorder = Recorder(writer, task_id, robot)
    recorder.vla(4)
    recorder.scripted(1)
    recorder.vla(3)
    return recorder.finish(True)


def tree_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        digest.update(path.relative_to(root).as_posix().encode())
        if path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()


@pytest.fixture
def writer(tmp_path):
    writer = TrajectoryWriter(tmp_path / "run", image_writer_threads=2)
    yield writer
    writer.close()
