"""`rpent-run --video`: the README's first command at a small size, and the frames' markers."""

import json
import subprocess
import sys

import av
import gymnasium as gym
import numpy as np
import pytest

import rpent_envs
from recorders.trajectory import TrajectoryReader
from rpent_agents.run.cli import RunArgs, run_policy
from rpent_agents.run.video import BORDER_PX, DRIVER_COLOURS, OUTCOME_COLOURS, EpisodeVideo
from rpent_agents.stage2 import DEFAULT_ACTOR_DIR

pytestmark = pytest.mark.sim

PEG_KWARGS = json.dumps({"image_size": 32, "render_backend": "cpu"})
END_HOLD_FRAMES = 10  # one second at the peg env's 10 Hz


def decoded_frames(path):
    with av.open(str(path)) as container:
        return [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]


def border_colours(frames):
    """The colour of each frame's top-left border corner (H.264 moves it a few levels)."""
    return [frame[BORDER_PX // 2, BORDER_PX // 2].astype(int) for frame in frames]


def assert_colours(colours, expected):
    for colour in colours:
        assert np.abs(colour - np.asarray(expected)).max() < 40, (colour, expected)


@pytest.mark.subprocess
def test_the_readme_command_runs_the_default_actor_records_and_writes_a_video(tmp_path):
    video = tmp_path / "run" / "episodes.mp4"
    command = [
        sys.executable, "-m", "rpent_agents.run.cli", "--policy", "actor", "--seeds", "8",
        "--record-trajectory", "--output-dir", str(tmp_path / "run"), "--video", str(video),
        "--env-kwargs", PEG_KWARGS, "--device", "cpu", "--max-episode-steps", "20",
        "--no-actor-gate", "--trigger-mode", "always_on",
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "seed 8: failure after 20 steps; chunks by vla 0, actor 2, expert 0" in result.stderr
    summary = json.loads(result.stdout)
    assert summary["stage2_run"] == str(DEFAULT_ACTOR_DIR) and summary["video"] == str(video)
    (task_dir,) = (tmp_path / "run" / "trajectories").iterdir()
    assert len(list(TrajectoryReader(task_dir).read_records("actions.jsonl").records)) == 20

    frames = decoded_frames(video)
    assert len(frames) == 20 + END_HOLD_FRAMES  # one per step, then the held last frame
    assert frames[0].shape == (32 * 8 + 2 * BORDER_PX, 2 * 32 * 8 + 3 * BORDER_PX, 3)
    assert_colours(border_colours(frames[:20]), DRIVER_COLOURS["actor"])
    assert_colours(border_colours(frames[20:]), OUTCOME_COLOURS[False])
    assert video.stat().st_size < 1_000_000


def test_expert_chunks_get_their_own_marker(tmp_path):
    args = RunArgs(
        seeds=[0], env_kwargs=PEG_KWARGS, policy="expert", max_episode_steps=12,
        video=tmp_path / "expert.mp4",
    )  # fmt: skip
    (episode,) = run_policy(args).episodes
    assert episode.chunks == {"expert": 2} and episode.steps == 12
    assert episode.line() == "seed 0: failure after 12 steps; chunks by vla 0, actor 0, expert 2"
    frames = decoded_frames(tmp_path / "expert.mp4")
    assert len(frames) == 12 + END_HOLD_FRAMES
    assert_colours(border_colours(frames[:12]), DRIVER_COLOURS["expert"])


def test_an_env_without_both_cameras_is_refused(tmp_path):
    env = gym.make(rpent_envs.PEG_INSERTION_ID, obs_mode="state")
    with pytest.raises(ValueError, match="lacks \\['image', 'wrist_image'\\]"):
        EpisodeVideo(env, tmp_path / "v.mp4")
    env.close()
