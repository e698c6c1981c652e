"""RL-token encoder/decoder (DESIGN.md §4): shapes, masking, options, gradient isolation."""

import pytest
import torch

from rpent_agents.features.rl_token import RLToken, RLTokenConfig, sinusoid_table

DIM = 32


def make_token(**overrides):
    torch.manual_seed(0)
    return RLToken(RLTokenConfig(dim=DIM, prefix_seq_len=24, **overrides)).eval()


def test_shapes_and_reference_structure():
    rl_token = make_token()
    prefix, pad_mask = torch.randn(3, 10, DIM), torch.ones(3, 10, dtype=torch.bool)
    z_rl = rl_token.encode(prefix, pad_mask)
    assert z_rl.shape == (3, DIM)
    valid = pad_mask
    assert rl_token.decode(z_rl, prefix, valid).shape == (3, 10, DIM)
    loss = rl_token.rlt_loss(prefix, pad_mask, z_rl)
    assert loss.shape == () and loss.dtype == torch.float32 and loss > 0
    assert len(rl_token.encoder_layers) == 2 and len(rl_token.decoder_layers) == 2
    assert rl_token.encoder_layers[0].num_heads == 8
    assert rl_token.encoder_layers[0].mlp.proj_out.in_features == 4 * DIM  # GeGLU, ratio 4
    torch.testing.assert_close(rl_token.encoder_positions.data, sinusoid_table(24, DIM))


def test_prefix_longer_than_prefix_seq_len_is_an_error():
    rl_token = make_token()
    with pytest.raises(ValueError, match="prefix_seq_len=24"):
        rl_token.encode(torch.randn(1, 25, DIM), torch.ones(1, 25, dtype=torch.bool))


def test_padding_does_not_change_z_rl_or_the_loss():
    rl_token = make_token()
    prefix = torch.randn(1, 8, DIM)
    z_plain = rl_token.encode(prefix, torch.ones(1, 8, dtype=torch.bool))
    padded = torch.cat([prefix, 100 * torch.randn(1, 5, DIM)], dim=1)
    pad_mask = torch.tensor([[True] * 8 + [False] * 5])
    z_padded = rl_token.encode(padded, pad_mask)
    torch.testing.assert_close(z_padded, z_plain, rtol=1e-5, atol=1e-5)
    loss_plain = rl_token.rlt_loss(prefix, torch.ones(1, 8, dtype=torch.bool), z_plain)
    loss_padded = rl_token.rlt_loss(padded, pad_mask, z_padded)
    torch.testing.assert_close(loss_padded, loss_plain, rtol=1e-5, atol=1e-6)


def test_use_mask_false_reads_padding_too():
    rl_token = make_token(use_mask=False)
    prefix = torch.randn(1, 8, DIM)
    pad_mask = torch.tensor([[True] * 6 + [False] * 2])
    changed = prefix.clone()
    changed[:, 6:] = 3 * torch.randn(1, 2, DIM)
    assert not torch.allclose(rl_token.encode(prefix, pad_mask), rl_token.encode(changed, pad_mask))


def test_image_only_reads_the_leading_image_tokens():
    rl_token = make_token(image_only=True)
    prefix, pad_mask = torch.randn(2, 12, DIM), torch.ones(2, 12, dtype=torch.bool)
    changed = prefix.clone()
    changed[:, 4:] = torch.randn(2, 8, DIM)  # text tokens after 4 image tokens
    torch.testing.assert_close(
        rl_token.encode(prefix, pad_mask, 4), rl_token.encode(changed, pad_mask, 4)
    )
    with pytest.raises(ValueError, match="image_token_count"):
        rl_token.encode(prefix, pad_mask)


def test_decoder_is_causal_and_teacher_forced():
    rl_token = make_token()
    prefix, valid = torch.randn(1, 8, DIM), torch.ones(1, 8, dtype=torch.bool)
    z_rl = torch.randn(1, DIM)
    before = rl_token.decode(z_rl, prefix, valid)
    changed = prefix.clone()
    # a random change: adding one constant to every feature of a token is invisible to the
    # pre-LN layers and the final LayerNorm (they remove a token's mean)
    changed[:, 5] += 3.0 * torch.randn(DIM)
    after = rl_token.decode(z_rl, changed, valid)
    # Position t sees z_rl and prefix[0..t-1]: changing token 5 affects outputs 6.. only.
    torch.testing.assert_close(after[:, :6], before[:, :6])
    assert not torch.allclose(after[:, 6:], before[:, 6:])
    other_z = rl_token.decode(torch.randn(1, DIM), prefix, valid)
    assert not torch.allclose(other_z[:, 0], before[:, 0])


def test_rlt_loss_does_not_reach_the_vla():
    torch.manual_seed(0)
    vla_layer = torch.nn.Linear(DIM, DIM)
    rl_token = make_token().train()
    prefix = vla_layer(torch.randn(2, 6, DIM))
    _, loss = rl_token(prefix, torch.ones(2, 6, dtype=torch.bool))
    loss.backward()
    assert vla_layer.weight.grad is None
    assert rl_token.rl_token.grad is not None and rl_token.rl_token.grad.abs().sum() > 0
    assert rl_token.decoder_out.weight.grad.abs().sum() > 0


def test_rlt_loss_is_masked_mean_over_valid_tokens_and_width():
    rl_token = make_token()
    prefix = torch.randn(1, 5, DIM)
    pad_mask = torch.tensor([[True, True, True, False, False]])
    z_rl = rl_token.encode(prefix, pad_mask)
    reconstruction = rl_token.decode(z_rl, prefix, pad_mask)
    expected = (reconstruction[:, :3] - prefix[:, :3]).pow(2).sum() / (3 * DIM)
    torch.testing.assert_close(rl_token.rlt_loss(prefix, pad_mask, z_rl), expected)


@pytest.mark.slow
def test_training_reduces_reconstruction_loss():
    rl_token = make_token().train()
    optimizer = torch.optim.Adam(rl_token.parameters(), lr=1e-3)
    prefix, pad_mask = torch.randn(4, 6, DIM), torch.ones(4, 6, dtype=torch.bool)
    losses = []
    for _ in range(30):
        _, loss = rl_token(prefix, pad_mask)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]
