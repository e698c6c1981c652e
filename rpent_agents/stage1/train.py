"""Stage 1: train the built-in VLA and its RL token on demonstrations (`rpent-stage1`).

Total loss = `rlt_loss + rlt_alpha * vla_loss` (DESIGN.md §4). The RL token reads the prefix
detached, so `rlt_loss` trains only the RL token; `vla_loss` trains the VLA. Both are logged to
TensorBoard (when installed). The output folder is a checkpoint (`model.safetensors`,
`config.json`, `norm_stats.json`) plus `training_state.pt` for resuming.

Every save replaces its files as one set (`rpent_agents.common.atomic_save`: staging folder, fsync,
rename): a run killed at any moment (SIGKILL, power cut) leaves the last complete save, and
`--resume` continues from it; a run killed before its first save is refused by `--resume`
with a message saying so.

    rpent-stage1 export-cache --dataset demos/peg --output demos/peg.npz
    rpent-stage1 train --data demos/peg.npz --output-dir checkpoints/peg --steps 3000
    rpent-stage1 train --data exports/run/train --init-from checkpoints/peg --output-dir ft

`--init-from` fine-tunes an existing checkpoint (its weights, shape and norm stats;
`rpent_agents.stage1.fine_tune`).

`--data` takes a `.npz` frame cache or a LeRobot dataset folder. Only torch, numpy,
safetensors, tyro and tqdm are needed to train from a cache (no lerobot, gymnasium or simulator).
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
import torch
import tyro
from tqdm import tqdm

from rpent_agents.common.atomic_save import complete_interrupted_save, staged_save
from rpent_agents.common.devices import resolve_device
from rpent_agents.features.builtin import BuiltinVLA, BuiltinVLAConfig
from rpent_agents.features.checkpoint import (
    WEIGHTS_FILE,
    load_checkpoint,
    write_checkpoint_files,
)
from rpent_agents.features.norm import NormStats
from rpent_agents.features.rl_token import RLToken, RLTokenConfig
from rpent_agents.stage1.fine_tune import check_data_fits, models_from_checkpoint
from rpent_agents.stage1.frame_cache import IMAGE_KEYS, FrameCache, cache_from_lerobot, load_frames
from rpent_agents.common.cli import command

logger = logging.getLogger(__name__)
TRAINING_STATE_FILE = "training_state.pt"


@dataclass
class ExportCacheArgs:
    """Read a LeRobot dataset made by `rpent-collect` into one `.npz` frame cache."""

    dataset: Path
    """LeRobot dataset folder."""
    output: Path
    """Cache file to write (`.npz`)."""


@dataclass
class TrainArgs:
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


def build_models(args: TrainArgs, cache: FrameCache) -> tuple[BuiltinVLA, RLToken]:
    """Fresh VLA (norm stats from the cache, dims from its arrays) and RL token."""
    vla_config = BuiltinVLAConfig(
        **{
            **asdict(args.vla),
            "state_dim": cache.state.shape[1],
            "action_dim": cache.actions.shape[1],
        }
    )
    vla = BuiltinVLA(vla_config, NormStats.from_arrays(cache.state, cache.actions))
    rl_token = RLToken(RLTokenConfig(**{**asdict(args.rl_token), "dim": vla_config.dim}))
    return vla, rl_token


class SummaryLog:
    """TensorBoard scalars when tensorboard is installed, else the Python log only."""

    def __init__(self, folder: Path) -> None:
        """Write event files under `folder`."""
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            logger.warning("tensorboard is not installed; losses go to the log only")
            self.writer = None
        else:
            self.writer = SummaryWriter(str(folder))

    def scalars(self, values: dict[str, float], step: int) -> None:
        """Record each value at `step`."""
        logger.info("step %d: %s", step, {k: round(v, 5) for k, v in values.items()})
        if self.writer is not None:
            for name, value in values.items():
                self.writer.add_scalar(name, value, step)
            self.writer.flush()


def _write_training_state(
    folder: Path,
    vla: BuiltinVLA,
    rl_token: RLToken,
    optimizer: torch.optim.Optimizer,
    step: int,
    best_val_chunk_mse: float,
) -> None:
    """Write the full-precision state that `--resume` continues from into `folder`."""
    state = {
        "step": step,
        "vla": vla.state_dict(),
        "rl_token": rl_token.state_dict(),
        "optimizer": optimizer.state_dict(),
        "rng": torch.get_rng_state(),
        "best_val_chunk_mse": best_val_chunk_mse,
    }
    torch.save(state, folder / TRAINING_STATE_FILE)


def _checkpoint_metadata(args: TrainArgs, step: int, val_chunk_mse: float | None) -> dict:
    """What `config.json` says about the run that wrote the weights."""
    return {
        "step": step,
        "data": Path(args.data).name,
        "init_from": str(args.init_from) if args.init_from else None,
        "rlt_alpha": args.rlt_alpha,
        "val_chunk_mse": val_chunk_mse,
    }


def learning_rate_factor(args: TrainArgs, step: int, time_fraction: float) -> float:
    """Multiplier of the peak learning rate at `step` (warm-up, then the schedule).

    Args:
        args: The run's arguments.
        step: The optimizer step about to run (1-based).
        time_fraction: Share of the --max-minutes budget used (0 without a budget).
    """
    warmup = min(1.0, step / max(args.warmup_steps, 1))
    if args.lr_schedule == "constant":
        return warmup
    progress = min(1.0, max(step / args.steps, time_fraction))
    return warmup * 0.5 * (1.0 + math.cos(math.pi * progress))


def initial_models(args: TrainArgs, cache: FrameCache) -> tuple[BuiltinVLA, RLToken]:
    """The models a new run starts from: fresh, or the --init-from checkpoint's."""
    if args.init_from is None:
        if args.recompute_norm_stats:
            raise ValueError("--recompute-norm-stats needs --init-from (fresh runs always do)")
        return build_models(args, cache)
    return models_from_checkpoint(args.init_from, cache, args.recompute_norm_stats)


