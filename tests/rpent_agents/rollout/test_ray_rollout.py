"""Stage 2 rollouts on a real local Ray (2 CPUs): parity with AsyncVectorEnv, killed workers.

The workers are real peg RLT workers (CPU rendering): 2 actors of 1 env, shared by the tests
(building them takes long on a busy machine). A worker is killed with os.kill on its actor's
pid, while it steps and while it idles; the vector env restarts it, discards its unfinished
episodes, and the training loop goes on with consistent counters. The CLI runs on 1 actor of
2 envs in tests/rpent_agents/stage2/test_train.py.
"""

import dataclasses
import os
import signal
import time

import numpy as np
import pytest

pytestmark = [pytest.mark.sim, pytest.mark.subprocess]

ray = pytest.importorskip("ray")

from gymnasium.vector import AsyncVectorEnv, AutoresetMode  # noqa: E402

from rpent_agents.features.checkpoint import load_featurizer  # noqa: E402
from rpent_agents.rollout import ray_vector_env  # noqa: E402
from rpent_agents.rollout.ray_config import RayRolloutConfig  # noqa: E402
from rpent_agents.rollout.ray_vector_env import RayVectorEnv  # noqa: E402
from rpent_agents.rollout.rlt_stack import PegRLTConfig  # noqa: E402
from rpent_agents.rollout.vector import FeaturizedVectorEnv  # noqa: E402
from rpent_agents.rollout.worker import NO_RESET_SEED, RLTWorkerFactory  # noqa: E402
from rpent_agents.stage2 import RLTDims, ScalarLog, Stage2Config, Stage2Learner  # noqa: E402
from rpent_agents.stage2.results import LearningResults  # noqa: E402
from rpent_agents.stage2.run_folder import RunState  # noqa: E402
from rpent_agents.stage2.train_args import Stage2TrainArgs  # noqa: E402
from rpent_agents.stage2.trainer import Stage2Run  # noqa: E402

# Every chunk is the agent's and is stored; episodes end after 2 chunks.
CONFIG = PegRLTConfig(
    render_backend="cpu", feature_device="cpu", trigger_mode="always_on", max_episode_chunks=2
)
TINY_STAGE2 = Stage2Config(
    hidden_dim=32, batch_size=8, learning_starts=2, warmup_updates=2, weight_warmup_updates=1,
    weight_ramp_updates=2, device="cpu", replay_capacity=1000, sample_window=1000,
)  # fmt: skip


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False)
    yield
    ray.shutdown()


def dict_actions(envs, reset_seeds, ref_value=0.05):
    """Batched Dict actions: zero actor chunks, a constant reference, the reset seeds."""
    space = envs.single_action_space
    return {
        "actor": np.zeros((envs.num_envs, *space["actor"].shape), np.float32),
        "ref_chunk": np.full((envs.num_envs, *space["ref_chunk"].shape), ref_value, np.float32),
        "reset_seed": np.asarray(reset_seeds, np.int64),
    }


WORKER_CLOCKS = ("worker_chunk_s", "worker_render_s", "worker_reset_s")
"""Info keys that time the worker itself: equal in keys, masks and dtypes, not in value."""


def assert_same(ray_value, async_value, path="infos"):
    """Batched infos (or observations) equal in keys, masks, shapes, dtypes and values."""
    if isinstance(async_value, dict):
        assert isinstance(ray_value, dict) and set(ray_value) == set(async_value), path
        for key in async_value:
            if key in WORKER_CLOCKS:
                assert np.asarray(ray_value[key]).dtype == np.asarray(async_value[key]).dtype
                continue
            assert_same(ray_value[key], async_value[key], f"{path}.{key}")
    elif isinstance(async_value, np.ndarray) and async_value.dtype == object:
        assert ray_value.dtype == object and ray_value.shape == async_value.shape, path
        for index, item in enumerate(async_value):
            assert_same(ray_value[index], item, f"{path}[{index}]")
    else:
        ray_array, async_array = np.asarray(ray_value), np.asarray(async_value)
        assert ray_array.dtype == async_array.dtype, path
        np.testing.assert_array_equal(ray_array, async_array, err_msg=path)


def drive(envs):
    """The same calls on either vector env: resets (whole and masked), self-resets, attrs."""
    results = [envs.reset(seed=[3, 4])]
    envs.set_attr("actor_ready", [False, True])
    results.append(envs.step(dict_actions(envs, [8, 9])))
    results.append(envs.step(dict_actions(envs, [10, NO_RESET_SEED])))  # ends both episodes
    results.append(envs.reset(seed=[None, 11], options={"reset_mask": np.array([False, True])}))
    results.append(envs.step(dict_actions(envs, [12, 13], ref_value=-0.05)))
    return results, envs.get_attr("actor_ready"), envs.call("expert_takeover_enabled")


@pytest.fixture(scope="module")
def workers(local_ray):
    envs = RayVectorEnv(
        RLTWorkerFactory(CONFIG),
        num_workers=2,
        envs_per_worker=1,
        actor_options={"max_restarts": 4},
    )
    yield envs
    envs.close()


