"""The Stage 1 trainer: models, optimizer and data of one run, trained up to its steps or time.

A run starts from fresh models (norm stats from the data), from an `--init-from` checkpoint
(`rpent_agents.stage1.fine_tune`) or, with `--resume`, from its own folder
(`rpent_agents.stage1.run_state`). It logs the losses and `val/chunk_mse` to TensorBoard (when
installed) and saves the checkpoint files and the resume state as one set.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from dataclasses import asdict
from pathlib import Path

import torch
from tqdm import tqdm

from rpent_agents.common.atomic_save import staged_save
from rpent_agents.common.devices import resolve_device
from rpent_agents.features.builtin import BuiltinVLA, BuiltinVLAConfig
from rpent_agents.features.checkpoint import WEIGHTS_FILE, write_checkpoint_files
from rpent_agents.features.norm import NormStats
from rpent_agents.features.rl_token import RLToken, RLTokenConfig
from rpent_agents.stage1.config import Stage1TrainArgs
from rpent_agents.stage1.fine_tune import check_data_fits, models_from_checkpoint
from rpent_agents.stage1.frame_cache import FrameCache, load_frames
from rpent_agents.stage1.losses import stage1_losses, validation_chunk_mse
from rpent_agents.stage1.run_state import (
    checkpoint_metadata,
    is_resuming,
    resumed_models,
    write_training_state,
)
from rpent_agents.stage1.sampler import DemoSampler, split_frames

logger = logging.getLogger(__name__)


def build_models(args: Stage1TrainArgs, cache: FrameCache) -> tuple[BuiltinVLA, RLToken]:
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


def initial_models(args: Stage1TrainArgs, cache: FrameCache) -> tuple[BuiltinVLA, RLToken]:
    """The models a new run starts from: fresh, or the --init-from checkpoint's."""
    if args.init_from is None:
        if args.recompute_norm_stats:
            raise ValueError("--recompute-norm-stats needs --init-from (fresh runs always do)")
        return build_models(args, cache)
    return models_from_checkpoint(args.init_from, cache, args.recompute_norm_stats)


def learning_rate_factor(args: Stage1TrainArgs, step: int, time_fraction: float) -> float:
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


class Stage1Trainer:
    """Models, optimizer and data of one Stage 1 run; `run()` trains."""

    def __init__(self, args: Stage1TrainArgs) -> None:
        """Load the data and build (or resume) the models and the optimizer."""
        self.args = args
        self.device = resolve_device(args.device)
        if args.init_from is not None:
            check_data_fits(args.init_from, args.data)  # before reading any frame
        cache = load_frames(args.data)
        resuming = is_resuming(args)
        vla, rl_token, state = (
            resumed_models(args) if resuming else (*initial_models(args, cache), {})
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
                metadata = checkpoint_metadata(args, step, val_chunk_mse)
                dtype = getattr(torch, args.weights_dtype)
                write_checkpoint_files(staging, self.vla, self.rl_token, metadata, dtype)
            write_training_state(
                staging, self.vla, self.rl_token, self.optimizer, step, self.best_val
            )


def train(args: Stage1TrainArgs) -> Path:
    """Run Stage 1 and return the checkpoint folder.

    Raises:
        FileExistsError: When `output_dir` exists and `resume` is off.
    """
    torch.manual_seed(args.seed)
    return Stage1Trainer(args).run()
