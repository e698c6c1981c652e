"""`rpent-stage1 train --init-from`: fine-tuning starts from the checkpoint; misfits are refused."""

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from recorders.flywheel import export_flywheel
from recorders.trajectory import TaskMetadata, TrajectoryWriter
from rpent_agents.features.builtin import BuiltinVLA, BuiltinVLAConfig
from rpent_agents.features.checkpoint import load_checkpoint, save_checkpoint
from rpent_agents.features.norm import NormStats
from rpent_agents.features.rl_token import RLToken, RLTokenConfig
from rpent_agents.stage1.config import Stage1TrainArgs
from rpent_agents.stage1.fine_tune import check_data_fits
from rpent_agents.stage1.frame_cache import FrameCache, cache_from_lerobot, data_layout
from rpent_agents.stage1.losses import stage1_losses
from rpent_agents.stage1.trainer import Stage1Trainer

IMAGE_SIZE, STATE_DIM, ACTION_DIM, DIM = 32, 9, 8, 32
INSTRUCTION = "insert the peg in the hole"


def frame_cache(state_dim=STATE_DIM, episodes=3, steps=12, seed=0):
    rng = np.random.default_rng(seed)
    count = episodes * steps
    return FrameCache(
        image=rng.integers(0, 256, (count, IMAGE_SIZE, IMAGE_SIZE, 3), dtype=np.uint8),
        wrist_image=rng.integers(0, 256, (count, IMAGE_SIZE, IMAGE_SIZE, 3), dtype=np.uint8),
        state=rng.normal(size=(count, state_dim)).astype(np.float32),
        actions=rng.uniform(-1, 1, (count, ACTION_DIM)).astype(np.float32),
        episode_index=np.repeat(np.arange(episodes), steps),
        task_index=np.zeros(count, np.int64),
        tasks=[INSTRUCTION],
    )


@pytest.fixture(scope="module")
def source_checkpoint(tmp_path_factory):
    """A tiny checkpoint whose norm stats differ from the fine-tuning data's."""
    torch.manual_seed(0)
    config = BuiltinVLAConfig(
        image_size=IMAGE_SIZE, patch_size=16, dim=DIM, num_heads=2, num_layers=1,
        num_head_layers=1,
    )  # fmt: skip
    stats = NormStats.from_arrays(
        np.full((2, STATE_DIM), 0.5) + np.eye(2, STATE_DIM), np.eye(2, ACTION_DIM) * 0.3
    )
    vla = BuiltinVLA(config, stats)
    token = RLToken(RLTokenConfig(dim=DIM, num_heads=2, prefix_seq_len=64))
    folder = tmp_path_factory.mktemp("source") / "checkpoint"
    save_checkpoint(folder, vla, token, {"step": 1})
    return folder


@pytest.fixture(scope="module")
def cache_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "frames.npz"
    frame_cache().save(path)
    return path


def fine_tune_args(data, output_dir, checkpoint, **overrides):
    return Stage1TrainArgs(
        data=data, output_dir=output_dir, init_from=checkpoint, batch_size=4, val_episodes=1,
        device="cpu", **overrides,
    )  # fmt: skip


@pytest.mark.slow
def test_the_first_loss_is_the_source_checkpoints_loss_on_the_same_batch(
    source_checkpoint, cache_path, tmp_path
):
    trainer = Stage1Trainer(fine_tune_args(cache_path, tmp_path / "ft", source_checkpoint))
    source_vla, source_token, _ = load_checkpoint(source_checkpoint)
    for mine, theirs in ((trainer.vla, source_vla), (trainer.rl_token, source_token)):
        for name, value in theirs.state_dict().items():
            torch.testing.assert_close(mine.state_dict()[name], value, rtol=0, atol=0)
    assert trainer.vla.norm_stats == NormStats.load(source_checkpoint)

    torch.manual_seed(7)
    batch = trainer.sampler.random_batch(trainer.train_frames, 4, trainer.args.image_shift_px)
    source_loss = stage1_losses(source_vla.train(), source_token.train(), batch, 1.0)["loss"]
    torch.manual_seed(7)
    first_loss = trainer.train_step(step=1, time_fraction=0.0)["loss"]
    torch.testing.assert_close(first_loss, source_loss)
    assert first_loss.item() > 0


