"""Held-out evaluation on the training workers: a seed alone defines its episode.

Workers reset themselves with the seed sent with each chunk, and rebuild the scene for
evaluated episodes, so the same seeds give the same episodes on any number of workers, after
training episodes that kept another seed's scene, and whether the workers step in lockstep or
each as soon as it answered.
"""

import numpy as np
import pytest

from rpent_agents.rollout.rlt_stack import PegRLTConfig
from rpent_agents.rollout.vector import make_rlt_vector_env, reset_envs
from rpent_agents.stage2.evaluation import evaluate_on_seeds

pytestmark = [pytest.mark.sim, pytest.mark.subprocess]

# always_on: with actor_ready the actor's chunk drives every chunk from the first
CONFIG = PegRLTConfig(
    render_backend="cpu",
    feature_device="cpu",
    max_episode_chunks=2,
    reconfiguration_freq=4,
    trigger_mode="always_on",
)
SEEDS = [3, 4, 5]
# A fixed actor whose chunk depends on the observation it is given (its row of the batch).
ACTOR_WEIGHTS = np.random.default_rng(0).normal(0.0, 0.3, (9, 80)).astype(np.float32)


def reference_chunks(obs):
    return np.zeros((len(obs["z_rl"]), 80), np.float32)


def proprio_actor(obs):
    return np.tanh(obs["proprio"] @ ACTOR_WEIGHTS)


@pytest.fixture(scope="module")
def two_workers():
    envs = make_rlt_vector_env(CONFIG, num_envs=2)
    yield envs
    envs.close()


def evaluate(envs, seeds, act=reference_chunks, ready_envs=1):
    """The result and, per seed, (peg head in the hole frame, done) at every chunk end."""
    chunks: dict[int, list[tuple[np.ndarray, bool]]] = {}
    result = evaluate_on_seeds(
        envs,
        seeds,
        act=act,
        actor_ready=act is not reference_chunks,
        observer=lambda seed, info, done: chunks.setdefault(seed, []).append(
            (np.asarray(info["peg_head_pos_at_hole"]), done)
        ),
        ready_envs=ready_envs,
    )
    return result, chunks


def test_the_same_seeds_give_the_same_episodes_on_any_number_of_workers(two_workers):
    one_worker = make_rlt_vector_env(CONFIG, num_envs=1)
    try:
        one_result, one_env = evaluate(one_worker, SEEDS)
    finally:
        one_worker.close()
    # training episodes first: their scenes would be kept by the next resets
    reset_envs(two_workers, np.ones(2, bool), [100, 101])
    two_result, two_envs = evaluate(two_workers, SEEDS)
    assert sorted(one_env) == sorted(two_envs) == SEEDS
    for seed in SEEDS:
        assert len(one_env[seed]) == len(two_envs[seed]) == 2  # the chunk limit
        # The feature model's float rounding depends on its batch size, one row per worker.
        np.testing.assert_allclose(
            [head for head, _ in one_env[seed]], [head for head, _ in two_envs[seed]], atol=1e-4
        )
    assert not np.allclose(one_env[3][0][0], one_env[4][0][0])  # seeds differ in geometry
    assert one_result.length_by_seed == two_result.length_by_seed == dict.fromkeys(SEEDS, 20)
    assert one_result.env_steps == two_result.env_steps == 60


def test_workers_stepped_as_they_answer_run_the_episodes_of_lockstep(two_workers):
    seeds = [3, 4, 5, 6, 7]  # more seeds than workers, and one worker left without a seed
    lockstep, lockstep_chunks = evaluate(two_workers, seeds, proprio_actor, ready_envs=0)
    answered, answered_chunks = evaluate(two_workers, seeds, proprio_actor, ready_envs=1)
    assert not two_workers.busy.any()  # the caller may reset every worker
    reset_envs(two_workers, np.ones(2, bool), [100, 101])
    assert answered.success_by_seed == lockstep.success_by_seed
    assert answered.length_by_seed == lockstep.length_by_seed == dict.fromkeys(seeds, 20)
    assert answered.critical_steps_by_seed == lockstep.critical_steps_by_seed
    assert answered.env_steps == lockstep.env_steps == 100
    # every seed ran once, its chunks seen in order, to the bit what lockstep gave
    assert sorted(answered_chunks) == seeds
    for seed in seeds:
        assert [done for _, done in answered_chunks[seed]] == [False, True]
        np.testing.assert_array_equal(
            [head for head, _ in answered_chunks[seed]],
            [head for head, _ in lockstep_chunks[seed]],
        )
    assert not np.allclose(answered_chunks[3][1][0], answered_chunks[4][1][0])


def test_a_negative_ready_envs_is_refused_before_any_step(two_workers):
    with pytest.raises(ValueError, match="ready_envs must be >= 0"):
        evaluate(two_workers, SEEDS, ready_envs=-1)
