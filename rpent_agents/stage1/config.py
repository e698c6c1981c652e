"""The arguments of `rpent-stage1`'s two subcommands: `export-cache` and `train`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from rpent_agents.features.builtin import BuiltinVLAConfig
from rpent_agents.features.rl_token import RLTokenConfig


@dataclass
class ExportCacheArgs:
    """Write a `.npz` frame cache of a LeRobot dataset, or of trajectory records.

    `--dataset D --output F.npz` reads a LeRobot dataset (needs lerobot); `--from-records R
    --output-dir O` exports records under the flywheel rules into `O/frames.npz` and
    `O/report.json` (no lerobot).
    """

    dataset: Path | None = None
    """LeRobot dataset folder (`rpent-collect`, `rpent-flywheel`; needs lerobot)."""
    output: Path | None = None
    """With --dataset: the cache file to write (`.npz`)."""
    from_records: Path | None = None
    """Trajectory records (a run folder, a task folder or any parent): export their kept
    frames as `rpent-flywheel` does, without lerobot."""
    output_dir: Path | None = None
    """With --from-records: the folder to create, with `frames.npz` and `report.json`."""
    include_sources: tuple[Literal["actor"], ...] = ()
    """With --from-records: sources exported besides the VLA's (`actor`: the RL actor's
    executed actions)."""
    read_threads: int = 4
    """With --from-records: threads decoding the recorded images."""


@dataclass
class Stage1TrainArgs:
    """Train the built-in VLA + RL token (Stage 1) and write a checkpoint folder."""

    data: Path
    """A `.npz` frame cache or a LeRobot dataset folder."""
    output_dir: Path
    """Checkpoint folder (created; with --resume, continued)."""
    steps: int = 3000
    """Optimizer steps in total (a resumed run continues up to this count)."""
    batch_size: int = 64
    learning_rate: float = 3e-4
    """Peak learning rate (after the warm-up)."""
    lr_schedule: Literal["cosine", "constant"] = "cosine"
    """"cosine": decay to 0 over the run (its progress: steps done, or the time budget used,
    whichever is further); "constant": no decay."""
    warmup_steps: int = 200
    """Steps of linear learning-rate warm-up."""
    weight_decay: float = 1e-4
    rlt_alpha: float = 1.0
    """Weight of the VLA loss in `rlt_loss + rlt_alpha * vla_loss`."""
    vla: BuiltinVLAConfig = field(
        default_factory=lambda: BuiltinVLAConfig(
            image_size=128, patch_size=16, image_encoder="conv", binarize_gripper=True
        )
    )
    """The VLA's shape (defaults: the recipe of the embedded checkpoint)."""
    rl_token: RLTokenConfig = field(default_factory=lambda: RLTokenConfig(prefix_seq_len=256))
    """RL-token options; `dim` is always set to the VLA's `dim`."""
    image_shift_px: int = 4
    """Random-shift augmentation: images move by up to this many pixels (0: off)."""
    val_episodes: int = 2
    """Last episodes held out for `val/chunk_mse` (0: no validation)."""
    keep_best_val: bool = True
    """The checkpoint files hold the weights of the lowest `val/chunk_mse` seen (checked every
    log_every steps); the training state for --resume always holds the latest."""
    log_every: int = 50
    save_every: int = 500
    device: str = "auto"
    """Torch device ("auto": cuda when available, else cpu)."""
    seed: int = 0
    resume: bool = False
    """Continue from `output_dir/training_state.pt` instead of refusing an existing folder."""
    weights_dtype: Literal["float32", "bfloat16"] = "float32"
    """Storage dtype of the saved weights (bfloat16 halves the checkpoint)."""
    max_minutes: float = 0.0
    """Stop early, saving the checkpoint, after this much training time (0: no limit)."""
    amp: bool = True
    """On CUDA, run forward and backward under bfloat16 autocast (losses stay float32)."""
    init_from: Path | None = None
    """Fine-tune this Stage 1 checkpoint: start from its weights and norm stats (its model
    shape; --vla.* and --rl-token.* are not read); data that does not fit it is refused."""
    recompute_norm_stats: bool = False
    """With --init-from: normalise with statistics of --data instead of the checkpoint's."""