def test_recomputed_norm_stats_come_from_the_data_and_the_weights_stay(
    source_checkpoint, cache_path, tmp_path
):
    args = fine_tune_args(cache_path, tmp_path / "ft", source_checkpoint, recompute_norm_stats=True)
    trainer = Stage1Trainer(args)
    cache = FrameCache.load(cache_path)
    assert trainer.vla.norm_stats == NormStats.from_arrays(cache.state, cache.actions)
    source_vla, _, _ = load_checkpoint(source_checkpoint)
    torch.testing.assert_close(trainer.vla.state_dict(), source_vla.state_dict())


@pytest.mark.subprocess
def test_a_dataset_of_other_dims_is_refused_by_the_cli_before_training(source_checkpoint, tmp_path):
    wrong = tmp_path / "wrong.npz"
    frame_cache(state_dim=5).save(wrong)
    output_dir = tmp_path / "ft"
    result = subprocess.run(
        [sys.executable, "-m", "rpent_agents.stage1.train", "train", "--data", str(wrong),
         "--output-dir", str(output_dir), "--init-from", str(source_checkpoint),
         "--device", "cpu"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 1
    assert "does not fit --init-from" in result.stderr
    assert "state_dim 5 (checkpoint: 9)" in result.stderr and "action_dim" not in result.stderr
    assert not output_dir.exists()


def export_without_wrist_camera(root, key_style):
    """A flywheel export of one successful task whose frames have `image` and `state` only."""
    writer = TrajectoryWriter(root / "run")
    writer.start_task(TaskMetadata(env_id="RPentTest/OneCamera-v0", fps=10, instruction="go"))
    call_id = writer.tool_call("vla", {"instruction": INSTRUCTION})
    prediction_id = writer.vla_prediction(call_id, INSTRUCTION, "tiny-vla")
    writer.set_action_source("vla", call_id=call_id, prediction_id=prediction_id)
    rng = np.random.default_rng(0)
    for _ in range(3):
        observation = {
            "image": rng.integers(0, 256, (IMAGE_SIZE, IMAGE_SIZE, 3), dtype=np.uint8),
            "state": np.zeros(STATE_DIM, np.float32),
        }
        writer.record_action(np.zeros(ACTION_DIM, np.float32), observation, 0.0, False, False)
    writer.finish_task(True, "terminated")
    writer.close()
    export_flywheel(root / "run", root / "export", use_videos=False, key_style=key_style)
    return root / "export" / "train"


@pytest.mark.parametrize("key_style", ["rpent", "lerobot"])
def test_a_dataset_without_the_checkpoints_cameras_is_refused(
    source_checkpoint, tmp_path, key_style
):
    dataset_dir = export_without_wrist_camera(tmp_path, key_style)
    layout = data_layout(dataset_dir)
    assert (layout.state_dim, layout.action_dim, layout.image_keys) == (9, 8, ("image",))
    message = r"image keys \['image'\] lack \['wrist_image'\]"
    with pytest.raises(ValueError, match=message):
        check_data_fits(source_checkpoint, dataset_dir)
    with pytest.raises(KeyError, match=r"has no \['wrist_image'\]"):
        cache_from_lerobot(dataset_dir)


def test_recompute_norm_stats_without_init_from_is_refused(cache_path, tmp_path):
    args = Stage1TrainArgs(data=cache_path, output_dir=tmp_path / "x", recompute_norm_stats=True)
    with pytest.raises(ValueError, match="--recompute-norm-stats needs --init-from"):
        Stage1Trainer(args)


def test_the_checkpoint_records_where_it_was_initialised_from(
    source_checkpoint, cache_path, tmp_path
):
    args = fine_tune_args(cache_path, tmp_path / "ft", source_checkpoint, steps=1, log_every=1)
    Stage1Trainer(args).run()
    metadata = json.loads((tmp_path / "ft" / "config.json").read_text())["metadata"]
    assert metadata["init_from"] == str(source_checkpoint) and metadata["step"] == 1