def test_ray_workers_step_like_async_vector_env(workers):
    async_envs = AsyncVectorEnv(
        [RLTWorkerFactory(CONFIG)] * 2, context="forkserver", autoreset_mode=AutoresetMode.DISABLED
    )
    try:
        assert workers.single_observation_space == async_envs.single_observation_space
        assert workers.single_action_space == async_envs.single_action_space
        expected = drive(async_envs)
    finally:
        async_envs.close()
    assert workers.metadata["autoreset_mode"] == AutoresetMode.DISABLED
    assert workers.worker_info()[0]["code"] == ray_vector_env.__file__  # this tree's code
    ray_results = drive(workers)
    assert ray_results[1:] == expected[1:] == ((False, True), (False, False))
    for call, (ray_result, async_result) in enumerate(
        zip(ray_results[0], expected[0], strict=True)
    ):
        for item, (ray_item, async_item) in enumerate(zip(ray_result, async_result, strict=True)):
            assert_same(ray_item, async_item, f"call {call}, item {item}")
    _, _, terminated, truncated, infos = ray_results[0][2]
    assert truncated.all() and not terminated.any()
    assert infos["_final_obs"].tolist() == [True, False]  # env 1 was sent no seed
    assert "episode_discarded" not in infos


def test_killed_workers_come_back_with_their_attributes_and_restarted_episodes(workers):
    envs, restarts = workers, workers.restarts
    first_obs, _ = envs.reset(seed=[3, 4])
    envs.set_attr("actor_ready", False)
    pids = [info["pid"] for info in envs.worker_info()]
    envs.step_async(dict_actions(envs, [8, 9]))
    os.kill(pids[0], signal.SIGKILL)  # while it simulates the chunk
    obs, rewards, terminated, truncated, infos = envs.step_wait()
    assert infos["_episode_discarded"].tolist() == [True, False]
    assert rewards[0] == 0 and not terminated[0] and not truncated[0]
    assert infos["chunk_len"].tolist() == [0, 10]
    # env 0 started its episode again from seed 3; env 1 went on
    np.testing.assert_array_equal(obs["state"][0], first_obs["state"][0])
    assert np.abs(obs["state"][1] - first_obs["state"][1]).max() > 1e-4
    assert envs.get_attr("actor_ready") == (False, False) and envs.restarts == restarts + 1

    os.kill(envs.worker_info()[1]["pid"], signal.SIGKILL)  # while it idles
    assert envs.get_attr("actor_ready") == (False, False)  # finds it gone, restores it
    obs, _, _, _, infos = envs.step(dict_actions(envs, [8, 9]))
    assert infos["_episode_discarded"].tolist() == [False, True]
    np.testing.assert_array_equal(obs["state"][1], first_obs["state"][1])
    assert infos["chunk_len"].tolist() == [10, 0] and envs.restarts == restarts + 2

    _, _, _, _, infos = envs.step(dict_actions(envs, [8, 9]))
    assert "_episode_discarded" not in infos and infos["chunk_len"].tolist() == [10, 10]
    assert not {info["pid"] for info in envs.worker_info()} & set(pids)


def test_training_goes_on_past_a_killed_worker_with_consistent_counters(workers, tmp_path):
    envs = FeaturizedVectorEnv(workers, load_featurizer(CONFIG.checkpoint_dir, "cpu"))
    args = Stage2TrainArgs(
        rollout="ray", ray=RayRolloutConfig(num_workers=2), env=CONFIG, stage2=TINY_STAGE2,
        output_dir=tmp_path, log_every_iterations=1000,
    )  # fmt: skip
    dims = RLTDims.from_observation_space(envs.single_observation_space)
    learner, restarts, iterations = Stage2Learner(TINY_STAGE2, dims), workers.restarts, 7
    with ScalarLog(tmp_path / "tensorboard") as log:
        results = LearningResults(eval_seeds=[0])
        run = Stage2Run(args, envs, learner, RunState(), results, log, time.monotonic())
        run.obs = run.start_training_episodes()
        for iteration in range(iterations):
            if iteration == 4:  # the next chunk of both envs is the second of their third episode
                run.finish_busy_chunks()  # nothing in flight: the kill loses the next chunk
                os.kill(workers.worker_info()[0]["pid"], signal.SIGKILL)
            run.collect_and_learn()
    state = run.state
    # 8 vector steps (the drain's too), 2 chunks each, one chunk lost; the loop sent no chunk
    # after the second step, where the learner let the actor drive, nor during the drain
    assert run.actor_ready and run.profile.vector_steps == iterations + 1
    assert state.episodes_discarded == 1 and workers.restarts == restarts + 1
    assert state.env_steps == 10 * (2 * (iterations + 1) - 1)  # the lost chunk ran no step we saw
    assert learner.replay.total_added == state.env_steps // 10  # always_on: every chunk stored
    assert state.seeds_handed_out == 2 * (1 + 9)  # the reset, then 9 sends of 2 chunks
    finished = run.episode_stats.finished
    assert len(finished) == state.episodes_finished == 7  # env 0: 3 (one lost), env 1: 4
    assert {episode.length_steps for episode in finished} == {20}  # none merged with a lost one
    assert learner.update_step > 0


def test_the_rollout_flags_are_checked():
    with pytest.raises(ValueError, match="--num-workers must be >= 1"):
        RayRolloutConfig(num_workers=0)
    with pytest.raises(ValueError, match="--gpus-per-worker > 0"):
        RayRolloutConfig().render_backend("gpu")
    assert RayRolloutConfig().render_backend("auto") == "cpu"
    assert RayRolloutConfig(gpus_per_worker=0.25).render_backend("auto") == "gpu"
    options = dataclasses.asdict(RayRolloutConfig(cpus_per_worker=2, max_worker_restarts=3))
    assert options["cpus_per_worker"] == 2
    assert RayRolloutConfig(max_worker_restarts=3).actor_options()["max_restarts"] == 3
