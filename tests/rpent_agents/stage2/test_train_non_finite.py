"""A Stage 2 run on real workers, one of whose simulators returns NaN states now and then.

The stack is the real one (`rpent-stage2`'s `train`, two peg workers, the learner-side
featurizer); only the second worker's peg env sits under `NaNStateAt` (tests/non_finite_states.py),
which stands for a simulator that blows up without checking itself. The run is as tiny as
test_train.py's: every chunk is critical, episodes last 2 chunks, learning starts at once.
"""

import dataclasses
import json

import numpy as np
import pytest
import torch
from gymnasium.vector import AsyncVectorEnv, AutoresetMode
from non_finite_states import NaNStatePegConfig
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from rpent_agents.features.checkpoint import load_featurizer
from rpent_agents.rollout.rlt_stack import PegRLTConfig
from rpent_agents.rollout.vector import FeaturizedVectorEnv
from rpent_agents.rollout.worker import RLTWorkerFactory
from rpent_agents.stage2 import Stage2Config
from rpent_agents.stage2 import trainer as stage2_trainer
from rpent_agents.stage2.train_args import Stage2TrainArgs

pytestmark = [pytest.mark.sim, pytest.mark.subprocess]

NAN_STEPS = (4, 31, 58, 95, 122)
"""Steps of the second worker (evaluations included) whose state is NaN: five chunks."""


def one_worker_returns_nan_states(args, env_config):
    """The training envs of `train`, the second worker's peg env under `NaNStateAt`."""
    broken = NaNStatePegConfig(**dataclasses.asdict(env_config), nan_steps=NAN_STEPS)
    workers = AsyncVectorEnv(
        [RLTWorkerFactory(env_config), RLTWorkerFactory(broken)],
        context="forkserver",
        autoreset_mode=AutoresetMode.DISABLED,
    )
    return FeaturizedVectorEnv(workers, load_featurizer(env_config.checkpoint_dir, "cpu"))


def scalars(tensorboard_dir):
    events = EventAccumulator(str(tensorboard_dir))
    events.Reload()
    return {tag: [event.value for event in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def test_training_finishes_with_finite_weights_when_a_worker_returns_nan_states(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(stage2_trainer, "make_training_envs", one_worker_returns_nan_states)
    env = PegRLTConfig(render_backend="cpu", trigger_mode="always_on", max_episode_chunks=2)
    stage2 = Stage2Config(
        hidden_dim=32, batch_size=8, learning_starts=2, warmup_updates=2,
        weight_warmup_updates=1, weight_ramp_updates=2, device="cpu",
        replay_capacity=1000, sample_window=1000,
    )  # fmt: skip
    args = Stage2TrainArgs(
        output_dir=tmp_path / "run", total_env_steps=160, num_envs=2, env=env,
        num_eval_episodes=2, eval_every_env_steps=100, save_every_env_steps=60,
        log_every_iterations=1, stage2=stage2,
    )  # fmt: skip
    results = stage2_trainer.train(args)

    assert results.stop_reason == "total_env_steps" and results.env_steps >= 160
    saved = json.loads((args.output_dir / "results.json").read_text())
    assert saved["transitions"] == results.transitions > 0
    weights = torch.load(args.output_dir / "run" / "weights.pt", weights_only=True)
    for part in ("actor", "critic"):
        assert all(torch.isfinite(tensor).all() for tensor in weights[part].values()), part
    logged = scalars(args.output_dir / "tensorboard")
    assert max(logged["train/replay/invalid_state_rate"]) > 0  # NaN states ended chunks
    assert logged["train/replay_buffer/refused_non_finite"][-1] == 0.0  # none got that far
    assert logged["train/rlt/skipped_critic_steps"][-1] == 0.0
    assert np.isfinite(logged["critic/critic_loss"]).all()
