"""`rpent-stage2-robot real-robot` against franky-sim, an operator pressing real keys (Xvfb).

The command runs as a subprocess with a tiny Stage 1 checkpoint of the Franka's sizes, blank
cameras (franky-sim has none) and a tiny CPU learner whose warm-up ends after 2 transitions.
The simulated operator presses its keys with xdotool when the command's status line says
what it is doing, never after a guessed delay.
"""

import json
import os
import re
import signal
import subprocess
import sys

import numpy as np
import pytest
import torch
from agent_helpers import tiny_checkpoint
from robot_command_helpers import (
    CommandRun,
    assert_arm_still,
    hold,
    key,
    owed_updates,
    real_robot_args,
)

from recorders.trajectory import find_task_dirs
from rpent_agents.stage2.checkpoint import resume_run
from rpent_agents.stage2.learner import Stage2Learner

pytestmark = [
    pytest.mark.sim,
    pytest.mark.subprocess,
    pytest.mark.slow,
    pytest.mark.timeout(300, method="thread"),  # also fires while a franky call blocks in C++
]
PERIOD_S = 0.1
MOVE_X = np.array([1, 0, 0, 0, 0, 0], np.float32)  # the Up key's command


@pytest.fixture(scope="module")
def franka_checkpoint(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("franka_checkpoint"), 19, 7, 20)


@pytest.fixture(scope="module")
def sim(start_sim):
    return start_sim()


def operate_two_episodes(run):
    """Episode 1: b, the actor drives, a keyboard intervention, success; episode 2: failure."""
    run.wait_for_status(lambda s: s.waits_for_reset, "wait for the reset key")
    key("r")
    run.wait_for_status(lambda s: s.driver == "vla", "the reference driving")
    key("b")
    run.wait_for_status(lambda s: s.driver == "actor", "the actor driving after its warm-up")
    key("space")
    taken_over = run.wait_for_status(lambda s: s.driver == "human", "the human driving")
    hold("Up", down=True)  # two whole chunks with +x held
    run.wait_for_status(
        lambda s: s.driver == "human" and s.env_steps >= taken_over.env_steps + 20, "+x chunks"
    )
    hold("Up", down=False)
    key("space")
    run.wait_for_status(lambda s: s.driver == "actor", "the actor back in control")
    key("c")
    run.wait_for_status(lambda s: s.waits_for_reset and s.episodes == 1, "episode 1 saved")
    key("r")
    run.wait_for_status(lambda s: s.driver == "vla" and s.episode == 2, "episode 2")
    key("a")


def intervened_actions(run_dir):
    learner, _ = resume_run(run_dir, "cpu")
    size = len(learner.replay)
    intervened = learner.replay.storage["intervened"][:size].numpy()
    actions = learner.replay.storage["action"][:size].numpy()
    return learner, actions[intervened]


