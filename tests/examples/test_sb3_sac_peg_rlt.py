"""examples/sb3_sac_peg_rlt.py: Stable-Baselines3 SAC on gym.make("RPent/PegInsertion-RLT-v0").

The drop-in env runs with `trigger_mode=always_on` (every chunk is SAC's, so the test does not
wait for the reference to carry the peg to the hole); episodes are cut at 4 agent steps so that
SAC finishes several of them.
"""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from stable_baselines3 import SAC
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

pytestmark = [pytest.mark.sim, pytest.mark.subprocess]

EXAMPLE = Path(__file__).parents[2] / "examples" / "sb3_sac_peg_rlt.py"


def test_sac_learns_on_the_registered_env_and_saves_a_usable_model(tmp_path):
    command = [
        sys.executable, str(EXAMPLE), "--output-dir", str(tmp_path), "--total-timesteps", "24",
        "--learning-starts", "8", "--batch-size", "8", "--buffer-size", "100",
        "--hidden-dim", "32", "--env.trigger-mode", "always_on", "--env.max-episode-chunks", "4",
        "--env.render-backend", "cpu", "--device", "cpu",
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-4000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["env_id"] == "RPent/PegInsertion-RLT-v0"
    assert summary["agent_steps"] == 24 and summary["episodes"] == 6
    assert summary["success_rate_last_100"] == 0.0  # 40 random env steps never insert the peg

    model = SAC.load(tmp_path / "sac_peg_rlt.zip", device="cpu")
    assert model.num_timesteps == 24
    assert model.observation_space.spaces.keys() == {"z_rl", "proprio", "ref_chunk"}
    observation = model.observation_space.sample()
    action, _ = model.predict(observation, deterministic=True)
    assert action.shape == (80,) and np.all(np.abs(action) <= 1.0)

    (event_dir,) = (tmp_path / "tensorboard").iterdir()
    (event_file,) = event_dir.iterdir()
    events = EventAccumulator(str(event_file))
    events.Reload()
    scalars = set(events.Tags()["scalars"])
    assert {"train/critic_loss", "train/actor_loss", "rollout/success_rate"} <= scalars
