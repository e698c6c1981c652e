"""`rpent-stage2-robot --learner ray` on a two-node Ray cluster of this machine.

The head offers the `learner` resource, the second node the `robot` resource; the command,
started as a subprocess, runs the learner as a Ray actor on the head and its control loop as a
Ray actor on the robot's node (the stand-in env: no hardware, no keys).
"""

import json
import re

import pytest
from agent_helpers import tiny_checkpoint
from robot_command_helpers import run_stand_in
from robot_learner_helpers import start_two_node_cluster

from rpent_agents.stage2.checkpoint import CONFIG_FILE

pytest.importorskip("ray")
pytestmark = [pytest.mark.sim, pytest.mark.subprocess, pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture
def two_node_cluster():
    cluster, robot_node = start_two_node_cluster()
    yield cluster, robot_node
    cluster.shutdown()


def test_the_control_loop_runs_on_the_robots_node_and_the_learner_on_the_head(
    two_node_cluster, tmp_path
):
    cluster, robot_node = two_node_cluster
    checkpoint = tiny_checkpoint(tmp_path / "peg_checkpoint", 9, 8, 10)
    output_dir = tmp_path / "standin"
    result = run_stand_in(
        output_dir, checkpoint, 4, "--max-episodes", "1",
        "--learner", "ray", "--ray-address", cluster.address,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    output = result.stdout + result.stderr
    loop_node = re.search(r"control loop runs on Ray node (\w+)", output).group(1)
    learner_node = re.search(r"learner runs as a Ray actor on node (\w+)", output).group(1)
    assert loop_node == robot_node.node_id
    assert learner_node == cluster.head_node.node_id
    results = json.loads((output_dir / "results.json").read_text())
    assert results["episodes"] == 1 and results["transitions"] > 0
    assert (output_dir / "run" / CONFIG_FILE).is_file()  # one host: one output folder
