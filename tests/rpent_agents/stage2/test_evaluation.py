"""Held-out evaluation on the training workers: a seed alone defines its episode.

Workers reset themselves with the seed sent with each chunk, and rebuild the scene for
evaluated episodes, so the same seeds give the same episodes on any number of workers, and
after training episodes that kept another seed's scene.
"""

import numpy as np

from rpent_agents.rollout.rlt_stack import PegRLTConfig
from rpent_agents.rollout.vector import make_rlt_vector_env, reset_envs
from rpent_agents.stage2.evaluation import evaluate_on_seeds

CONFIG = PegRLTConfig(
    render_backend="cpu", feature_device="cpu", max_episode_chunks=2, reconfiguration_freq=4
)
SEEDS = [3, 4, 5]


def head_traces(num_envs, train_first):
    """Per seed, the peg head (hole frame) at every chunk end of its evaluated episode."""
    traces: dict[int, list[np.ndarray]] = {}
    envs = make_rlt_vector_env(CONFIG, num_envs)
    try:
        if train_first:  # training episodes: their scenes would be kept by the next resets
            reset_envs(envs, np.ones(num_envs, bool), [100 + index for index in range(num_envs)])
        result = evaluate_on_seeds(
            envs,
            SEEDS,
            act=lambda obs: np.zeros((len(obs["z_rl"]), 80), np.float32),
            actor_ready=False,
            observer=lambda seed, info, done: traces.setdefault(seed, []).append(
                np.asarray(info["peg_head_pos_at_hole"])
            ),
        )
    finally:
        envs.close()
    return result, traces


def test_the_same_seeds_give_the_same_episodes_on_any_number_of_workers():
    one_result, one_env = head_traces(num_envs=1, train_first=False)
    two_result, two_envs = head_traces(num_envs=2, train_first=True)
    assert sorted(one_env) == sorted(two_envs) == SEEDS
    for seed in SEEDS:
        assert len(one_env[seed]) == len(two_envs[seed]) == 2  # the chunk limit
        np.testing.assert_allclose(one_env[seed], two_envs[seed], atol=1e-5)
    assert not np.allclose(one_env[3][0], one_env[4][0])  # seeds differ in geometry
    assert one_result.length_by_seed == two_result.length_by_seed == dict.fromkeys(SEEDS, 20)
    assert one_result.env_steps == two_result.env_steps == 60
