"""A recording process killed with SIGKILL mid-episode: complete lines stay, the export copes."""

import json
import os
import signal
import subprocess
import sys

import pytest

import rpent_envs
from recorders.flywheel import export_flywheel
from recorders.record_format import read_jsonl
from recorders.trajectory import TrajectoryReader

pytestmark = [pytest.mark.sim, pytest.mark.subprocess]

KILL_AFTER_STEPS = 10
RECORDER = f"""
import sys
import gymnasium as gym
import numpy as np
import rpent_envs
from recorders.provenance import provenance_of
from wrappers.record import RecordTrajectory

inner = gym.make({rpent_envs.PEG_INSERTION_ID!r}, obs_mode="rgb", image_size=32)
env = RecordTrajectory(inner, sys.argv[1], robot="panda")
log = provenance_of(env)
observation, info = env.reset(seed=0)
call_id = log.tool_call("vla", {{"instruction": info["task"]}})
prediction_id = log.vla_prediction(call_id, info["task"], "still-vla")
log.set_action_source("vla", call_id=call_id, prediction_id=prediction_id)
step = 0
while True:  # holding still never succeeds: the episode is cut by the kill
    env.step(np.zeros(8, np.float32))
    step += 1
    print(step, flush=True)
"""


def test_sigkill_mid_episode_keeps_complete_lines(tmp_path):
    run_dir = tmp_path / "run"
    process = subprocess.Popen(
        [sys.executable, "-c", RECORDER, str(run_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    steps_done = 0
    for line in process.stdout:
        steps_done = int(line)
        if steps_done >= KILL_AFTER_STEPS:
            os.kill(process.pid, signal.SIGKILL)
            break
    assert process.wait(timeout=60) == -signal.SIGKILL, "the recorder died before the kill"

    (task_dir,) = (run_dir / "trajectories").iterdir()
    task = TrajectoryReader(task_dir).read_task()
    assert task["finished_at"] is None and task["result"]["environment_success"] is None
    raw_lines = (task_dir / "actions.jsonl").read_bytes().split(b"\n")
    complete = [json.loads(line) for line in raw_lines[:-1]]  # every terminated line parses
    assert [record["step"] for record in complete] == list(range(len(complete)))
    assert len(complete) >= steps_done
    problems = read_jsonl(task_dir / "actions.jsonl").problems
    assert problems in ([], [(len(raw_lines), "truncated_last_line")])

    report = export_flywheel(run_dir, tmp_path / "export")
    (outcome,) = report.tasks
    assert outcome.reason == "run_unfinished" and report.frames == 0
    assert [p.name for p in (tmp_path / "export").iterdir()] == ["report.json"]
    assert report.env_id == rpent_envs.PEG_INSERTION_ID
