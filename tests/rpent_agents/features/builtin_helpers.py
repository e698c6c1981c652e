"""What the built-in VLA's tests share: random observations, small random models."""

import numpy as np
import torch

from rpent_agents.features.builtin import BuiltinVLA, BuiltinVLAConfig
from rpent_agents.features.norm import NormStats
from rpent_agents.features.rl_token import RLToken, RLTokenConfig

INSTRUCTIONS = ("insert the peg in the hole", "hi")
# The conv encoder (per-sample GroupNorm) with both cameras, a short text and a binary gripper.
SMALL = dict(
    image_size=32, patch_size=16, dim=32, num_layers=1, num_head_layers=1, chunk_len=4,
    image_encoder="conv", max_text_tokens=16,
)  # fmt: skip


def observations(count, seed=0, size=32):
    rng = np.random.default_rng(seed)
    return [
        {
            "image": rng.integers(0, 256, (size, size, 3), dtype=np.uint8),
            "wrist_image": rng.integers(0, 256, (size, size, 3), dtype=np.uint8),
            "state": rng.normal(size=9).astype(np.float32),
        }
        for _ in range(count)
    ]


def instructions(count):
    """The two instructions alternating: rows of one batch differ in their text padding."""
    return [INSTRUCTIONS[index % 2] for index in range(count)]


def small_models(device="cpu", **overrides):
    """A random built-in VLA (eval mode) and RL token on `device`."""
    torch.manual_seed(0)
    stats = NormStats([0.1] * 9, [2.0] * 9, [0.5] * 8, [0.25] * 8)
    config = BuiltinVLAConfig(**{**SMALL, **overrides})
    vla = BuiltinVLA(config, stats).to(device).eval()
    rl_token = RLToken(RLTokenConfig(dim=config.dim, prefix_seq_len=64)).to(device).eval()
    return vla, rl_token
