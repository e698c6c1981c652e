"""Stage 1's data on the training device: batches of demonstration frames, augmented.

`DemoSampler` copies a frame cache's arrays to the device once and draws batches of
(observation, instruction, target chunk); `random_shift` is the DrQ-style image augmentation;
`split_frames` holds the last episodes out for validation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from rpent_agents.features.builtin import BuiltinVLA
from rpent_agents.stage1.frame_cache import IMAGE_KEYS, FrameCache


@dataclass
class TrainingBatch:
    """Tensors of one Stage 1 batch, on the training device."""

    inputs: dict[str, torch.Tensor]
    text_ids: torch.Tensor
    text_mask: torch.Tensor
    chunk: torch.Tensor
    chunk_valid: torch.Tensor


class DemoSampler:
    """Batches of (observation, instruction, target chunk) from a frame cache on a device."""

    def __init__(self, cache: FrameCache, vla: BuiltinVLA, device: str | torch.device):
        """Copy the cache's arrays to `device`; target chunks follow `vla.chunk_len`."""
        chunk_index, chunk_valid = cache.chunk_targets(vla.chunk_len)
        self.device = device
        self.columns = {
            key: torch.from_numpy(getattr(cache, key)).to(device)
            for key in (*IMAGE_KEYS, "state", "actions", "image_step")
        }
        self.chunk_index = torch.from_numpy(chunk_index).to(device)
        self.chunk_valid = torch.from_numpy(chunk_valid).to(device)
        text_ids, text_mask = vla.tokenizer(cache.tasks)
        task_index = torch.from_numpy(cache.task_index).to(device)
        self.text_ids, self.text_mask = (
            text_ids.to(device)[task_index],
            text_mask.to(device)[task_index],
        )

    def batch(self, rows: torch.Tensor, image_shift_px: int = 0) -> TrainingBatch:
        """The batch of image frames `rows` (images shifted at random by up to the given px)."""
        rows = rows.to(self.device)
        steps = self.columns["image_step"][rows]
        inputs = {key: random_shift(self.columns[key][rows], image_shift_px) for key in IMAGE_KEYS}
        inputs["state"] = self.columns["state"][steps]
        return TrainingBatch(
            inputs=inputs,
            text_ids=self.text_ids[steps],
            text_mask=self.text_mask[steps],
            chunk=self.columns["actions"][self.chunk_index[steps]],
            chunk_valid=self.chunk_valid[steps],
        )

    def random_batch(
        self, frames: torch.Tensor, batch_size: int, image_shift_px: int
    ) -> TrainingBatch:
        """A batch of `batch_size` of the image frames `frames`, drawn with replacement."""
        rows = frames[torch.randint(len(frames), (batch_size,))]
        return self.batch(rows, image_shift_px)


def random_shift(images_u8: torch.Tensor, max_shift_px: int) -> torch.Tensor:
    """Translate each (B, H, W, 3) image by up to `max_shift_px` (edge padding), as in DrQ."""
    if max_shift_px <= 0:
        return images_u8
    batch, height, width, _ = images_u8.shape
    padded = torch.nn.functional.pad(
        images_u8.permute(0, 3, 1, 2).float(), [max_shift_px] * 4, mode="replicate"
    )
    offsets = torch.randint(0, 2 * max_shift_px + 1, (batch, 2), device=images_u8.device)
    rows = offsets[:, 0, None] + torch.arange(height, device=images_u8.device)
    cols = offsets[:, 1, None] + torch.arange(width, device=images_u8.device)
    batch_index = torch.arange(batch, device=images_u8.device)[:, None, None]
    shifted = padded.permute(0, 2, 3, 1)[batch_index, rows[:, :, None], cols[:, None, :]]
    return shifted.to(torch.uint8)


def split_frames(cache: FrameCache, val_episodes: int) -> tuple[np.ndarray, np.ndarray]:
    """Image frames of the training episodes and of the last `val_episodes` episodes."""
    episodes = np.unique(cache.episode_index)
    if val_episodes >= len(episodes):
        raise ValueError(
            f"val_episodes={val_episodes} leaves no training data ({len(episodes)} episodes)"
        )
    frame_episode = cache.episode_index[cache.image_step]
    held_out = np.isin(frame_episode, episodes[len(episodes) - val_episodes :])
    return np.flatnonzero(~held_out), np.flatnonzero(held_out)
