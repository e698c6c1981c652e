"""Stage 2 learns: on a chunked task with a sparse reward and a biased reference, BC alone
stays at the reference's success and BC + Q (the shipped sample-efficient preset, scaled down)
fixes it. The same check fails when the TD target's bootstrap or the actor's Q term has its
sign flipped, so a sign error in either cannot pass CI.
"""

import dataclasses

import chunked_reach as task
import pytest
import torch

from rpent_agents.stage2 import Stage2Config, Stage2Learner, losses

pytestmark = pytest.mark.slow

TRAIN_EPISODES = 500
EVAL_EPISODES = 200
LEARNED = 0.6
"""Success the trained actor must reach (the reference reaches ~0.3)."""
SAMPLE_EFFICIENT_STAGE2 = Stage2Config.sample_efficient()


def learner(**overrides):
    # The preset's algorithm (normalized Q term, noise, reference dropout, weight schedule),
    # with network sizes and a schedule for a task of a few thousand transitions.
    config = dataclasses.replace(
        SAMPLE_EFFICIENT_STAGE2,
        chunk_len=task.HORIZON, hidden_dim=64, batch_size=128, device="cpu",
        gamma=0.9, actor_lr=3e-4, critic_lr=3e-4,
        learning_starts=200, warmup_updates=500, weight_warmup_updates=300,
        weight_ramp_updates=1000, update_epoch=4, train_every_transitions=1,
        replay_capacity=20_000, sample_window=20_000, **overrides,
    )  # fmt: skip
    return Stage2Learner(config, task.DIMS)


def trained(**overrides):
    torch.set_num_threads(1)
    agent = learner(**overrides)
    task.train(agent, TRAIN_EPISODES, seed=1)
    return agent


def trained_success(**overrides):
    return task.success_rate(trained(**overrides), EVAL_EPISODES, seed=7)


@pytest.fixture(scope="module")
def preset_agent():
    return trained()


@pytest.fixture(scope="module")
def reference_success():
    return task.success_rate(learner(), EVAL_EPISODES, seed=7, use_actor=False)


def test_bc_alone_copies_the_biased_reference(reference_success):
    assert 0.15 < reference_success < 0.45
    bc_only = trained_success(warmup_q_weight=0.0, online_q_weight=0.0)
    assert bc_only < reference_success + 0.1


def test_bc_plus_q_corrects_the_reference(reference_success, preset_agent):
    success = task.success_rate(preset_agent, EVAL_EPISODES, seed=7)
    assert success >= LEARNED and success >= reference_success + 0.3


def test_the_q_filter_keeps_what_the_actor_learned(preset_agent):
    # The critic that taught the actor prefers its chunks where they are better: filtering
    # the evaluation by it must keep the correction (it may only fix the actor's misses).
    assert preset_agent.config.eval_q_filter  # the preset filters its evaluations
    filtered = task.success_rate(preset_agent, EVAL_EPISODES, seed=7)
    preset_agent.config.eval_q_filter = False
    try:
        unfiltered = task.success_rate(preset_agent, EVAL_EPISODES, seed=7)
    finally:
        preset_agent.config.eval_q_filter = True
    assert filtered >= LEARNED and filtered >= unfiltered - 0.05


def test_a_twin_critic_learns_the_task_too(reference_success):
    # the reference's critic: 2 heads, the TD target's minimum over both, the actor on the
    # first (the preset's is RLPD's ensemble of 10)
    assert SAMPLE_EFFICIENT_STAGE2.num_q_heads == 10
    success = trained_success(num_q_heads=2, target_q_heads=None, actor_q="first")
    assert success >= LEARNED and success >= reference_success + 0.3


def test_an_averaged_acting_actor_learns_the_task_too(reference_success):
    # evaluation acts with a Polyak average of the trained actor (~the last 100 actor steps)
    success = trained_success(acting_actor_tau=0.01)
    assert success >= LEARNED and success >= reference_success + 0.3


def test_exploring_one_train_step_behind_learns_the_task_too(reference_success):
    # training acts on the actor from before the latest train step's updates (as the GPU loop
    # does with act_during_updates, so that acting waits for no update)
    success = trained_success(act_during_updates=True)
    assert success >= LEARNED and success >= reference_success + 0.3


def test_q_ranked_acting_learns_the_task_too(reference_success):
    # Q-ranked acting (an option): the critic picks among perturbations of the actor's chunk
    # and the reference, when exploring and at evaluation (where, as in the robot-hour
    # preset, every head must prefer a chunk to the reference's for it to run)
    assert Stage2Config.robot_hour().eval_consensus
    success = trained_success(acting_samples=8, eval_consensus=True)
    assert success >= LEARNED and success >= reference_success + 0.3


def _bootstrap_sign_flipped(rewards, done, next_q_min, gamma, bootstrap_type="standard"):
    return _TD_TARGET(rewards, done, -next_q_min, gamma, bootstrap_type)


def _q_term_sign_flipped(q1_of_actor, bc_loss, q_weight, bc_weight, scale=1.0):
    return _ACTOR_LOSS(-q1_of_actor, bc_loss, q_weight, bc_weight, scale)


_TD_TARGET, _ACTOR_LOSS = losses.td_target, losses.actor_loss


@pytest.mark.parametrize("acting_samples", [0, 8])
@pytest.mark.parametrize(
    ("name", "broken"),
    [("td_target", _bootstrap_sign_flipped), ("actor_loss", _q_term_sign_flipped)],
)
def test_a_sign_error_fails_the_learning_check(monkeypatch, name, broken, acting_samples):
    # with Q-ranked acting too: a critic that learned the wrong values must not rescue it
    monkeypatch.setattr(losses, name, broken)
    assert trained_success(acting_samples=acting_samples) < LEARNED
