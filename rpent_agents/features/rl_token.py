"""The RL token: a small transformer that compresses a VLA's prefix tokens into one vector `z_rl`.

Encoder (DESIGN.md §4): learned positional encodings (sinusoid init) are added to the prefix,
one learned RL token is appended at the end, two pre-LN layers (8 heads, GeGLU MLP of ratio 4)
run over the sequence, and the output at the last position is `z_rl` (same width D as the
prefix). Decoder: the input is `[z_rl, prefix[0..T-2]]` (prefix detached, padding zeroed, plus
its own positional encodings), two causal pre-LN layers and a linear map reconstruct all T
prefix tokens. `rlt_loss` is the fp32 MSE over valid tokens: masked sum / (valid tokens x D).

The prefix is detached before it enters the RL token, so `rlt_loss` never trains the VLA.
Only torch is needed here (no lerobot, gymnasium or simulator).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class RLTokenConfig:
    """Shape and options of the RL-token encoder/decoder (defaults are the reference's).

    Attributes:
        dim: Width D of the prefix tokens and of `z_rl`.
        num_heads: Attention heads per layer.
        num_encoder_layers: Pre-LN layers of the encoder.
        num_decoder_layers: Causal pre-LN layers of the decoder.
        mlp_ratio: Hidden width of the GeGLU MLP as a multiple of `dim`.
        prefix_seq_len: Longest prefix accepted (size of the positional tables).
        image_only: Read only the leading image tokens of the prefix.
        use_mask: Honour the prefix pad mask (False treats every token as valid).
    """

    dim: int = 2048
    num_heads: int = 8
    num_encoder_layers: int = 2
    num_decoder_layers: int = 2
    mlp_ratio: int = 4
    prefix_seq_len: int = 1024
    image_only: bool = False
    use_mask: bool = True


def sinusoid_table(length: int, dim: int) -> torch.Tensor:
    """Transformer sine/cosine positional table of shape (length, dim)."""
    positions = torch.arange(length, dtype=torch.float32)[:, None]
    frequencies = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(1e4) / dim))
    table = torch.zeros(length, dim)
    table[:, 0::2] = torch.sin(positions * frequencies)
    table[:, 1::2] = torch.cos(positions * frequencies[: dim // 2])
    return table


class GeGLU(nn.Module):
    """MLP with a GELU-gated linear unit: W_out(a * gelu(b)), [a, b] = W_in(x)."""

    def __init__(self, dim: int, hidden_dim: int) -> None:
        super().__init__()
        self.proj_in = nn.Linear(dim, 2 * hidden_dim)
        self.proj_out = nn.Linear(hidden_dim, dim)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:  # noqa: D102
        value, gate = self.proj_in(tokens).chunk(2, dim=-1)
        return self.proj_out(value * F.gelu(gate))


class PreLNBlock(nn.Module):
    """Pre-LayerNorm transformer layer: x + Attn(LN(x)), then x + GeGLU(LN(x))."""

    def __init__(self, dim: int, num_heads: int, mlp_ratio: int) -> None:
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"dim={dim} is not divisible by num_heads={num_heads}")
        self.num_heads = num_heads
        self.attn_norm = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.attn_out = nn.Linear(dim, dim)
        self.mlp_norm = nn.LayerNorm(dim)
        self.mlp = GeGLU(dim, mlp_ratio * dim)

    def forward(self, tokens: torch.Tensor, attend: torch.Tensor | None = None) -> torch.Tensor:
        """Run the layer.

        Args:
            tokens: (B, T, D).
            attend: Boolean mask broadcastable to (B, heads, T, T); True where a query may
                attend to a key. None attends everywhere.
        """
        batch, length, dim = tokens.shape
        qkv = self.qkv(self.attn_norm(tokens)).view(batch, length, 3, self.num_heads, -1)
        query, key, value = qkv.permute(2, 0, 3, 1, 4)
        attended = F.scaled_dot_product_attention(query, key, value, attn_mask=attend)
        tokens = tokens + self.attn_out(attended.transpose(1, 2).reshape(batch, length, dim))
        return tokens + self.mlp(self.mlp_norm(tokens))


def _stack(config: RLTokenConfig, depth: int) -> nn.ModuleList:
    return nn.ModuleList(
        PreLNBlock(config.dim, config.num_heads, config.mlp_ratio) for _ in range(depth)
    )


class RLToken(nn.Module):
    """RL-token encoder (prefix -> `z_rl`) and decoder (`z_rl` -> prefix reconstruction).

    Example:
        >>> rl_token = RLToken(RLTokenConfig(dim=64, prefix_seq_len=32))
        >>> prefix, pad_mask = torch.randn(2, 10, 64), torch.ones(2, 10, dtype=torch.bool)
        >>> z_rl = rl_token.encode(prefix, pad_mask)
        >>> z_rl.shape
        torch.Size([2, 64])
        >>> loss = rl_token.rlt_loss(prefix, pad_mask, z_rl)
    """

    def __init__(self, config: RLTokenConfig) -> None:
        super().__init__()
        self.config = config
        table = sinusoid_table(config.prefix_seq_len, config.dim)
        self.encoder_positions = nn.Parameter(table.clone())
        self.decoder_positions = nn.Parameter(table.clone())
        self.rl_token = nn.Parameter(torch.randn(config.dim) * 0.02)
        self.encoder_layers = _stack(config, config.num_encoder_layers)
        self.encoder_norm = nn.LayerNorm(config.dim)
        self.decoder_layers = _stack(config, config.num_decoder_layers)
        self.decoder_norm = nn.LayerNorm(config.dim)
        self.decoder_out = nn.Linear(config.dim, config.dim)

    def select_prefix(
        self, prefix: torch.Tensor, pad_mask: torch.Tensor, image_token_count: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The detached prefix and valid-token mask this RL token reads (options applied).

        Raises:
            ValueError: When the prefix is longer than `prefix_seq_len`, its width is not
                `dim`, or `image_only` is set without an image token count.
        """
        cfg = self.config
        if cfg.image_only:
            if image_token_count is None:
                raise ValueError("image_only=True needs the feature model's image_token_count")
            prefix, pad_mask = prefix[:, :image_token_count], pad_mask[:, :image_token_count]
        if prefix.shape[1] > cfg.prefix_seq_len:
            raise ValueError(
                f"prefix has {prefix.shape[1]} tokens but prefix_seq_len={cfg.prefix_seq_len};"
                " raise prefix_seq_len in the RL-token config or shorten the prefix"
            )
        if prefix.shape[-1] != cfg.dim:
            raise ValueError(f"prefix width {prefix.shape[-1]} != RL-token dim {cfg.dim}")
        valid = pad_mask.bool() if cfg.use_mask else torch.ones_like(pad_mask, dtype=torch.bool)
        return prefix.detach().to(self.encoder_positions.dtype), valid

    def encode(
        self, prefix: torch.Tensor, pad_mask: torch.Tensor, image_token_count: int | None = None
    ) -> torch.Tensor:
        """`z_rl` (B, D) from prefix tokens (B, T, D) and their pad mask (B, T; True = valid)."""
        prefix, valid = self.select_prefix(prefix, pad_mask, image_token_count)
        batch, length, _ = prefix.shape
        tokens = prefix + self.encoder_positions[:length]
        rl_token = self.rl_token.to(tokens.dtype).expand(batch, 1, -1)
        tokens = torch.cat([tokens, rl_token], dim=1)
        keys = torch.cat([valid, valid.new_ones(batch, 1)], dim=1)
        attend = keys[:, None, None, :]
        for layer in self.encoder_layers:
            tokens = layer(tokens, attend)
        return self.encoder_norm(tokens[:, -1])

    def decode(self, z_rl: torch.Tensor, prefix: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """Teacher-forced reconstruction (B, T, D) of the prefix from `z_rl` (B, D)."""
        length = prefix.shape[1]
        shifted = (prefix * valid[..., None].to(prefix.dtype))[:, : length - 1]
        tokens = torch.cat([z_rl[:, None], shifted], dim=1) + self.decoder_positions[:length]
        causal = torch.ones(length, length, dtype=torch.bool, device=prefix.device).tril()
        keys = torch.cat([valid.new_ones(valid.shape[0], 1), valid[:, : length - 1]], dim=1)
        attend = causal[None, None] & keys[:, None, None, :]
        for layer in self.decoder_layers:
            tokens = layer(tokens, attend)
        return self.decoder_out(self.decoder_norm(tokens))

    def rlt_loss(
        self,
        prefix: torch.Tensor,
        pad_mask: torch.Tensor,
        z_rl: torch.Tensor,
        image_token_count: int | None = None,
    ) -> torch.Tensor:
        """Masked fp32 MSE of the decoder's reconstruction: sum / (valid tokens x D)."""
        target, valid = self.select_prefix(prefix, pad_mask, image_token_count)
        reconstruction = self.decode(z_rl, target, valid)
        squared = (reconstruction.float() - target.float()).pow(2) * valid[..., None]
        return squared.sum() / (valid.sum().clamp(min=1) * target.shape[-1])

    def forward(
        self, prefix: torch.Tensor, pad_mask: torch.Tensor, image_token_count: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`z_rl` and `rlt_loss` in one call (what Stage 1 trains)."""
        z_rl = self.encode(prefix, pad_mask, image_token_count)
        return z_rl, self.rlt_loss(prefix, pad_mask, z_rl, image_token_count)