def assert_recorded_and_exported(output_dir, export_dir):
    """The two episodes' records hold the operator's verdicts; the success exports."""
    verdicts = sorted(
        json.loads((task / "task.json").read_text())["result"]["environment_success"]
        for task in find_task_dirs(output_dir)[0]
    )
    assert verdicts == [False, True]
    export = subprocess.run(
        [sys.executable, "-m", "recorders.cli", "--input-root", str(output_dir),
         "--output-dir", str(export_dir), "--no-use-videos"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert export.returncode == 0, export.stderr
    report = json.loads((export_dir / "report.json").read_text())
    counts = report["counts"]  # the successful episode's VLA chunks (the actor's: not asked)
    assert counts["tasks_exported"] == 1 and counts["frames"] > 0, report


def test_an_operator_trains_the_actor_on_franky_sim(sim, franka_checkpoint, xvfb_display, tmp_path):
    output_dir = tmp_path / "franka"
    args = real_robot_args(output_dir, sim.host, franka_checkpoint, "--max-episodes", "2")
    run = CommandRun(args)
    try:
        operate_two_episodes(run)
        assert run.finish() == 0, run.output()[-3000:]
    finally:
        run.kill()
    assert "keys: b actor" in run.output()  # the legend, once
    results = json.loads((output_dir / "results.json").read_text())
    assert (results["episodes"], results["successes"]) == (2, 1)
    assert results["intervention_env_steps"] >= 20 and results["actor_env_steps"] > 0
    assert results["stop_reason"] == "max_episodes"
    assert results["control_period_s"] == PERIOD_S
    assert abs(results["control_period_p50_s"] - PERIOD_S) <= 0.1 * PERIOD_S, results

    learner, human_actions = intervened_actions(output_dir / "run")
    assert len(learner.replay) == results["replay_size"] == results["transitions"] > 0
    moved = (human_actions[:, :6] == MOVE_X).all(axis=1)
    still = (human_actions[:, :6] == 0).all(axis=1)
    assert moved.sum() >= 10 and (moved | still).all()  # the held key's chunks: BC targets
    assert np.isin(human_actions[:, 6], (-1.0, 1.0)).all()
    initial = Stage2Learner(learner.config, learner.dims, "cpu").actor.state_dict()
    assert 0 < learner.update_step <= results["updates"]
    assert any(
        not torch.equal(tensor, initial[name])
        for name, tensor in learner.actor.state_dict().items()
    )
    assert_recorded_and_exported(output_dir, tmp_path / "export")


def saved_run(output_dir):
    """The counters, replay size, updates and actor weights of the run's last save."""
    learner, extra = resume_run(output_dir / "run", "cpu")
    return {
        "state": extra["robot_run_state"], "replay": len(learner.replay),
        "transitions": learner.replay.total_added, "updates": learner.update_step,
        "actor": learner.actor.state_dict(),
    }  # fmt: skip


def run_then_kill_in_episode_3(args):
    """Episode 1 trains (b, success), episode 2 fails once the learner has caught up, and the
    command is killed in the middle of episode 3."""
    run = CommandRun(args)
    try:
        run.wait_for_status(lambda s: s.waits_for_reset, "wait for the reset key")
        key("r")
        run.wait_for_status(lambda s: s.driver == "vla", "the reference driving")
        key("b")
        run.wait_for_status(lambda s: s.replay >= 3, "transitions stored")
        key("c")
        run.wait_for_status(lambda s: s.waits_for_reset and s.episodes == 1, "episode 1 saved")
        key("r")
        run.wait_for_status(
            lambda s: s.episode == 2 and s.driver and s.updates == owed_updates(s.replay),
            "the learner caught up",
        )
        key("a")
        run.wait_for_status(lambda s: s.waits_for_reset and s.episodes == 2, "episode 2 saved")
        key("r")
        started = run.wait_for_status(lambda s: s.episode == 3 and s.driver, "episode 3")
        run.wait_for_status(lambda s: s.env_steps >= started.env_steps + 10, "mid-episode 3")
    finally:
        run.kill()  # SIGKILL


def resume_for_one_failed_episode(args):
    run = CommandRun([*args, "--resume", "--max-episodes", "3"])
    try:
        run.wait_for_status(lambda s: s.waits_for_reset and s.episode == 3, "wait for episode 3")
        key("r")
        run.wait_for_status(lambda s: s.driver == "vla" and s.episode == 3, "episode 3")
        key("a")  # no b: nothing stored, nothing to update
        assert run.finish() == 0, run.output()[-3000:]
    finally:
        run.kill()


def test_a_killed_run_resumes_from_its_last_save(sim, franka_checkpoint, xvfb_display, tmp_path):
    output_dir = tmp_path / "franka"
    args = real_robot_args(output_dir, sim.host, franka_checkpoint)
    run_then_kill_in_episode_3(args)
    saved = saved_run(output_dir)
    assert saved["state"]["episodes"] == 2 and saved["state"]["successes"] == 1
    assert saved["replay"] >= 3 and saved["updates"] == owed_updates(saved["transitions"])

    resume_for_one_failed_episode(args)
    resumed = saved_run(output_dir)
    state = resumed["state"]
    assert (state["episodes"], state["successes"], state["failures"]) == (3, 1, 2)
    assert state["env_steps"] > saved["state"]["env_steps"]
    assert state["seeds_handed_out"] == 3  # the killed episode's seed is run again
    assert (resumed["replay"], resumed["transitions"]) == (saved["replay"], saved["transitions"])
    assert resumed["updates"] == saved["updates"]
    for name, tensor in resumed["actor"].items():
        assert torch.equal(tensor, saved["actor"][name]), name
    results = json.loads((output_dir / "results.json").read_text())
    assert (results["episodes"], results["env_steps"]) == (3, state["env_steps"])


def test_a_lost_learner_holds_the_arm_and_ends_the_command_in_one_line(
    sim, franka_checkpoint, xvfb_display, tmp_path
):
    output_dir = tmp_path / "franka"
    run = CommandRun(real_robot_args(output_dir, sim.host, franka_checkpoint))
    try:
        learner_pid = int(
            re.search(
                r"learner runs in process (\d+)",
                run.wait_for(lambda line: "learner runs in process" in line, "the learner's pid"),
            ).group(1)
        )
        run.wait_for_status(lambda s: s.waits_for_reset, "wait for the reset key")
        key("r")
        run.wait_for_status(lambda s: s.driver == "vla", "the reference driving")
        key("b")
        driving = run.wait_for_status(lambda s: s.replay >= 1, "a transition stored")
        os.kill(learner_pid, signal.SIGKILL)
        assert run.finish() == 1
    finally:
        run.kill()
    lines = run.output().splitlines()
    assert lines[-1].startswith("rpent-stage2-robot: the learner process died (exit code -9)")
    assert "--resume" in lines[-1] and "Traceback" not in run.output()
    last_status = [line for line in lines if "env steps" in line][-1]
    steps_after_kill = int(re.search(r"env steps (\d+)/", last_status).group(1))
    assert steps_after_kill <= driving.env_steps + 20  # at most the chunk in flight ran
    assert_arm_still(sim.host)
    results = json.loads((output_dir / "results.json").read_text())
    assert results["stop_reason"].startswith("the learner process died")
