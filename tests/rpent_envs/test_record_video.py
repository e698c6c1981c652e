"""Gymnasium's own `RecordVideo` on the peg env (needs moviepy: RPent's `video` extra)."""

import av
import gymnasium as gym
import pytest

import rpent_envs

pytestmark = [pytest.mark.sim, pytest.mark.subprocess]


def test_gymnasiums_record_video_writes_the_peg_envs_render(tmp_path):
    env = gym.make(
        rpent_envs.PEG_INSERTION_ID, obs_mode="state", render_mode="rgb_array",
        render_backend="cpu", max_episode_steps=3,
    )  # fmt: skip
    env = gym.wrappers.RecordVideo(env, str(tmp_path / "videos"), episode_trigger=lambda _: True)
    env.reset(seed=0)
    truncated = False
    while not truncated:
        _, _, _, truncated, _ = env.step(env.action_space.sample())
    env.close()
    (video,) = (tmp_path / "videos").glob("*.mp4")
    with av.open(str(video)) as container:
        frames = [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]
    assert len(frames) == 4  # the reset and three steps
    assert frames[0].shape == (512, 512, 3) and frames[-1].std() > 0
