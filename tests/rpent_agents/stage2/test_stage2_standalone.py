"""Stage 2 runs without the simulators, and its config is a tyro command line."""

import subprocess
import sys

import pytest
import tyro

from rpent_agents.stage2 import Stage2Config

WITHOUT_SIMULATORS = """
import sys
for name in ("gymnasium", "lerobot", "mani_skill", "sapien", "stable_baselines3", "rpent_envs",
             "wrappers", "recorders"):
    sys.modules[name] = None  # any import of these now fails
import numpy as np
from rpent_agents.stage2 import RLTDims, RLTTransition, Stage2Config, Stage2Learner
learner = Stage2Learner(
    Stage2Config(chunk_len=2, hidden_dim=8, batch_size=4, learning_starts=1, warmup_updates=3),
    RLTDims(3, 2, 2, 2),
)
zeros = np.zeros
learner.add_transitions([RLTTransition(zeros(3), zeros(2), zeros((2, 2)), zeros((2, 2)),
    zeros(2), zeros(3), zeros(2), zeros((2, 2)), False, zeros(2, bool))])
print(learner.train_step()["train/rlt/critic_updates_run"])
"""


@pytest.mark.subprocess
def test_stage2_trains_where_only_torch_and_numpy_are_installed():
    result = subprocess.run(
        [sys.executable, "-c", WITHOUT_SIMULATORS], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "3.0"


def test_config_command_line_sets_fields_and_documents_them(capsys):
    config = tyro.cli(
        Stage2Config, args=["--gamma", "0.9", "--bootstrap-type", "always", "--no-weight-schedule"]
    )
    assert (config.gamma, config.bootstrap_type, config.weight_schedule) == (0.9, "always", False)
    with pytest.raises(SystemExit):
        tyro.cli(Stage2Config, args=["--help"])
    help_text = capsys.readouterr().out
    assert "Critic updates per actor update" in help_text
    assert "Stored transitions before any update" in help_text


def test_presets_hold_the_reference_values():
    sim, real = Stage2Config.sim(), Stage2Config.real_robot()
    assert (sim.actor_lr, sim.batch_size, sim.gamma, sim.tau, sim.critic_actor_ratio) == (
        1e-4, 512, 0.99, 0.005, 4
    )  # fmt: skip
    assert (real.actor_lr, real.critic_lr, real.batch_size, real.gamma) == (3e-4, 3e-4, 256, 0.96)
    assert (real.bc_weight, real.q_weight, real.weight_schedule) == (5.0, 0.1, False)
    assert Stage2Config.real_robot(batch_size=64).batch_size == 64


def test_config_json_round_trips_and_rejects_unknown_fields(tmp_path):
    Stage2Config.real_robot().to_json(tmp_path / "config.json")
    assert Stage2Config.from_json(tmp_path / "config.json") == Stage2Config.real_robot()
    (tmp_path / "bad.json").write_text('{"gamma": 0.9, "gama": 0.8}')
    with pytest.raises(ValueError, match=r"unknown Stage2Config fields \['gama'\]"):
        Stage2Config.from_json(tmp_path / "bad.json")
    with pytest.raises(ValueError, match="bootstrap_type"):
        Stage2Config(bootstrap_type="never")
