"""NaN and inf never pass the featurizer, nor a Stage 1 checkpoint, in either direction."""

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from rpent_agents.features.builtin import BuiltinVLA, BuiltinVLAConfig
from rpent_agents.features.checkpoint import (
    CheckpointError,
    load_checkpoint,
    load_featurizer,
    save_checkpoint,
)
from rpent_agents.features.norm import NormStats
from rpent_agents.features.protocol import RLTFeaturizer
from rpent_agents.rlt_token import RLToken, RLTokenConfig

INSTRUCTIONS = ["insert the peg in the hole"] * 3
TINY = dict(image_size=32, patch_size=16, dim=32, num_layers=1, num_head_layers=1, chunk_len=4)


def observations(count=3):
    rng = np.random.default_rng(0)
    return [
        {
            "image": rng.integers(0, 256, (32, 32, 3), dtype=np.uint8),
            "wrist_image": rng.integers(0, 256, (32, 32, 3), dtype=np.uint8),
            "state": rng.normal(size=9).astype(np.float32),
        }
        for _ in range(count)
    ]


def tiny_models():
    torch.manual_seed(0)
    vla = BuiltinVLA(BuiltinVLAConfig(**TINY), NormStats.identity(9, 8))
    return vla.eval(), RLToken(RLTokenConfig(dim=32, prefix_seq_len=64)).eval()


@pytest.mark.parametrize("bad_value", [np.nan, np.inf, -np.inf])
def test_a_non_finite_state_is_refused_naming_the_observation_and_the_key(bad_value):
    featurizer = RLTFeaturizer(*tiny_models())
    obs = observations()
    obs[1]["state"][4] = bad_value
    message = rf"observation 1: 'state' holds {bad_value} at \[4\]"
    with pytest.raises(ValueError, match=message):
        featurizer.rlt_features(obs, INSTRUCTIONS)
    with pytest.raises(ValueError, match=message):
        featurizer.prefix_features(obs, INSTRUCTIONS)
    obs[1]["state"][4] = 0.0
    assert np.isfinite(featurizer.rlt_features(obs, INSTRUCTIONS).z_rl).all()


@pytest.mark.parametrize(
    ("broken_weight", "output"),
    [
        ("vla.norm.weight", "prefix"),
        ("vla.action_head.out.bias", "ref_chunk"),
        ("rl_token.encoder_norm.weight", "z_rl"),
    ],
)
def test_a_broken_model_output_is_refused_naming_the_output(broken_weight, output):
    vla, rl_token = tiny_models()
    models = {"vla": vla, "rl_token": rl_token}
    prefix, name = broken_weight.split(".", 1)
    with torch.no_grad():
        models[prefix].get_parameter(name).fill_(np.nan)
    with pytest.raises(ValueError, match=f"output '{output}' of observation 0 holds nan"):
        RLTFeaturizer(vla, rl_token).rlt_features(observations(), INSTRUCTIONS)


def test_a_checkpoint_with_a_non_finite_weight_is_refused_at_save(tmp_path):
    vla, rl_token = tiny_models()
    with torch.no_grad():
        vla.state_embed.weight[0, 0] = np.inf
    with pytest.raises(ValueError, match=r"tensor 'vla.state_embed.weight' holds inf at \[0, 0\]"):
        save_checkpoint(tmp_path / "ckpt", vla, rl_token)
    assert not (tmp_path / "ckpt" / "model.safetensors").exists()  # nothing was written


def test_a_weight_overflowing_its_storage_dtype_is_refused_at_save(tmp_path):
    vla, rl_token = tiny_models()
    with torch.no_grad():
        vla.state_embed.weight[0, 0] = 1e6  # finite in float32, inf in float16
    with pytest.raises(ValueError, match="'vla.state_embed.weight' holds inf.*float16 overflowed"):
        save_checkpoint(tmp_path / "ckpt", vla, rl_token, weights_dtype=torch.float16)
    save_checkpoint(tmp_path / "ckpt", vla, rl_token)  # float32 holds it


def test_a_checkpoint_with_a_non_finite_weight_is_refused_at_load(tmp_path):
    save_checkpoint(tmp_path, *tiny_models())
    weights = tmp_path / "model.safetensors"
    tensors = load_file(weights)
    tensors["rl_token.encoder_norm.bias"][3] = np.nan  # damaged on disk
    save_file(tensors, weights)
    with pytest.raises(CheckpointError, match=r"'rl_token.encoder_norm.bias' holds nan at \[3\]"):
        load_checkpoint(tmp_path)
    with pytest.raises(CheckpointError, match="model.safetensors"):
        load_featurizer(tmp_path)
