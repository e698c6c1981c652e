"""CUDA-graph replay of the Stage 2 update against the eager update.

These need a CUDA device, which CI never has; they run on the GPU machine
(`python -m pytest tests/rpent_agents/stage2/test_stage2_cuda_graphs.py`).
"""

import threading

import numpy as np
import pytest
import torch
from stage2_helpers import (
    assert_same_learning,
    filled_learner,
    network_tensors,
    stored_observations,
)

from rpent_agents.stage2 import resume_run, save_run
from rpent_agents.stage2.algorithm import UpdateKind

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available(), reason="needs a CUDA device (CI machines have none)"
    ),
]


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"actor_noise_std": 0.0, "reference_dropout_prob": 0.0},
        {"num_q_heads": 10, "target_q_heads": 2, "actor_q": "mean"},
        {"acting_actor_tau": 0.05},
    ],
    ids=["noise-and-dropout", "deterministic", "ensemble", "averaged-actor"],
)
def test_graphed_updates_learn_what_eager_updates_learn(overrides):
    eager = filled_learner(cuda_graphs=False, **overrides)
    graphed = filled_learner(cuda_graphs=True, **overrides)

    # The second call starts with both kinds captured: its means sum graph outputs that
    # each replay overwrites.
    for num_updates in (21, 9):
        eager_scalars = eager.run_updates(num_updates)
        graphed_scalars = graphed.run_updates(num_updates)

        assert set(graphed.captured_updates) == {UpdateKind(True, True), UpdateKind(False, True)}
        assert graphed_scalars.keys() == eager_scalars.keys()
        for name, value in eager_scalars.items():
            assert graphed_scalars[name] == pytest.approx(value, rel=1e-3, abs=1e-6), name
        assert_same_learning(eager, graphed)


def in_a_new_thread(function):
    """`function()` run in a thread started for it; what it raised is raised here."""
    outcome = []

    def call():
        try:
            outcome.append(function())
        except Exception as error:
            outcome.append(error)

    thread = threading.Thread(target=call)
    thread.start()
    thread.join()
    if isinstance(outcome[0], Exception):
        raise outcome[0]
    return outcome[0]


# In a new thread: the robot learner's case, a fresh process that resumes (its Adams have
# state at once) and updates in a thread of its own, whose first matrix product creates its
# cuBLAS handle.
@pytest.mark.parametrize("new_thread", [False, True], ids=["same-thread", "new-thread"])
def test_graphed_run_resumes_and_continues_like_an_uninterrupted_one(tmp_path, new_thread):
    uninterrupted = filled_learner(cuda_graphs=True)
    uninterrupted.run_updates(10)
    save_run(uninterrupted, tmp_path / "run")
    uninterrupted.run_updates(10)

    resumed, _ = resume_run(tmp_path / "run", device="cuda")
    if new_thread:
        in_a_new_thread(lambda: resumed.run_updates(10))
    else:
        resumed.run_updates(10)

    assert resumed.update_step == uninterrupted.update_step == 20 and resumed.captured_updates
    assert all(
        group["capturable"]
        for optimizer in (resumed.actor_optimizer, resumed.critic_optimizer)
        for group in optimizer.param_groups
    )
    assert_same_learning(uninterrupted, resumed)


def test_acting_between_graph_replays_draws_fresh_noise():
    learner = filled_learner(cuda_graphs=True)
    learner.run_updates(6)
    obs = stored_observations(learner, 4)

    first, second = learner.act(obs), learner.act(obs)
    learner.run_updates(4)
    mean = learner.act(obs, deterministic=True)

    assert not np.array_equal(first, second)
    assert np.abs(first - mean).max() < 0.05  # noise std 0.002 before the tanh


def test_a_non_finite_update_is_skipped_on_the_device_as_in_the_eager_update():
    eager = filled_learner(cuda_graphs=False)
    graphed = filled_learner(cuda_graphs=True)
    for learner in (eager, graphed):
        learner.run_updates(8)  # both update kinds captured; the next one steps the actor
        batch = learner.replay.sample(32, learner.sample_generator).to(learner.device)
        batch.rewards[5, 0] = float("nan")  # the critic's loss only
        batch.next_obs.z_rl[7, 2] = float("inf")  # the TD target again
        batch.obs.proprio[2, 1] = float("nan")  # and the actor's loss
        online = [p for module in (learner.actor, learner.critic) for p in module.parameters()]
        before = [parameter.detach().clone() for parameter in online]
        learner.update(batch)
        assert all(torch.equal(p, saved) for p, saved in zip(online, before, strict=True))
        assert learner.skipped_step_scalars() == {
            "train/rlt/skipped_critic_steps": 1.0,
            "train/rlt/skipped_actor_steps": 1.0,
        }
        learner.run_updates(9)
        assert all(torch.isfinite(tensor).all() for tensor in network_tensors(learner))
    assert set(graphed.captured_updates) == {UpdateKind(True, True), UpdateKind(False, True)}
    assert_same_learning(eager, graphed)
