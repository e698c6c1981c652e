"""Stage 1 on a real rpent-collect dataset: frame cache, training CLI, TensorBoard, resume."""

import json
import math
import shutil
import subprocess
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from lerobot.datasets.lerobot_dataset import LeRobotDataset
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from recorders.lerobot_io import rpent_key
from rpent_agents.features.checkpoint import load_checkpoint, load_featurizer
from rpent_agents.stage1.collect import CollectArgs, collect_peg_demos
from rpent_agents.stage1.config import Stage1TrainArgs
from rpent_agents.stage1.frame_cache import FrameCache, cache_from_lerobot
from rpent_agents.stage1.losses import stage1_losses
from rpent_agents.stage1.sampler import random_shift
from rpent_agents.stage1.trainer import build_models, train

TINY_MODEL = [
    "--vla.dim", "32", "--vla.image-size", "32", "--vla.patch-size", "16", "--vla.num-layers", "1",
    "--vla.num-head-layers", "1", "--rl-token.prefix-seq-len", "64",
]  # fmt: skip


def stage1_cli(*arguments):
    return subprocess.run(
        [sys.executable, "-m", "rpent_agents.stage1.train", *arguments],
        capture_output=True,
        text=True,
    )


@pytest.fixture(scope="module")
def dataset_dir(tmp_path_factory):
    output_dir = tmp_path_factory.mktemp("stage1") / "demos"
    args = CollectArgs(output_dir, num_episodes=2, seed=20, image_size=32, use_videos=False)
    collect_peg_demos(args)
    return output_dir


@pytest.fixture(scope="module")
def cache_path(dataset_dir):
    path = dataset_dir.parent / "demos.npz"
    result = stage1_cli("export-cache", "--dataset", str(dataset_dir), "--output", str(path))
    assert result.returncode == 0, result.stderr
    return path


