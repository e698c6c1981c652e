"""The learner of the real-arm loop on the GPU: a spawned child process that trains with CUDA
(graphs, update stream and replay on the device, as the `real-robot` preset runs there) and
sends the control loop CPU weights it loads into its own actor; the run it saves resumes on a
CPU-only host. Skipped without CUDA (CI machines have none); the same steps on the CPU are
`test_process_learner_link.py`.
"""

import time

import numpy as np
import pytest
import torch
from robot_learner_helpers import DIMS, numbered_transition, owed_updates, wait_for, warmup_config

from rpent_agents.robot import LearnerSetup, ProcessLearnerLink, RobotRunState

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.subprocess,
    pytest.mark.skipif(
        not torch.cuda.is_available(), reason="needs a CUDA device (CI machines have none)"
    ),
]

TRANSITIONS = 12


def test_a_cuda_learner_trains_sends_cpu_weights_and_resumes_on_the_cpu(tmp_path):
    run_dir = tmp_path / "run"
    config = warmup_config(device="cuda", cuda_graphs=True, update_stream=True)
    with ProcessLearnerLink(LearnerSetup(run_dir, config, DIMS, device="cuda")) as link:
        for number in range(TRANSITIONS):
            link.send([numbered_transition(number)])
            time.sleep(0.05)
        expected_updates = owed_updates(TRANSITIONS)
        weights_seen = []

        def latest_update_step():
            weights, _ = link.poll()
            weights_seen.extend([weights] if weights is not None else [])
            return weights_seen[-1].update_step if weights_seen else 0

        wait_for(lambda: latest_update_step() == expected_updates, 120, "the CUDA updates")
        weights, status = weights_seen[-1], link.poll()[1]
        assert link.health() is None and status.actor_ready and weights.actor_ready
        assert all(isinstance(values, np.ndarray) for values in weights.state_dict.values())
        actor = link.acting_spec.build_actor()  # the control loop's copy, on the CPU
        weights.load_into(actor)
        assert all(np.isfinite(values).all() for values in weights.state_dict.values())
        link.end_episode(RobotRunState(episodes=1, env_steps=TRANSITIONS * 10))
        wait_for(lambda: link.poll()[1].saved_episodes == 1, 120, "the save's ack")

    with ProcessLearnerLink(LearnerSetup(run_dir, device="cpu")) as resumed:
        status = resumed.poll()[1]
        assert (status.updates, status.replay_size) == (expected_updates, TRANSITIONS)
        assert resumed.run_state.episodes == 1
