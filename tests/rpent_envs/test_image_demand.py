"""Rendering on demand: the peg env skips images only where no consumer reads them.

Two envs with the same seed and the same actions: one renders every step, the other runs the
same steps through the chunk executor (intermediate steps optional). The executor's final
observation must equal the always-rendering env's, and a recorder in the stack must store a
real image for every executed action.
"""

import gymnasium as gym
import numpy as np
import pytest

import rpent_envs
from recorders.trajectory import TrajectoryReader
from rpent_envs.image_demand import image_demand_of
from rpent_envs.maniskill.expert import PegInsertionExpert
from wrappers.chunking import execute_chunk, state_step_policy
from wrappers.record import RecordTrajectory

pytestmark = pytest.mark.sim

IMAGE_SIZE = 32


def peg_env(**kwargs):
    return gym.make(rpent_envs.PEG_INSERTION_ID, image_size=IMAGE_SIZE, **kwargs)


@pytest.fixture(scope="module")
def env_pair():
    rendering, skipping = peg_env(), peg_env()
    yield rendering, skipping
    rendering.close()
    skipping.close()


def expert_chunk(env, seed, steps):
    """The expert's first `steps` actions from `seed` (a fixed open-loop chunk)."""
    expert = PegInsertionExpert(env)
    env.reset(seed=seed)
    actions = []
    for _ in range(steps):
        actions.append(expert.act())
        env.step(actions[-1])
    return np.stack(actions)


def test_optional_steps_skip_both_cameras_and_say_so(env_pair):
    _, env = env_pair
    demand = image_demand_of(env)
    env.reset(seed=0)
    rendering_s = env.unwrapped.rendering_s
    with demand.optional():
        obs, _, _, _, info = env.step(np.zeros(8, np.float32))
    assert info["images_rendered"] is False and env.unwrapped.rendering_s == rendering_s
    assert not obs["image"].any() and not obs["wrist_image"].any()
    assert obs in env.observation_space
    obs, _, _, _, info = env.step(np.zeros(8, np.float32))
    assert info["images_rendered"] is True and obs["image"].any()
    assert env.unwrapped.rendering_s > rendering_s  # the clock counts the rendered step


def test_the_chunk_executor_renders_only_its_last_step_and_matches_rendering(env_pair):
    rendering, skipping = env_pair
    chunk = expert_chunk(rendering, seed=1, steps=10)
    obs, _ = rendering.reset(seed=1)
    for action in chunk:
        expected, *_ = rendering.step(action)
    obs, _ = skipping.reset(seed=1)
    result = execute_chunk(skipping, obs, chunk, horizon=10)
    rendered = [info["images_rendered"] for info in result.step_infos]
    assert rendered == [False] * 9 + [True]
    for key in ("image", "wrist_image", "state"):
        np.testing.assert_array_equal(result.observation[key], expected[key])


def test_an_episode_ending_on_a_skipped_step_still_returns_its_images():
    rendering = peg_env(max_episode_steps=4)
    skipping = peg_env(max_episode_steps=4)
    try:
        chunk = np.tile(np.array([0.3, 0, 0, 0, 0, 0, 0, 1], np.float32), (10, 1))
        rendering.reset(seed=2)
        for action in chunk[:4]:
            expected, _, _, truncated, _ = rendering.step(action)
        assert truncated
        obs, _ = skipping.reset(seed=2)
        result = execute_chunk(skipping, obs, chunk, horizon=10)
        assert result.truncated and len(result.rewards) == 4
        assert result.step_infos[-1]["images_rendered"] is False
        np.testing.assert_array_equal(result.observation["image"], expected["image"])
        np.testing.assert_array_equal(result.observation["wrist_image"], expected["wrist_image"])
    finally:
        rendering.close()
        skipping.close()


def test_a_state_reading_step_policy_skips_a_camera_reading_one_renders(env_pair):
    _, env = env_pair
    expert = PegInsertionExpert(env)
    obs, _ = env.reset(seed=3)
    result = execute_chunk(env, obs, state_step_policy(expert.act), horizon=3)
    assert [info["images_rendered"] for info in result.step_infos] == [False, False, True]
    seen = []

    def camera_policy(observation):
        seen.append(int(observation["image"].max()))
        return expert.act()

    execute_chunk(env, result.observation, camera_policy, horizon=3)
    assert all(value > 0 for value in seen)  # every observation it read was rendered


def test_a_recorder_holds_the_demand_and_records_every_image(tmp_path):
    env = RecordTrajectory(peg_env(), output_dir=tmp_path, robot="panda")
    demand = image_demand_of(env)
    obs, _ = env.reset(seed=4)
    assert demand.held
    task_dir = env.task_dir
    result = execute_chunk(env, obs, np.zeros((6, 8), np.float32), horizon=6)
    assert all(info["images_rendered"] for info in result.step_infos)
    env.close()
    assert not demand.held
    reader = TrajectoryReader(task_dir)
    records = [record for _, record in reader.read_records("actions.jsonl").records]
    assert len(records) == 6
    for record in records:
        for key in ("image", "wrist_image"):
            image = reader.load_image(record["observation"][key])
            assert image.shape == (IMAGE_SIZE, IMAGE_SIZE, 3) and image.any()
