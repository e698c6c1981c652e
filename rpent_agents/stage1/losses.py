"""Stage 1's losses (DESIGN.md §4) and its validation metric.

Total loss = `rlt_loss + rlt_alpha * vla_loss`. The RL token reads the prefix detached, so
`rlt_loss` trains only the RL token; `vla_loss` trains the VLA. `val/chunk_mse` is the error of
the sampled reference chunk on held-out episodes, in normalised action units.
"""

from __future__ import annotations

import torch

from rpent_agents.features.builtin import BuiltinVLA
from rpent_agents.features.rl_token import RLToken
from rpent_agents.stage1.sampler import DemoSampler, TrainingBatch


def stage1_losses(
    vla: BuiltinVLA, rl_token: RLToken, batch: TrainingBatch, rlt_alpha: float
) -> dict[str, torch.Tensor]:
    """`rlt_loss`, `vla_loss` and their total `loss` on one batch."""
    prefix, pad_mask = vla.encode_prefix(batch.inputs, batch.text_ids, batch.text_mask)
    _, rlt_loss = rl_token(prefix, pad_mask, vla.image_token_count)
    vla_loss = vla.vla_loss(prefix, pad_mask, batch.chunk, batch.chunk_valid)
    return {"loss": rlt_loss + rlt_alpha * vla_loss, "rlt_loss": rlt_loss, "vla_loss": vla_loss}


@torch.no_grad()
def validation_chunk_mse(
    vla: BuiltinVLA, sampler: DemoSampler, frames: torch.Tensor, max_frames: int = 512
) -> float:
    """Mean squared error of the sampled reference chunk, in normalised action units."""
    vla.eval()
    batch = sampler.batch(frames[:max_frames])
    prefix, pad_mask = vla.encode_prefix(batch.inputs, batch.text_ids, batch.text_mask)
    error = (vla.sample_chunk(prefix, pad_mask) - batch.chunk) / vla.action_std
    weight = batch.chunk_valid[..., None].float()
    vla.train()
    return float((error.pow(2) * weight).sum() / (weight.sum() * error.shape[-1]))
