"""`rpent-stage2-robot sim-stand-in`: the real-robot loop on the simulated peg task, one env.

The scripted expert stands in for the human: once the tiny learner's warm-up is done, it takes
over the stalled chunks of an untrained actor (every chunk is critical: `always_on`), and its
chunks are stored as interventions. A tiny Stage 1 checkpoint keeps the images at 32 pixels.
"""

import json
import re

import numpy as np
import pytest
from agent_helpers import tiny_checkpoint
from robot_command_helpers import STATUS, run_stand_in

from rpent_agents.features.checkpoint import load_featurizer
from rpent_agents.stage1.frame_cache import cache_from_episodes
from rpent_agents.stage2 import RLTDims
from rpent_agents.stage2.checkpoint import resume_run
from rpent_agents.stage2.demo_transitions import demo_transitions, save_transitions

pytestmark = [pytest.mark.sim, pytest.mark.subprocess, pytest.mark.slow, pytest.mark.timeout(300)]


def test_the_stand_in_stores_the_experts_chunks_and_the_learner_updates(tmp_path):
    checkpoint = tiny_checkpoint(tmp_path / "peg_checkpoint", 9, 8, 10)
    output_dir = tmp_path / "standin"
    result = run_stand_in(output_dir, checkpoint, 8, "--max-episodes", "2")
    assert result.returncode == 0, result.stderr[-4000:]
    results = json.loads((output_dir / "results.json").read_text())
    assert results["episodes"] == 2 and results["stop_reason"] == "max_episodes"
    assert results["intervention_env_steps"] > 0 and results["updates"] > 0
    assert results["control_period_s"] is None  # a simulator keeps no period
    learner, extra = resume_run(output_dir / "run", "cpu")
    assert len(learner.replay) == results["transitions"] > 0
    assert learner.replay.storage["intervened"][: len(learner.replay)].any()
    assert extra["robot_run_state"]["episodes"] == 2
    assert (output_dir / "trajectories").is_dir()


def test_with_the_learner_catching_up_each_episode_starts_once_every_owed_update_ran(tmp_path):
    # 400 updates per stored transition: far more than a CPU learner runs while the loop
    # drives an episode, so without the wait the second episode would start behind.
    update_epoch = 400
    checkpoint = tiny_checkpoint(tmp_path / "peg_checkpoint", 9, 8, 10)
    result = run_stand_in(
        tmp_path / "standin", checkpoint, 8, "--max-episodes", "3", "--learner-catches-up",
        "--stage2.update-epoch", str(update_epoch), "--no-record-trajectories",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    first_chunk_status = {}
    for line in re.split(r"[\r\n]", result.stdout + result.stderr):
        match = STATUS.search(line)
        if match is not None and match["activity"].startswith("driver"):
            first_chunk_status.setdefault(int(match["episode"]), match)
    assert sorted(first_chunk_status) == [1, 2, 3]
    for episode in (2, 3):
        status = first_chunk_status[episode]
        owed = 10 + (int(status["replay"]) - 2) * update_epoch  # TINY_STAGE2's schedule
        assert int(status["replay"]) > 2 and int(status["updates"]) >= owed, status.group(0)


def write_demo_transitions(path, checkpoint, steps=25):
    """One episode of random frames of the peg's sizes, converted with `checkpoint`."""
    rng = np.random.default_rng(0)
    frames = [
        {"image": rng.integers(0, 256, (32, 32, 3), np.uint8),
         "wrist_image": rng.integers(0, 256, (32, 32, 3), np.uint8),
         "state": rng.uniform(-1, 1, 9).astype(np.float32),
         "actions": rng.uniform(-1, 1, 8).astype(np.float32), "task": "insert the peg"}
        for _ in range(steps)
    ]  # fmt: skip
    featurizer = load_featurizer(checkpoint)
    transitions = demo_transitions(cache_from_episodes([frames]), featurizer, 10, "observed")
    dims = RLTDims(featurizer.z_dim, 9, featurizer.chunk_len, 8)
    save_transitions(transitions, dims, path)
    return len(transitions)


def test_the_stand_in_starts_from_demonstrations_with_the_actor_ready(tmp_path):
    checkpoint = tiny_checkpoint(tmp_path / "peg_checkpoint", 9, 8, 10)
    demos = write_demo_transitions(tmp_path / "demos.npz", checkpoint)
    result = run_stand_in(
        tmp_path / "standin", checkpoint, 4, "--max-episodes", "1", "--no-record-trajectories",
        "--stage2.demo-transitions", str(tmp_path / "demos.npz"),
        "--stage2.demo-pretrain-updates", "10",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    statuses = [STATUS.search(line) for line in re.split(r"[\r\n]", result.stdout + result.stderr)]
    first = next(status for status in statuses if status is not None)
    assert (first["env_steps"], first["updates"], first["replay"]) == ("0", "10", str(demos))
    assert first["activity"] == "driver actor"  # the warm-up ran on the demonstrations
