"""`--key-style lerobot`: LeRobot's own feature names, and a LeRobot policy (ACT) trains on them."""

import itertools
import json

import numpy as np
import pytest
import torch
from conftest import INSTRUCTION
from lerobot.datasets.lerobot_dataset import LeRobotDataset, LeRobotDatasetMetadata
from lerobot.policies.act.configuration_act import ACTConfig
from lerobot.policies.factory import make_policy, make_pre_post_processors
from lerobot.utils import constants

from recorders.flywheel import export_flywheel
from recorders.lerobot_io import rpent_key, styled_key
from recorders.trajectory import TaskMetadata, TrajectoryWriter

IMAGE_SIZE, STATE_DIM, ACTION_DIM, FPS, CHUNK = 32, 5, 3, 10, 4


def observation(step):
    rng = np.random.default_rng(step)
    return {
        "image": rng.integers(0, 256, (IMAGE_SIZE, IMAGE_SIZE, 3), dtype=np.uint8),
        "wrist_image": rng.integers(0, 256, (IMAGE_SIZE, IMAGE_SIZE, 3), dtype=np.uint8),
        "state": np.full(STATE_DIM, step / 10, np.float32),
        "joint_torque": np.full(2, -step, np.float32),
    }


def action(step):
    return np.linspace(-1, 1, ACTION_DIM, dtype=np.float32) * np.cos(step / 3)


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """Two successful VLA episodes of 8 steps, exported in both key styles."""
    root = tmp_path_factory.mktemp("key_style")
    writer = TrajectoryWriter(root / "run", image_writer_threads=2)
    for _ in range(2):
        writer.start_task(TaskMetadata(env_id="RPentTest/Two-v0", fps=FPS, robot="panda"))
        call_id = writer.tool_call("vla", {"instruction": INSTRUCTION})
        writer.set_action_source("vla", call_id, writer.vla_prediction(call_id, INSTRUCTION, "m"))
        for step in range(8):
            writer.record_action(action(step), observation(step), 0.0, False, False)
        writer.finish_task(True, "terminated")
    writer.close()
    for style in ("rpent", "lerobot"):
        export_flywheel(root / "run", root / style, use_videos=False, key_style=style)
    return root


def features(export_dir):
    info = json.loads((export_dir / "train" / "meta" / "info.json").read_text())
    return {key: spec["dtype"] for key, spec in info["features"].items()}


def test_lerobot_style_names_the_features_as_lerobot_policies_expect(exports):
    assert LeRobotDataset("local/rpent", root=exports / "rpent" / "train").num_episodes == 2
    rpent = features(exports / "rpent")
    lerobot = features(exports / "lerobot")
    assert {"image", "wrist_image", "state", "joint_torque", "actions"} <= set(rpent)
    names = {
        f"{constants.OBS_IMAGES}.image": "image",
        f"{constants.OBS_IMAGES}.wrist_image": "image",
        constants.OBS_STATE: "float32",
        f"{constants.OBS_STR}.joint_torque": "float32",
        constants.ACTION: "float32",
    }
    assert names.items() <= lerobot.items()
    assert not {"image", "wrist_image", "state", "actions"} & set(lerobot)
    for key in rpent:
        image = rpent[key] in ("image", "video")
        assert rpent_key(styled_key(key, image, "lerobot")) == key
    report = json.loads((exports / "lerobot" / "report.json").read_text())
    assert report["key_style"] == "lerobot" and report["counts"]["frames"] == 16


def test_frames_are_the_same_in_both_styles(exports):
    rpent = LeRobotDataset("local/rpent", root=exports / "rpent" / "train")
    lerobot = LeRobotDataset("local/lerobot", root=exports / "lerobot" / "train")
    for index in (0, 11):
        a, b = rpent[index], lerobot[index]
        torch.testing.assert_close(a["actions"], b[constants.ACTION])
        torch.testing.assert_close(a["state"], b[constants.OBS_STATE])
        torch.testing.assert_close(a["wrist_image"], b[f"{constants.OBS_IMAGES}.wrist_image"])
        assert a["task"] == b["task"] == INSTRUCTION


@pytest.mark.slow
def test_act_trains_a_few_cpu_steps_on_a_lerobot_style_export(exports):
    root = exports / "lerobot" / "train"
    torch.manual_seed(0)
    config = ACTConfig(
        device="cpu", chunk_size=CHUNK, n_action_steps=CHUNK, dim_model=32, n_heads=2,
        dim_feedforward=64, n_encoder_layers=1, n_decoder_layers=1, n_vae_encoder_layers=1,
        latent_dim=8, pretrained_backbone_weights=None,
    )  # fmt: skip
    metadata = LeRobotDatasetMetadata("local/lerobot", root=root)
    policy = make_policy(config, ds_meta=metadata)
    assert set(config.image_features) == {
        f"{constants.OBS_IMAGES}.image",
        f"{constants.OBS_IMAGES}.wrist_image",
    }
    assert config.robot_state_feature.shape == (STATE_DIM,)
    preprocessor, _ = make_pre_post_processors(config, dataset_stats=metadata.stats)
    dataset = LeRobotDataset(
        "local/lerobot",
        root=root,
        delta_timestamps={constants.ACTION: [step / FPS for step in range(CHUNK)]},
    )
    loader = torch.utils.data.DataLoader(dataset, batch_size=4, shuffle=True)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-3)
    policy.train()
    losses = []
    for batch in itertools.islice(itertools.cycle(loader), 6):
        loss, _ = policy.forward(preprocessor(batch))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert all(np.isfinite(losses))
    assert any(parameter.grad is not None for parameter in policy.parameters())
