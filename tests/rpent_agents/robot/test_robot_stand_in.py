"""`rpent-stage2-robot sim-stand-in`: the real-robot loop on the simulated peg task, one env.

The scripted expert stands in for the human: once the tiny learner's warm-up is done, it takes
over the stalled chunks of an untrained actor (every chunk is critical: `always_on`), and its
chunks are stored as interventions. A tiny Stage 1 checkpoint keeps the images at 32 pixels.
"""

import json

import pytest
from agent_helpers import tiny_checkpoint
from robot_command_helpers import run_stand_in

from rpent_agents.stage2.checkpoint import resume_run

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
