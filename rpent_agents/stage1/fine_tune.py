"""Fine-tuning a Stage 1 checkpoint: `rpent-stage1 train --init-from CHECKPOINT`.

Training starts from the checkpoint's VLA and RL-token weights and from its norm stats: Stage 1,
Stage 2 and the feature model must normalise with the same numbers (DESIGN.md §8), so the stats
are recomputed from the new data only when asked (`--recompute-norm-stats`; a Stage 2 actor
trained on the old checkpoint's features then reads differently normalised ones). The model's
shape is the checkpoint's: the `--vla.*` and `--rl-token.*` flags are not read. A dataset that
does not fit the checkpoint (state or action dimension, camera keys) is refused before any
frame is read, with a message listing every difference.
"""

from __future__ import annotations

import logging
from pathlib import Path

from rpent_agents.features.builtin import CAMERA_KEYS, BuiltinVLA
from rpent_agents.features.checkpoint import load_checkpoint, read_config
from rpent_agents.features.norm import NormStats
from rpent_agents.features.rl_token import RLToken
from rpent_agents.stage1.frame_cache import FrameCache, data_layout

logger = logging.getLogger(__name__)


def check_data_fits(checkpoint_dir: Path, data: Path) -> None:
    """Refuse data whose state/action dimensions or camera keys differ from the checkpoint's.

    Args:
        checkpoint_dir: The Stage 1 checkpoint to fine-tune.
        data: A `.npz` frame cache or a LeRobot dataset folder (rpent or lerobot key style).

    Raises:
        ValueError: Naming each difference and the fix.
    """
    vla = read_config(checkpoint_dir)["vla"]
    layout = data_layout(data)
    differences = [
        f"{name} {value} (checkpoint: {vla[name]})"
        for name, value in (("state_dim", layout.state_dim), ("action_dim", layout.action_dim))
        if value != vla[name]
    ]
    missing_cameras = [key for key in CAMERA_KEYS if key not in layout.image_keys]
    if missing_cameras:
        differences.append(
            f"image keys {list(layout.image_keys)} lack {missing_cameras} (the checkpoint's VLA"
            f" reads {list(CAMERA_KEYS)})"
        )
    if differences:
        raise ValueError(
            f"--data {data} does not fit --init-from {checkpoint_dir}: {'; '.join(differences)};"
            " fine-tune on data of the same robot and cameras, or train from scratch without"
            " --init-from"
        )


def models_from_checkpoint(
    checkpoint_dir: Path, cache: FrameCache, recompute_norm_stats: bool
) -> tuple[BuiltinVLA, RLToken]:
    """The checkpoint's VLA and RL token, in float32 on the CPU, ready to train on `cache`.

    Args:
        checkpoint_dir: The Stage 1 checkpoint to start from.
        cache: The fine-tuning data (for `recompute_norm_stats`).
        recompute_norm_stats: Normalise with statistics of `cache` instead of the checkpoint's.
    """
    vla, rl_token, _ = load_checkpoint(checkpoint_dir)
    if recompute_norm_stats:
        fresh = BuiltinVLA(vla.config, NormStats.from_arrays(cache.state, cache.actions))
        fresh.load_state_dict(vla.state_dict())  # the stats are buffers outside the state dict
        vla = fresh
        logger.info("norm stats recomputed from the fine-tuning data")
    logger.info("fine-tuning %s (model shape and weights from the checkpoint)", checkpoint_dir)
    return vla, rl_token
