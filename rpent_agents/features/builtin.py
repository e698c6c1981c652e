"""The built-in small VLA: two cameras + state + instruction -> prefix tokens and an action chunk.

Everything is our own code and trains from scratch (no hub download). The prefix is
`[image patches, wrist patches, state token, instruction bytes]`: each camera image is resized
to `image_size` and turned into one token per `patch_size` patch, by a linear patch embedding
(`image_encoder="patch"`, as a ViT) or by a small strided convolution stack that reaches the
same grid (`"conv"`: better suited to training from scratch on a few thousand episodes); the
state is normalised and projected to one token, and the instruction is tokenized by
`ByteTokenizer` (UTF-8 bytes). A few pre-LN
transformer layers mix them into prefix hidden states of width `dim`. The action head reads the
prefix with `chunk_len` action queries and outputs a chunk, either by regression or by flow
matching as in pi0.5 (`action_head`).

Only torch and numpy are imported, so Stage 1 can train on a machine without lerobot,
gymnasium or a simulator.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from rpent_agents.features.norm import NormStats
from rpent_agents.features.protocol import PrefixFeatures
from rpent_agents.features.rl_token import PreLNBlock, sinusoid_table

CAMERA_KEYS = ("image", "wrist_image")
STATE_KEY = "state"


@dataclass
class BuiltinVLAConfig:
    """Shape of the built-in VLA.

    Attributes:
        state_dim: Length of the `state` vector.
        action_dim: Width A of one action.
        chunk_len: Steps H of the predicted chunk.
        image_size: Side in pixels the camera images are resized to.
        patch_size: Side in pixels of one image patch token.
        max_text_tokens: Instruction bytes kept (longer instructions are cut).
        dim: Width D of the prefix tokens.
        num_heads: Attention heads per layer.
        num_layers: Prefix encoder layers.
        num_head_layers: Action-head layers.
        mlp_ratio: GeGLU hidden width as a multiple of `dim`.
        action_head: "regression" (MSE on the chunk) or "flow" (flow matching as in pi0.5).
        flow_steps: Euler steps when sampling a chunk from the flow head.
        image_encoder: "patch" (linear patch embedding) or "conv" (strided 3x3 convolutions,
            one per halving of the resolution, down to the patch grid; `patch_size` must then
            be a power of two).
        binarize_gripper: The last action dimension is a binary gripper command (-1 closed,
            1 open): reference chunks give its sign, never a half-open gripper.
    """

    state_dim: int = 9
    action_dim: int = 8
    chunk_len: int = 10
    image_size: int = 64
    patch_size: int = 8
    max_text_tokens: int = 32
    dim: int = 256
    num_heads: int = 8
    num_layers: int = 4
    num_head_layers: int = 2
    mlp_ratio: int = 2
    action_head: Literal["regression", "flow"] = "regression"
    flow_steps: int = 10
    image_encoder: Literal["patch", "conv"] = "patch"
    binarize_gripper: bool = False

    def __post_init__(self) -> None:
        """Reject shapes the encoder cannot build."""
        if self.image_size % self.patch_size:
            raise ValueError(
                f"BuiltinVLAConfig.image_size {self.image_size} must be a multiple of "
                f"patch_size {self.patch_size}"
            )
        is_power_of_two = self.patch_size & (self.patch_size - 1) == 0
        if self.image_encoder == "conv" and not (self.patch_size >= 2 and is_power_of_two):
            raise ValueError(
                f"BuiltinVLAConfig.patch_size {self.patch_size}: the conv encoder halves the "
                "resolution per layer, so use a power of two (8, 16, ...)"
            )

    @property
    def patches_per_image(self) -> int:
        """Patch tokens per camera image."""
        return (self.image_size // self.patch_size) ** 2


class ByteTokenizer:
    """Instruction -> UTF-8 byte ids (1..256), right-padded with 0 to a fixed length.

    Each instruction's ids are kept once computed (a batch repeats one instruction, and the
    next batch the same one).

    Example:
        >>> ids, mask = ByteTokenizer(8)(["hi"])
        >>> ids.tolist(), mask.tolist()
        ([[105, 106, 0, 0, 0, 0, 0, 0]], [[True, True, False, False, False, False, False, False]])
    """

    vocab_size = 257

    def __init__(self, max_tokens: int) -> None:
        """Keep at most `max_tokens` bytes per instruction."""
        self.max_tokens = max_tokens

    def __call__(self, instructions: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Token ids (B, max_tokens) int64 and their validity mask (B, max_tokens) bool."""
        rows = [padded_byte_ids(text, self.max_tokens) for text in instructions]
        ids = torch.tensor(rows, dtype=torch.long).reshape(len(rows), self.max_tokens)
        return ids, ids > 0


@functools.lru_cache(maxsize=1024)
def padded_byte_ids(text: str, max_tokens: int) -> tuple[int, ...]:
    """The ids of one instruction (`ByteTokenizer`), cut or zero-padded to `max_tokens`."""
    ids = [byte + 1 for byte in text.encode("utf-8")[:max_tokens]]
    return (*ids, *[0] * (max_tokens - len(ids)))


