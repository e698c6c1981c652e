"""Two recording processes pointed at the same run folder never overwrite each other's tasks."""

import subprocess
import sys
import time

import pytest
from conftest import ENV_ID

from recorders.record_format import read_jsonl
from recorders.trajectory import TrajectoryReader, find_task_dirs

pytestmark = pytest.mark.subprocess

TASKS_PER_WRITER = 40
STEPS_PER_TASK = 5
WRITER = f"""
import sys, time
from pathlib import Path
import numpy as np
from recorders.trajectory import TaskMetadata, TrajectoryWriter

run_dir, writer_index, go_file = Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
writer = TrajectoryWriter(run_dir, default_source="scripted", image_writer_threads=1)
while not go_file.exists():  # both processes start recording at the same moment
    time.sleep(0.001)
try:
    writer.start_task(TaskMetadata(env_id={ENV_ID!r}, fps=10), task_id="shared")
    print("shared", flush=True)
except FileExistsError as error:
    print("refused", error, flush=True)
for task in range({TASKS_PER_WRITER}):
    metadata = TaskMetadata(env_id={ENV_ID!r}, fps=10, seed=0, extra={{"writer": writer_index}})
    writer.start_task(metadata)  # the same derived name in both processes
    for step in range({STEPS_PER_TASK}):
        observation = {{
            "state": np.array([writer_index, task, step], np.float32),
            "image": np.full((4, 4, 3), writer_index, np.uint8),
        }}
        writer.record_action(np.zeros(2, np.float32), observation, 0.0, False, False)
    writer.finish_task(True, "terminated")
writer.close()
"""


def test_two_processes_recording_into_one_run_folder_keep_every_task(tmp_path):
    run_dir, go_file = tmp_path / "run", tmp_path / "go"
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(run_dir), str(index), str(go_file)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for index in range(2)
    ]
    time.sleep(1.0)
    go_file.touch()
    outputs = [process.communicate(timeout=120) for process in processes]
    for process, (_, stderr) in zip(processes, outputs, strict=True):
        assert process.returncode == 0, stderr
    first_lines = sorted(stdout.split()[0] for stdout, _ in outputs)
    assert first_lines == ["refused", "shared"]  # an explicit task id goes to one writer only

    task_dirs, incomplete = find_task_dirs(run_dir)
    assert incomplete == [] and len(task_dirs) == 2 * TASKS_PER_WRITER + 1
    suffixed = [task_dir.name for task_dir in task_dirs if task_dir.name.endswith("-1")]
    assert len(suffixed) >= TASKS_PER_WRITER - 1  # both derived the same names
    recorded = set()
    for task_dir in task_dirs:
        task = TrajectoryReader(task_dir).read_task()
        if task["task_id"] == "shared":
            continue
        actions = read_jsonl(task_dir / "actions.jsonl")
        assert actions.problems == []
        states = [record["observation"]["state"] for _, record in actions.records]
        writer_index, task_index = int(states[0][0]), int(states[0][1])
        assert task["extra"] == {"writer": writer_index}
        assert states == [[writer_index, task_index, step] for step in range(STEPS_PER_TASK)]
        for _, record in actions.records:  # each image is the one its writer wrote
            image = TrajectoryReader(task_dir).load_image(record["observation"]["image"])
            assert (image == writer_index).all()
        recorded.add((writer_index, task_index))
    assert recorded == {(w, t) for w in range(2) for t in range(TASKS_PER_WRITER)}
