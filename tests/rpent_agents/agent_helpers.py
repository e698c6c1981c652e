"""Helpers the agent tests of several subfolders share: a tiny Stage 1 checkpoint, a camera."""

import numpy as np
import torch

from rpent_agents.features.builtin import BuiltinVLA, BuiltinVLAConfig
from rpent_agents.features.checkpoint import save_checkpoint
from rpent_agents.features.norm import NormStats
from rpent_agents.features.rl_token import RLToken, RLTokenConfig

DIM = 32


def tiny_checkpoint(folder, state_dim, action_dim, chunk_len):
    torch.manual_seed(0)
    config = BuiltinVLAConfig(
        state_dim=state_dim, action_dim=action_dim, chunk_len=chunk_len, image_size=32,
        patch_size=16, dim=DIM, num_heads=2, num_layers=1, num_head_layers=1,
    )  # fmt: skip
    vla = BuiltinVLA(config, NormStats.identity(state_dim, action_dim))
    save_checkpoint(folder, vla, RLToken(RLTokenConfig(dim=DIM, num_heads=2, prefix_seq_len=64)))
    return folder


class SolidColourCamera:
    def __init__(self, size):
        self.size = size

    def read_rgb(self):
        return np.full((self.size, self.size, 3), 128, np.uint8)

    def close(self):
        pass


def memory_franka_kwargs(image_size=32):
    """Arguments of `RPent/Franka-v0` for the in-memory arm with both cameras, at full speed."""
    return dict(
        backend="memory",
        camera=SolidColourCamera(image_size),
        wrist_camera=SolidColourCamera(image_size),
        image_size=image_size,
        period_s=0.0,
    )
