"""What the robot learner tests share: small RLT sizes, a warm-up config, numbered transitions,
a two-node Ray cluster."""

import time

import numpy as np

from rpent_agents.stage2 import RLTDims, RLTTransition, Stage2Config

DIMS = RLTDims(z_dim=16, proprio_dim=7, ref_chunk_len=20, action_dim=7)
CHUNK_LEN = 10
LEARNING_STARTS = 2
WARMUP_UPDATES = 10
UPDATE_EPOCH = 4  # per stored transition: train_every_transitions=1


def warmup_config(**overrides) -> Stage2Config:
    """The real robot's setting with a warm-up (the `real-robot` preset's kind), small and CPU."""
    values = {
        "update_schedule": True, "learning_starts": LEARNING_STARTS,
        "warmup_updates": WARMUP_UPDATES, "train_every_transitions": 1,
        "update_epoch": UPDATE_EPOCH, "chunk_len": CHUNK_LEN, "hidden_dim": 32, "batch_size": 8,
        "replay_capacity": 1000, "sample_window": 200, "device": "cpu",
    }  # fmt: skip
    return Stage2Config.real_robot(**(values | overrides))


def owed_updates(transitions: int) -> int:
    """Updates `warmup_config` owes after `transitions` stored one by one."""
    if transitions < LEARNING_STARTS:
        return 0
    return WARMUP_UPDATES + (transitions - LEARNING_STARTS) * UPDATE_EPOCH


def numbered_transition(number: int) -> RLTTransition:
    """A random transition (seeded by `number`) whose `z_rl[0]` is `number`."""
    rng = np.random.default_rng(number)

    def uniform(*shape):
        return rng.uniform(-1, 1, shape).astype(np.float32)

    z_rl = uniform(DIMS.z_dim)
    z_rl[0] = number
    ref_shape = (DIMS.ref_chunk_len, DIMS.action_dim)
    return RLTTransition(
        z_rl=z_rl, proprio=uniform(DIMS.proprio_dim), ref_chunk=uniform(*ref_shape),
        action=uniform(CHUNK_LEN, DIMS.action_dim), rewards=np.zeros(CHUNK_LEN, np.float32),
        next_z_rl=uniform(DIMS.z_dim), next_proprio=uniform(DIMS.proprio_dim),
        next_ref_chunk=uniform(*ref_shape), done=False, intervened=np.zeros(CHUNK_LEN, bool),
    )  # fmt: skip


def wait_for(condition, timeout_s, what, period_s=0.02):
    """Call `condition()` until it returns a true value (returned) or `timeout_s` passes."""
    deadline_s = time.monotonic() + timeout_s
    while time.monotonic() < deadline_s:
        value = condition()
        if value:
            return value
        time.sleep(period_s)
    raise AssertionError(f"no {what} within {timeout_s} s")


class TimedLink:
    """A link whose every call is timed: the longest call's seconds in `longest_call_s`."""

    def __init__(self, link):
        self.link = link
        self.longest_call_s = 0.0

    def __getattr__(self, name):
        method = getattr(self.link, name)

        def timed(*args, **kwargs):
            start_s = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                self.longest_call_s = max(self.longest_call_s, time.perf_counter() - start_s)

        return timed


def start_two_node_cluster():
    """A Ray cluster on this machine: the head offers `learner`, a second node `robot` (one
    CPU each). Returns the cluster and the robot's node."""
    from ray.cluster_utils import Cluster

    from rpent_agents.robot.ray_learner_link import LEARNER_RESOURCE, ROBOT_RESOURCE

    head = {"num_cpus": 1, "resources": {LEARNER_RESOURCE: 1}, "include_dashboard": False}
    cluster = Cluster(initialize_head=True, head_node_args=head)
    robot_node = cluster.add_node(num_cpus=1, resources={ROBOT_RESOURCE: 1})
    cluster.wait_for_nodes()
    return cluster, robot_node