@pytest.fixture(scope="module")
def trained(cache_path):
    output_dir = cache_path.parent / "checkpoint"
    result = stage1_cli(
        "train", "--data", str(cache_path), "--output-dir", str(output_dir), "--steps", "4",
        "--batch-size", "4", "--log-every", "2", "--save-every", "2", "--val-episodes", "1",
        "--device", "cpu", *TINY_MODEL,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return output_dir


@pytest.mark.sim
@pytest.mark.subprocess
def test_cache_holds_every_frame_of_the_dataset(dataset_dir, cache_path):
    dataset = LeRobotDataset("local/demos", root=dataset_dir)
    cache = FrameCache.load(cache_path)
    assert len(cache) == len(dataset) and cache.tasks == ["insert the peg in the hole"]
    assert cache.image.shape == (len(dataset), 32, 32, 3) and cache.image.dtype == np.uint8
    assert cache.state.shape == (len(dataset), 9) and cache.actions.shape == (len(dataset), 8)
    assert sorted(set(cache.episode_index.tolist())) == [0, 1]
    last = len(dataset) - 1
    np.testing.assert_allclose(cache.actions[last], dataset[last]["actions"].numpy())
    decoded = (dataset[last]["wrist_image"].permute(1, 2, 0).numpy() * 255).round()
    np.testing.assert_array_equal(cache.wrist_image[last], decoded.astype(np.uint8))


def test_chunk_targets_stop_at_episode_ends():
    cache = FrameCache(
        image=np.zeros((5, 8, 8, 3), np.uint8),
        wrist_image=np.zeros((5, 8, 8, 3), np.uint8),
        state=np.zeros((5, 9), np.float32),
        actions=np.arange(40, dtype=np.float32).reshape(5, 8),
        episode_index=np.array([0, 0, 0, 1, 1]),
        task_index=np.zeros(5, np.int64),
        tasks=["t"],
    )
    index, valid = cache.chunk_targets(3)
    assert index.tolist() == [[0, 1, 2], [1, 2, 2], [2, 2, 2], [3, 4, 4], [4, 4, 4]]
    assert valid.tolist() == [[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 0], [1, 0, 0]]


@pytest.mark.sim
@pytest.mark.subprocess
def test_training_writes_a_loadable_checkpoint_and_tensorboard(trained, cache_path):
    names = {path.name for path in trained.iterdir()}
    assert {"model.safetensors", "config.json", "norm_stats.json", "training_state.pt"} <= names
    config = json.loads((trained / "config.json").read_text())
    assert config["metadata"]["step"] == 4 and config["rl_token"]["dim"] == 32
    events = EventAccumulator(str(trained / "tensorboard"))
    events.Reload()
    for tag in ("train/loss", "train/rlt_loss", "train/vla_loss", "val/chunk_mse"):
        assert [event.step for event in events.Scalars(tag)] == [2, 4]
    cache = FrameCache.load(cache_path)
    obs = {key: getattr(cache, key)[0] for key in ("image", "wrist_image", "state")}
    features = load_featurizer(trained).rlt_features([obs], cache.tasks)
    assert features.z_rl.shape == (1, 32) and features.ref_chunk.shape == (1, 10, 8)
    vla, _, _ = load_checkpoint(trained)
    np.testing.assert_allclose(vla.norm_stats.action_mean, cache.actions.mean(0), rtol=1e-5)


@pytest.mark.sim
@pytest.mark.subprocess
def test_resume_continues_and_an_existing_folder_is_refused(trained, cache_path):
    common = ["train", "--data", str(cache_path), "--output-dir", str(trained), *TINY_MODEL]
    refused = stage1_cli(*common, "--steps", "6", "--device", "cpu")
    assert (
        refused.returncode != 0 and "--resume" in refused.stderr and str(trained) in refused.stderr
    )
    resumed = stage1_cli(
        *common, "--steps", "6", "--batch-size", "4", "--save-every", "2", "--val-episodes", "1",
        "--device", "cpu", "--resume",
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads((trained / "config.json").read_text())["metadata"]["step"] == 6
    events = EventAccumulator(str(trained / "tensorboard"))
    events.Reload()
    assert [event.step for event in events.Scalars("train/rlt_loss")][-1] == 6


@pytest.mark.sim
@pytest.mark.subprocess
def test_a_non_finite_frame_in_a_cache_is_refused_by_name(cache_path, tmp_path):
    cache = FrameCache.load(cache_path)
    second_episode = int(np.flatnonzero(cache.episode_index == 1)[0])
    cache.actions[second_episode + 3, 2] = np.inf
    broken = tmp_path / "broken.npz"
    cache.save(broken)
    refused = rf"broken.npz: episode 1, frame 3 \(step {second_episode + 3} of the dataset\)"
    with pytest.raises(ValueError, match=rf"{refused}: actions\[2\] is inf"):
        FrameCache.load(broken)
    result = stage1_cli("train", "--data", str(broken), "--output-dir", str(tmp_path / "out"))
    assert result.returncode != 0 and "episode 1, frame 3" in result.stderr
    assert not (tmp_path / "out" / "model.safetensors").exists()


@pytest.mark.sim
def test_a_non_finite_frame_in_a_lerobot_dataset_is_refused_by_name(dataset_dir, tmp_path):
    damaged = tmp_path / "demos"
    shutil.copytree(dataset_dir, damaged)
    (table_path,) = (damaged / "data").rglob("*.parquet")
    table = pq.read_table(table_path)
    (state_key,) = [key for key in table.column_names if rpent_key(key) == "state"]
    states = np.array(table[state_key].to_pylist(), np.float32)
    states[5, 1] = np.nan  # the sixth frame of episode 0
    column = table.column_names.index(state_key)
    table = table.set_column(column, state_key, [states.tolist()]).cast(table.schema)
    pq.write_table(table, table_path)
    with pytest.raises(ValueError, match=r"demos: episode 0, frame 5 .*: state\[1\] is nan"):
        cache_from_lerobot(damaged)


@pytest.mark.sim
def test_training_reads_a_lerobot_folder_directly(dataset_dir, tmp_path):
    args = Stage1TrainArgs(
        data=dataset_dir, output_dir=tmp_path / "from_dataset", steps=1, batch_size=2
    )
    args.vla.dim, args.vla.image_size, args.vla.patch_size, args.vla.num_layers = 32, 32, 16, 1
    args.rl_token.prefix_seq_len, args.device, args.val_episodes = 64, "cpu", 1
    assert (train(args) / "model.safetensors").is_file()


@pytest.mark.sim
@pytest.mark.subprocess
def test_rlt_loss_trains_only_the_rl_token(cache_path, tmp_path):
    args = Stage1TrainArgs(data=cache_path, output_dir=tmp_path / "unused")
    args.vla.dim, args.vla.image_size, args.vla.patch_size, args.vla.num_layers = 32, 32, 16, 1
    cache = FrameCache.load(cache_path)
    vla, rl_token = build_models(args, cache)
    from rpent_agents.stage1.sampler import DemoSampler

    batch = DemoSampler(cache, vla, "cpu").random_batch(torch.arange(len(cache)), 2, 0)
    losses = stage1_losses(vla, rl_token, batch, rlt_alpha=1.0)
    vla_grads = torch.autograd.grad(
        losses["rlt_loss"], list(vla.parameters()), allow_unused=True, retain_graph=True
    )
    assert all(grad is None for grad in vla_grads)
    assert any(grad is not None for grad in torch.autograd.grad(
        losses["vla_loss"], list(vla.parameters()), allow_unused=True
    ))  # fmt: skip


def test_random_shift_moves_images_within_bounds():
    images = torch.arange(2 * 8 * 8 * 3, dtype=torch.float32).reshape(2, 8, 8, 3).to(torch.uint8)
    assert torch.equal(random_shift(images, 0), images)
    torch.manual_seed(0)
    shifted = random_shift(images, 2)
    assert shifted.shape == images.shape and shifted.dtype == torch.uint8


@pytest.mark.subprocess
def test_stage1_modules_import_without_lerobot_gymnasium_or_simulator():
    code = (
        "import sys, rpent_agents.stage1.train, rpent_agents.features.rl_token;"
        "import rpent_agents.features.builtin;"
        "heavy = [m for m in ('lerobot', 'gymnasium', 'mani_skill', 'sapien') if m in sys.modules];"
        "assert not heavy, heavy"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.slow
def test_a_subsampled_conv_cache_trains_and_keeps_the_best_validation(tmp_path):
    from rpent_agents.stage1.trainer import learning_rate_factor

    rng = np.random.default_rng(0)
    steps_per_episode, episodes = 12, 3
    steps = steps_per_episode * episodes
    image_step = np.flatnonzero(np.arange(steps) % 3 == 0)  # every third step has its images
    actions = rng.uniform(-1, 1, (steps, 8)).astype(np.float32)
    actions[:, -1] = np.sign(actions[:, -1])
    cache = FrameCache(
        image=rng.integers(0, 255, (len(image_step), 32, 32, 3), dtype=np.uint8),
        wrist_image=rng.integers(0, 255, (len(image_step), 32, 32, 3), dtype=np.uint8),
        state=rng.normal(size=(steps, 9)).astype(np.float32),
        actions=actions,
        episode_index=np.repeat(np.arange(episodes), steps_per_episode),
        task_index=np.zeros(steps, np.int64),
        tasks=["insert the peg in the hole"],
        image_step=image_step,
    )
    cache.save(tmp_path / "cache.npz")
    args = Stage1TrainArgs(
        data=tmp_path / "cache.npz", output_dir=tmp_path / "ckpt", steps=6, batch_size=4,
        log_every=2, save_every=2, val_episodes=1, device="cpu",
    )  # fmt: skip
    args.vla.dim, args.vla.image_size, args.vla.num_layers, args.rl_token.prefix_seq_len = (
        32,
        32,
        1,
        64,
    )
    assert args.vla.image_encoder == "conv" and args.vla.binarize_gripper
    train(args)
    vla, _, config = load_checkpoint(args.output_dir)
    state = torch.load(args.output_dir / "training_state.pt", weights_only=True)
    assert state["step"] == 6  # resume continues from the latest step
    assert config["metadata"]["val_chunk_mse"] == pytest.approx(state["best_val_chunk_mse"])
    assert config["metadata"]["step"] in (2, 4, 6)
    features = load_featurizer(args.output_dir).rlt_features(
        [{"image": cache.image[0], "wrist_image": cache.wrist_image[0], "state": cache.state[0]}],
        ["insert the peg in the hole"],
    )
    assert set(np.unique(features.ref_chunk[..., -1])) <= {-1.0, 1.0}  # a decided gripper
    first_cosine = 0.5 * (1 + math.cos(math.pi / args.steps))  # step 1 of 6 into the cosine
    assert learning_rate_factor(args, 1, 0.0) == pytest.approx(first_cosine / args.warmup_steps)
    assert learning_rate_factor(args, 6, 0.0) == pytest.approx(0.0, abs=1e-9)
    assert learning_rate_factor(args, 1, 0.5) < learning_rate_factor(args, 1, 0.0)
    args.lr_schedule = "constant"  # warm-up only
    assert learning_rate_factor(args, 6, 0.5) == pytest.approx(6 / args.warmup_steps)


def test_conv_encoder_needs_a_power_of_two_patch():
    from rpent_agents.features.builtin import BuiltinVLAConfig

    with pytest.raises(ValueError, match="power of two"):
        BuiltinVLAConfig(image_size=96, patch_size=12, image_encoder="conv")
    with pytest.raises(ValueError, match="multiple of patch_size"):
        BuiltinVLAConfig(image_size=100, patch_size=16)
