"""The learner as a Ray actor on one node, the control loop's stand-in on the robot's node.

A real two-node cluster on this machine (`ray.cluster_utils.Cluster`): the head offers the
`learner` resource, the second node the `robot` resource. A small actor placed on the robot's
node (`robot_node_actor`) sends transitions through a `RayLearnerLink` and polls weights, as
the control loop does; then the learner actor is killed with `ray.kill`.
"""

import os
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from robot_learner_helpers import (  # noqa: E402
    DIMS,
    TimedLink,
    numbered_transition,
    owed_updates,
    start_two_node_cluster,
    wait_for,
    warmup_config,
)

from rpent_agents.robot import (  # noqa: E402
    LearnerLinkOptions,
    LearnerSetup,
    RayLearnerLink,
    RobotRunState,
    robot_node_actor,
)
from rpent_agents.robot.ray_learner_link import LEARNER_RESOURCE  # noqa: E402

pytestmark = pytest.mark.subprocess

TRANSITIONS = 6
CALL_BOUND_S = 0.05  # generous: the bench measures the real figure


@pytest.fixture(scope="module")
def two_node_cluster():
    """Head: {"learner": 1}; second node: {"robot": 1}; one CPU each."""
    with pytest.MonkeyPatch.context() as patch:  # the actors import this folder's helpers
        paths = [str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]
        patch.setenv("PYTHONPATH", os.pathsep.join(paths))
        cluster, _ = start_two_node_cluster()
        ray.init(address=cluster.address)
    yield cluster
    ray.shutdown()
    cluster.shutdown()


class ControlLoopStandIn:
    """Talks to the learner through a `RayLearnerLink` from the robot's node."""

    def __init__(self, run_dir):
        setup = LearnerSetup(Path(run_dir), warmup_config(), DIMS, device="cpu")
        options = LearnerLinkOptions(publish_period_s=0.2)
        self.link = TimedLink(RayLearnerLink(setup, options, resources={LEARNER_RESOURCE: 1}))

    def node_ids(self):
        """This actor's node and the learner's."""
        return ray.get_runtime_context().get_node_id(), self.link.link.node_id

    def learner_actor(self):
        return self.link.link.actor

    def train(self, transitions):
        """Send transitions one by one; the weights versions, the last status, the longest call."""
        versions = [self.link.poll()[0].version]
        for number in range(transitions):
            self.link.send([numbered_transition(number)])
            assert self.link.health() is None

        def trained_weights_came():
            weights, _ = self.link.poll()
            if weights is not None:
                versions.append(weights.version)
            return weights is not None and weights.update_step == owed_updates(transitions)

        wait_for(trained_weights_came, 60, "the trained actor's weights")
        self.link.end_episode(RobotRunState(episodes=1, env_steps=transitions * 10))

        def acknowledged_status():
            status = self.link.poll()[1]
            return status if status.saved_episodes == 1 else None

        status = wait_for(acknowledged_status, 60, "the save's acknowledgement")
        return versions, status, self.link.longest_call_s

    def health_within(self, timeout_s):
        return wait_for(self.link.health, timeout_s, "a health sentence", period_s=0.1)


def test_learner_and_robot_on_their_nodes(two_node_cluster, tmp_path):
    robot = robot_node_actor(ControlLoopStandIn, str(tmp_path / "run"))
    robot_node, learner_node = ray.get(robot.node_ids.remote(), timeout=120)
    assert robot_node != learner_node
    assert learner_node == two_node_cluster.head_node.node_id

    versions, status, longest_call_s = ray.get(robot.train.remote(TRANSITIONS), timeout=120)
    assert (status.transitions, status.replay_size) == (TRANSITIONS, TRANSITIONS)
    assert status.updates == owed_updates(TRANSITIONS) and status.actor_ready
    assert versions == sorted(set(versions)) and versions[-1] > 1
    assert longest_call_s < CALL_BOUND_S

    ray.kill(ray.get(robot.learner_actor.remote()))
    sentence = ray.get(robot.health_within.remote(30), timeout=60)
    assert sentence.startswith("the learner's Ray actor died")
    ray.kill(robot)