def conv_patch_encoder(dim: int, patch_size: int, base_channels: int = 32) -> nn.Sequential:
    """Strided 3x3 convolutions from (B, 3, S, S) to (B, dim, S/patch, S/patch).

    One stride-2 convolution (GroupNorm, GELU) per halving, channels doubling from
    `base_channels` up to `dim`, then a 1x1 projection to `dim`.
    """
    layers: list[nn.Module] = []
    channels_in = 3
    for layer in range(int(math.log2(patch_size))):
        channels_out = min(base_channels * 2**layer, dim)
        layers += [
            nn.Conv2d(channels_in, channels_out, 3, stride=2, padding=1),
            nn.GroupNorm(8, channels_out),
            nn.GELU(),
        ]
        channels_in = channels_out
    layers.append(nn.Conv2d(channels_in, dim, 1))
    return nn.Sequential(*layers)


class ActionHead(nn.Module):
    """Chunk queries attend to the prefix through a few layers; a linear map gives actions."""

    def __init__(self, config: BuiltinVLAConfig) -> None:
        super().__init__()
        dim = config.dim
        self.queries = nn.Parameter(sinusoid_table(config.chunk_len, dim) * 0.1)
        self.layers = nn.ModuleList(
            PreLNBlock(dim, config.num_heads, config.mlp_ratio)
            for _ in range(config.num_head_layers)
        )
        self.norm = nn.LayerNorm(dim)
        self.out = nn.Linear(dim, config.action_dim)
        if config.action_head == "flow":
            self.action_in = nn.Linear(config.action_dim, dim)
            self.time_mlp = nn.Sequential(nn.Linear(dim, dim), nn.SiLU(), nn.Linear(dim, dim))

    def forward(
        self,
        prefix: torch.Tensor,
        pad_mask: torch.Tensor,
        noisy_chunk: torch.Tensor | None = None,
        time: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Chunk (regression) or velocity (flow, given `noisy_chunk` and `time`), (B, H, A)."""
        batch, chunk_len = prefix.shape[0], self.queries.shape[0]
        queries = self.queries.expand(batch, -1, -1)
        if noisy_chunk is not None:
            time_code = sinusoid_time(time, prefix.shape[-1])
            queries = queries + self.action_in(noisy_chunk) + self.time_mlp(time_code)[:, None]
        tokens = torch.cat([prefix, queries], dim=1)
        keys = torch.cat([pad_mask, pad_mask.new_ones(batch, chunk_len)], dim=1)
        for layer in self.layers:
            tokens = layer(tokens, keys[:, None, None, :])
        return self.out(self.norm(tokens[:, -chunk_len:]))


def sinusoid_time(time: torch.Tensor, dim: int) -> torch.Tensor:
    """Sine/cosine code (B, dim) of flow times in [0, 1] (periods 4e-3 to 4, as pi0.5)."""
    fractions = torch.linspace(0.0, 1.0, dim // 2, device=time.device)
    periods = 4e-3 * (4.0 / 4e-3) ** fractions
    angles = time[:, None] * (2 * math.pi / periods)[None]
    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=-1)


class BuiltinVLA(nn.Module):
    """The embedded default feature model (implements `FeatureModel`).

    Example:
        >>> vla = BuiltinVLA(BuiltinVLAConfig(), NormStats.identity(9, 8))
        >>> features = vla.featurize([obs], ["insert the peg in the hole"])
        >>> features.prefix_tokens.shape, features.ref_chunk.shape
        (torch.Size([1, 161, 256]), torch.Size([1, 10, 8]))
    """

    def __init__(self, config: BuiltinVLAConfig, norm_stats: NormStats) -> None:
        super().__init__()
        norm_stats.check_dims(config.state_dim, config.action_dim)
        self.config = config
        self.norm_stats = norm_stats
        self.tokenizer = ByteTokenizer(config.max_text_tokens)
        dim = config.dim
        if config.image_encoder == "conv":
            self.patch_embed = conv_patch_encoder(dim, config.patch_size)
        else:
            self.patch_embed = nn.Conv2d(3, dim, config.patch_size, stride=config.patch_size)
        self.camera_embed = nn.Parameter(torch.zeros(len(CAMERA_KEYS), dim))
        self.patch_positions = nn.Parameter(sinusoid_table(config.patches_per_image, dim))
        self.state_embed = nn.Linear(config.state_dim, dim)
        self.text_embed = nn.Embedding(ByteTokenizer.vocab_size, dim)
        self.text_positions = nn.Parameter(sinusoid_table(config.max_text_tokens, dim))
        self.layers = nn.ModuleList(
            PreLNBlock(dim, config.num_heads, config.mlp_ratio) for _ in range(config.num_layers)
        )
        self.norm = nn.LayerNorm(dim)
        self.action_head = ActionHead(config)
        for name, value in norm_stats.tensors().items():
            self.register_buffer(name, value, persistent=False)

    @property
    def prefix_dim(self) -> int:  # noqa: D102
        return self.config.dim

    @property
    def chunk_len(self) -> int:  # noqa: D102
        return self.config.chunk_len

    @property
    def action_dim(self) -> int:  # noqa: D102
        return self.config.action_dim

    @property
    def device(self) -> torch.device:  # noqa: D102
        return self.patch_positions.device

    @property
    def image_token_count(self) -> int:
        """Leading prefix tokens that come from the two cameras."""
        return len(CAMERA_KEYS) * self.config.patches_per_image

    def _image_tokens(self, images_u8: torch.Tensor, camera: int) -> torch.Tensor:
        """(B, H, W, 3) uint8 -> (B, patches, D)."""
        pixels = images_u8.to(self.device).permute(0, 3, 1, 2).float() / 127.5 - 1.0
        size = self.config.image_size
        if pixels.shape[-2:] != (size, size):
            pixels = F.interpolate(pixels, (size, size), mode="bilinear", antialias=True)
        patches = self.patch_embed(pixels).flatten(2).transpose(1, 2)
        return patches + self.patch_positions + self.camera_embed[camera]

    def encode_prefix(
        self, inputs: Mapping[str, torch.Tensor], text_ids: torch.Tensor, text_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Prefix hidden states (B, T, D) and pad mask (B, T) from batched tensors.

        Args:
            inputs: `image`, `wrist_image` (B, H, W, 3) uint8 and `state` (B, S) raw float.
            text_ids: Instruction token ids (B, L).
            text_mask: Validity of the instruction tokens (B, L).
        """
        images = [self._image_tokens(inputs[key], index) for index, key in enumerate(CAMERA_KEYS)]
        state = (inputs[STATE_KEY].to(self.device).float() - self.state_mean) / self.state_std
        text = self.text_embed(text_ids.to(self.device)) + self.text_positions[: text_ids.shape[1]]
        tokens = torch.cat([*images, self.state_embed(state)[:, None], text], dim=1)
        batch, image_and_state = tokens.shape[0], tokens.shape[1] - text_ids.shape[1]
        text_mask = text_mask.to(self.device)
        pad_mask = torch.cat([text_mask.new_ones(batch, image_and_state), text_mask], dim=1)
        for layer in self.layers:
            tokens = layer(tokens, pad_mask[:, None, None, :])
        return self.norm(tokens), pad_mask

    def vla_loss(
        self,
        prefix: torch.Tensor,
        pad_mask: torch.Tensor,
        chunk: torch.Tensor,
        chunk_valid: torch.Tensor,
    ) -> torch.Tensor:
        """Action-head loss on a target chunk (B, H, A) in env units; padded steps excluded."""
        target = (chunk.to(self.device) - self.action_mean) / self.action_std
        if self.config.action_head == "flow":
            batch = target.shape[0]
            time = torch.distributions.Beta(1.5, 1.0).sample((batch,)).to(self.device)
            time = time * 0.999 + 0.001
            noise = torch.randn_like(target)
            noisy = time[:, None, None] * noise + (1 - time[:, None, None]) * target
            prediction, target = self.action_head(prefix, pad_mask, noisy, time), noise - target
        else:
            prediction = self.action_head(prefix, pad_mask)
        weight = chunk_valid.to(self.device)[..., None].float()
        squared = (prediction.float() - target.float()).pow(2) * weight
        return squared.sum() / (weight.sum().clamp(min=1) * target.shape[-1])

    def sample_chunk(self, prefix: torch.Tensor, pad_mask: torch.Tensor) -> torch.Tensor:
        """Reference chunk (B, H, A) in env action units (flow: Euler from noise at t=1)."""
        if self.config.action_head == "flow":
            shape = (prefix.shape[0], self.config.chunk_len, self.config.action_dim)
            chunk = torch.randn(shape, device=self.device)
            step = 1.0 / self.config.flow_steps
            for index in range(self.config.flow_steps):
                time = torch.full((shape[0],), 1.0 - index * step, device=self.device)
                chunk = chunk - step * self.action_head(prefix, pad_mask, chunk, time)
        else:
            chunk = self.action_head(prefix, pad_mask)
        chunk = chunk * self.action_std + self.action_mean
        if self.config.binarize_gripper:
            gripper = torch.where(chunk[..., -1:] >= 0, 1.0, -1.0).to(chunk.dtype)
            chunk = torch.cat([chunk[..., :-1], gripper], dim=-1)
        return chunk

    def featurize(
        self, observations: Sequence[Mapping[str, Any]], instructions: Sequence[str]
    ) -> PrefixFeatures:
        """Prefix tokens, pad mask and reference chunk for raw observations (one pass)."""
        inputs = {
            key: torch.from_numpy(np.stack([np.asarray(obs[key]) for obs in observations]))
            for key in (*CAMERA_KEYS, STATE_KEY)
        }
        text_ids, text_mask = self.tokenizer(instructions)
        prefix, pad_mask = self.encode_prefix(inputs, text_ids, text_mask)
        ref_chunk = self.sample_chunk(prefix, pad_mask)
        return PrefixFeatures(prefix, pad_mask, ref_chunk, self.image_token_count)
