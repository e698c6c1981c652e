"""The built-in VLA: tokenizer, prefix layout, both action heads, checkpoint round trip.

NaN and inf never pass the featurizer (inputs and outputs) nor a checkpoint (save and load).
"""

import numpy as np
import pytest
import torch
from builtin_helpers import observations
from safetensors.torch import load_file, save_file

from rpent_agents.features.builtin import BuiltinVLA, BuiltinVLAConfig, ByteTokenizer
from rpent_agents.features.checkpoint import (
    CheckpointError,
    load_checkpoint,
    load_featurizer,
    save_checkpoint,
)
from rpent_agents.features.norm import NormStats
from rpent_agents.features.protocol import RLTFeaturizer
from rpent_agents.features.rl_token import RLToken, RLTokenConfig

INSTRUCTION = "insert the peg in the hole"
INSTRUCTIONS = [INSTRUCTION] * 3
TINY = dict(image_size=32, patch_size=16, dim=32, num_layers=1, num_head_layers=1, chunk_len=4)


def tiny_vla(**overrides):
    torch.manual_seed(0)
    stats = NormStats([0.1] * 9, [2.0] * 9, [0.5] * 8, [0.25] * 8)
    return BuiltinVLA(BuiltinVLAConfig(**{**TINY, **overrides}), stats)


def test_byte_tokenizer_pads_and_cuts():
    ids, mask = ByteTokenizer(4)(["ab", "abcdef"])
    assert ids.tolist() == [[98, 99, 0, 0], [98, 99, 100, 101]]
    assert mask.tolist() == [[True, True, False, False], [True] * 4]
    assert ByteTokenizer(3)(["é"])[0].tolist() == [[0xC3 + 1, 0xA9 + 1, 0]]


def test_prefix_layout_and_reference_chunk_units():
    vla = tiny_vla().eval()
    features = vla.featurize(observations(2), [INSTRUCTION, "hi"])
    image_tokens = 2 * (32 // 16) ** 2
    assert features.image_token_count == image_tokens == vla.image_token_count
    assert features.prefix_tokens.shape == (2, image_tokens + 1 + 32, 32)
    valid_text = features.pad_mask[:, image_tokens + 1 :].sum(1).tolist()
    assert valid_text == [len(INSTRUCTION), 2]
    assert features.pad_mask[:, : image_tokens + 1].all()
    assert features.ref_chunk.shape == (2, 4, 8)
    # The head predicts normalised actions; the chunk comes back in env units.
    prefix, mask = features.prefix_tokens, features.pad_mask
    normalised = vla.action_head(prefix, mask)
    torch.testing.assert_close(features.ref_chunk, normalised * 0.25 + 0.5)


def test_images_of_another_size_are_resized():
    vla = tiny_vla().eval()
    assert vla.featurize(observations(1, size=48), [INSTRUCTION]).prefix_tokens.shape[1] == 41


@pytest.mark.parametrize("head", ["regression", "flow"])
@pytest.mark.slow
def test_action_head_learns_a_fixed_chunk(head):
    vla = tiny_vla(action_head=head).train()
    optimizer = torch.optim.Adam(vla.parameters(), lr=3e-3)
    obs = observations(4)
    inputs = {key: torch.from_numpy(np.stack([o[key] for o in obs])) for key in obs[0]}
    text_ids, text_mask = vla.tokenizer([INSTRUCTION] * 4)
    chunk = torch.from_numpy(np.random.default_rng(1).uniform(0, 1, (4, 4, 8)).astype(np.float32))
    valid = torch.ones(4, 4, dtype=torch.bool)

    def sampled_chunk_error():
        with torch.no_grad():
            prefix, mask = vla.encode_prefix(inputs, text_ids, text_mask)
            return (vla.sample_chunk(prefix, mask) - chunk).pow(2).mean().item()

    error_before = sampled_chunk_error()
    for _ in range(80):
        prefix, mask = vla.encode_prefix(inputs, text_ids, text_mask)
        loss = vla.vla_loss(prefix, mask, chunk, valid)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert sampled_chunk_error() < 0.5 * error_before


def test_padded_chunk_steps_do_not_count():
    vla = tiny_vla().eval()
    obs = observations(1)
    inputs = {key: torch.from_numpy(np.stack([o[key] for o in obs])) for key in obs[0]}
    prefix, mask = vla.encode_prefix(inputs, *vla.tokenizer([INSTRUCTION]))
    chunk = torch.zeros(1, 4, 8)
    valid = torch.tensor([[True, True, False, False]])
    far = chunk.clone()
    far[:, 2:] = 100.0
    torch.testing.assert_close(
        vla.vla_loss(prefix, mask, chunk, valid), vla.vla_loss(prefix, mask, far, valid)
    )


@pytest.mark.slow
def test_checkpoint_round_trip(tmp_path):
    vla = tiny_vla().eval()
    rl_token = RLToken(RLTokenConfig(dim=32, prefix_seq_len=64)).eval()
    save_checkpoint(tmp_path, vla, rl_token, {"step": 3})
    loaded_vla, loaded_token, config = load_checkpoint(tmp_path)
    assert config["metadata"] == {"step": 3} and config["vla"]["dim"] == 32
    assert NormStats.load(tmp_path) == vla.norm_stats
    obs = observations(2)
    expected = vla.featurize(obs, [INSTRUCTION] * 2)
    got = loaded_vla.eval().featurize(obs, [INSTRUCTION] * 2)
    torch.testing.assert_close(got.prefix_tokens, expected.prefix_tokens)
    torch.testing.assert_close(got.ref_chunk, expected.ref_chunk)
    features = load_featurizer(tmp_path).rlt_features(obs, [INSTRUCTION] * 2)
    z_rl = rl_token.encode(expected.prefix_tokens, expected.pad_mask)
    np.testing.assert_allclose(features.z_rl, z_rl.detach().numpy(), rtol=1e-5, atol=1e-5)
    assert features.ref_chunk.shape == (2, 4, 8) and features.z_rl.dtype == np.float32


def test_bfloat16_storage_loads_as_float32(tmp_path):
    vla = tiny_vla()
    rl_token = RLToken(RLTokenConfig(dim=32, prefix_seq_len=64))
    save_checkpoint(tmp_path / "fp32", vla, rl_token)
    save_checkpoint(tmp_path / "bf16", vla, rl_token, weights_dtype=torch.bfloat16)
    size = lambda name: (tmp_path / name / "model.safetensors").stat().st_size  # noqa: E731
    assert size("bf16") < 0.6 * size("fp32")
    loaded, _, _ = load_checkpoint(tmp_path / "bf16")
    assert all(p.dtype == torch.float32 for p in loaded.parameters())


def test_missing_checkpoint_files_name_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        load_featurizer(tmp_path)
    with pytest.raises(FileNotFoundError, match="norm_stats.json"):
        NormStats.load(tmp_path)


def test_rl_token_width_must_match_the_prefix():
    with pytest.raises(ValueError, match="prefix_dim 32"):
        RLTFeaturizer(tiny_vla(), RLToken(RLTokenConfig(dim=16, prefix_seq_len=64)))


def tiny_models():
    return tiny_vla().eval(), RLToken(RLTokenConfig(dim=32, prefix_seq_len=64)).eval()


@pytest.mark.parametrize("bad_value", [np.nan, np.inf, -np.inf])
def test_a_non_finite_state_is_refused_naming_the_observation_and_the_key(bad_value):
    featurizer = RLTFeaturizer(*tiny_models())
    obs = observations(3)
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
        RLTFeaturizer(vla, rl_token).rlt_features(observations(3), INSTRUCTIONS)


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