def _is_resuming(args: TrainArgs) -> bool:
    """True for --resume on a folder with a training state; refuses any other existing folder.

    A save that a kill interrupted after its commit is finished first, so the run resumes
    from the last complete save.
    """
    if not args.output_dir.exists():
        return False
    if not args.resume:
        raise FileExistsError(
            f"output dir {args.output_dir} exists; pass --resume to continue it or choose a"
            " new path"
        )
    complete_interrupted_save(args.output_dir)
    if not (args.output_dir / TRAINING_STATE_FILE).is_file():
        raise FileExistsError(
            f"--resume: {args.output_dir} holds no {TRAINING_STATE_FILE} (the run stopped before"
            " its first save, or the folder is no Stage 1 run); remove it or choose a new path"
        )
    return True


def _resumed_models(args: TrainArgs) -> tuple[BuiltinVLA, RLToken, dict]:
    """The models of the folder being resumed, with their full-precision weights."""
    vla, rl_token, _ = load_checkpoint(args.output_dir)
    state = torch.load(args.output_dir / TRAINING_STATE_FILE, weights_only=True)
    vla.load_state_dict(state["vla"])
    rl_token.load_state_dict(state["rl_token"])
    return vla, rl_token, state


class Stage1Trainer:
    """Models, optimizer and data of one Stage 1 run; `run()` trains."""

    def __init__(self, args: TrainArgs) -> None:
        """Load the data and build (or resume) the models and the optimizer."""
        self.args = args
        self.device = resolve_device(args.device)
        if args.init_from is not None:
            check_data_fits(args.init_from, args.data)  # before reading any frame
        cache = load_frames(args.data)
        resuming = _is_resuming(args)
        vla, rl_token, state = (
            _resumed_models(args) if resuming else (*initial_models(args, cache), {})
        )
        self.vla, self.rl_token = vla.to(self.device).train(), rl_token.to(self.device).train()
        self.parameters = [*self.vla.parameters(), *self.rl_token.parameters()]
        self.optimizer = torch.optim.AdamW(
            self.parameters, lr=args.learning_rate, weight_decay=args.weight_decay
        )
        train_rows, val_rows = split_frames(cache, args.val_episodes)
        self.sampler = DemoSampler(cache, self.vla, self.device)
        self.train_frames = torch.from_numpy(train_rows)
        self.val_frames = torch.from_numpy(val_rows) if len(val_rows) else None
        self.start_step = int(state.get("step", 0))
        self.best_val = float(state.get("best_val_chunk_mse", math.inf))
        if resuming:
            self.optimizer.load_state_dict(state["optimizer"])
            torch.set_rng_state(state["rng"])
        use_amp = args.amp and self.device.type == "cuda"
        self.autocast = (
            torch.autocast("cuda", dtype=torch.bfloat16) if use_amp else contextlib.nullcontext()
        )

    def train_step(self, step: int, time_fraction: float) -> dict[str, torch.Tensor]:
        """One optimizer step on a random batch; returns its losses."""
        args = self.args
        for group in self.optimizer.param_groups:
            group["lr"] = args.learning_rate * learning_rate_factor(args, step, time_fraction)
        batch = self.sampler.random_batch(self.train_frames, args.batch_size, args.image_shift_px)
        with self.autocast:
            losses = stage1_losses(self.vla, self.rl_token, batch, args.rlt_alpha)
        self.optimizer.zero_grad(set_to_none=True)
        losses["loss"].backward()
        torch.nn.utils.clip_grad_norm_(self.parameters, 1.0)
        self.optimizer.step()
        return losses

    @property
    def selects_by_val(self) -> bool:
        """Whether the checkpoint files hold the best-validation weights (keep_best_val)."""
        return self.args.keep_best_val and self.val_frames is not None

    def log_and_validate(
        self, step: int, losses: dict[str, torch.Tensor]
    ) -> tuple[float | None, bool]:
        """Log the losses and `val/chunk_mse`.

        Returns:
            `val/chunk_mse` (None without validation), and whether it is the best so far
            (only counted when the checkpoint selects by validation).
        """
        scalars = {f"train/{name}": value.item() for name, value in losses.items()}
        val = None
        if self.val_frames is not None:
            val = validation_chunk_mse(self.vla, self.sampler, self.val_frames)
            scalars["val/chunk_mse"] = val
        scalars["train/learning_rate"] = self.optimizer.param_groups[0]["lr"]
        self.log.scalars(scalars, step)
        improved = self.selects_by_val and val < self.best_val
        if improved:
            self.best_val = val
        return val, improved

    def run(self) -> Path:
        """Train up to args.steps or the time budget; returns the checkpoint folder."""
        args = self.args
        args.output_dir.mkdir(parents=True, exist_ok=True)
        self.log = SummaryLog(args.output_dir / "tensorboard")
        budget_s = args.max_minutes * 60
        started_s = time.monotonic()
        last_val = None
        steps = range(self.start_step + 1, args.steps + 1)
        for step in tqdm(steps, desc="stage 1", initial=self.start_step, total=args.steps):
            elapsed_s = time.monotonic() - started_s
            losses = self.train_step(step, elapsed_s / budget_s if budget_s > 0 else 0.0)
            out_of_time = budget_s > 0 and elapsed_s > budget_s
            last_step = step == args.steps or out_of_time
            improved = False
            if step % args.log_every == 0 or last_step:
                last_val, improved = self.log_and_validate(step, losses)
            if step % args.save_every == 0 or last_step or improved:
                self.save(step, last_val, improved)
            if out_of_time:
                logger.info(
                    "stopped at step %d: --max-minutes %.1f reached", step, args.max_minutes
                )
                break
        return args.output_dir

    def save(self, step: int, val_chunk_mse: float | None, best_val: bool) -> None:
        """Save the resume state and the checkpoint files as one set, whatever kills it.

        With keep_best_val the checkpoint files are only written when `best_val` (these are
        the best weights so far) or when there are none yet.
        """
        args = self.args
        with_checkpoint = (
            best_val or not self.selects_by_val or not (args.output_dir / WEIGHTS_FILE).is_file()
        )
        with staged_save(args.output_dir) as staging:
            if with_checkpoint:
                metadata = _checkpoint_metadata(args, step, val_chunk_mse)
                dtype = getattr(torch, args.weights_dtype)
                write_checkpoint_files(staging, self.vla, self.rl_token, metadata, dtype)
            _write_training_state(
                staging, self.vla, self.rl_token, self.optimizer, step, self.best_val
            )


def train(args: TrainArgs) -> Path:
    """Run Stage 1 and return the checkpoint folder.

    Raises:
        FileExistsError: When `output_dir` exists and `resume` is off.
    """
    torch.manual_seed(args.seed)
    return Stage1Trainer(args).run()


def export_cache(args: ExportCacheArgs) -> Path:
    """Write the frame cache of a LeRobot dataset; returns the cache path."""
    if args.output.exists():
        raise FileExistsError(f"cache {args.output} exists; choose a new path or remove it")
    cache_from_lerobot(args.dataset).save(args.output)
    return args.output


Command = (
    Annotated[ExportCacheArgs, tyro.conf.subcommand("export-cache")]
    | Annotated[TrainArgs, tyro.conf.subcommand("train")]
)


def main() -> None:
    """Entry point of `rpent-stage1`."""
    with command("rpent-stage1"):
        args = tyro.cli(Command)
        result = export_cache(args) if isinstance(args, ExportCacheArgs) else train(args)
        logger.info("wrote %s", Path(result).resolve())


if __name__ == "__main__":
    main()
