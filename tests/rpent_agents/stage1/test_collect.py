"""`rpent-collect`: expert episodes of the real peg env into a LeRobot dataset that reloads."""

import json
import subprocess
import sys

import numpy as np
import pytest
from lerobot.datasets.lerobot_dataset import LeRobotDataset

from rpent_agents.stage1.collect import CACHE_FILE, COLLECT_MANIFEST, CollectArgs, collect_peg_demos
from rpent_agents.stage1.frame_cache import FrameCache

pytestmark = pytest.mark.sim


@pytest.fixture(scope="module")
def collected(tmp_path_factory):
    output_dir = tmp_path_factory.mktemp("collect") / "peg_demos"
    report = collect_peg_demos(
        CollectArgs(output_dir=output_dir, num_episodes=2, seed=10, image_size=32)
    )
    return output_dir, report


@pytest.mark.subprocess
def test_dataset_reloads_with_expected_features(collected):
    output_dir, report = collected
    dataset = LeRobotDataset("local/peg_demos", root=output_dir)
    assert dataset.meta.info.codebase_version == "v3.0"
    assert dataset.fps == 10 and dataset.num_episodes == 2
    assert len(dataset) == report.frames
    frame = dataset[0]
    assert frame["image"].shape == (3, 32, 32) and frame["wrist_image"].shape == (3, 32, 32)
    assert frame["state"].shape == (9,) and frame["actions"].shape == (8,)
    assert frame["task"] == "insert the peg in the hole"
    assert dataset.meta.robot_type == "panda"
    last = dataset[len(dataset) - 1]
    assert last["episode_index"] == 1
    np.testing.assert_allclose(frame["state"][7:].numpy(), 0.04, atol=1e-5)


@pytest.mark.subprocess
def test_manifest_lists_the_seeds_to_replay(collected):
    output_dir, report = collected
    manifest = json.loads((output_dir / COLLECT_MANIFEST).read_text())
    assert manifest["seeds_kept"] == report.seeds_kept == [10, 11]
    assert manifest["env_id"] == "RPent/PegInsertionSideWideClearance-v1"
    assert manifest["env_kwargs"] == {"obs_mode": "rgb", "image_size": 32}
    assert not (output_dir / "images").exists()
    assert not list(output_dir.parent.glob(".peg_demos.partial-*"))


@pytest.mark.subprocess
def test_cli_refuses_an_existing_output_dir(collected):
    output_dir, _ = collected
    before = sorted(p.name for p in output_dir.rglob("*"))
    result = subprocess.run(
        [sys.executable, "-m", "rpent_agents.stage1.collect", "--output-dir", str(output_dir)],
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0
    assert "already exists" in result.stderr and str(output_dir) in result.stderr
    assert sorted(p.name for p in output_dir.rglob("*")) == before


@pytest.mark.subprocess
def test_npz_cache_from_worker_processes(tmp_path):
    output_dir = tmp_path / "peg_cache"
    report = collect_peg_demos(
        CollectArgs(
            output_dir=output_dir,
            num_episodes=2,
            seed=20,
            image_size=32,
            npz_cache=True,
            num_workers=2,
        )
    )
    cache = FrameCache.load(output_dir / CACHE_FILE)
    assert len(cache) == report.frames and report.seeds_kept == [20, 21]
    assert cache.image.shape[1:] == (32, 32, 3) and cache.image.dtype == np.uint8
    assert cache.actions.shape[1] == 8 and cache.state.shape[1] == 9
    assert cache.tasks == ["insert the peg in the hole"]
    assert sorted(set(cache.episode_index.tolist())) == [0, 1]
    assert json.loads((output_dir / COLLECT_MANIFEST).read_text())["seeds_kept"] == [20, 21]


@pytest.fixture(scope="module")
def noisy_subsampled(tmp_path_factory):
    output_dir = tmp_path_factory.mktemp("collect") / "noisy"
    args = CollectArgs(
        output_dir=output_dir, num_episodes=2, seed=30, image_size=32, npz_cache=True,
        action_noise_std=0.2, image_every=3,
    )  # fmt: skip
    return collect_peg_demos(args), FrameCache.load(output_dir / CACHE_FILE)


def test_image_every_keeps_every_third_frame_and_every_step(noisy_subsampled):
    report, cache = noisy_subsampled
    assert len(cache) == report.frames  # every step's state and action
    starts = [np.flatnonzero(cache.episode_index == e)[0] for e in (0, 1)]
    step_in_episode = np.arange(len(cache)) - np.take(starts, cache.episode_index)
    np.testing.assert_array_equal(cache.image_step, np.flatnonzero(step_in_episode % 3 == 0))
    assert cache.image.shape == (len(cache.image_step), 32, 32, 3) and cache.image.any()


def test_noise_changes_the_executed_path_not_the_labels(noisy_subsampled):
    import gymnasium as gym

    import rpent_envs

    _, cache = noisy_subsampled
    env = gym.make(rpent_envs.PEG_INSERTION_ID, obs_mode="state")
    try:
        first = np.flatnonzero(cache.episode_index == 0)
        env.reset(seed=30)
        states = []
        for action in cache.actions[first]:  # the clean labels, replayed without the noise
            observation, *_ = env.step(action)
            states.append(observation["state"])
    finally:
        env.close()
    recorded = cache.state[first[1:]]
    assert np.abs(np.stack(states[:-1]) - recorded).max() > 1e-3  # the noise moved the arm


def test_bad_collect_options_are_refused(tmp_path):
    for options, message in (
        ({"image_every": 2}, "needs --npz-cache"),
        ({"image_every": 0, "npz_cache": True}, "image_every=0"),
        ({"action_noise_std": -0.1}, "action_noise_std=-0.1"),
    ):
        with pytest.raises(ValueError, match=message):
            collect_peg_demos(CollectArgs(output_dir=tmp_path / "x", **options))
        assert not (tmp_path / "x").exists()
