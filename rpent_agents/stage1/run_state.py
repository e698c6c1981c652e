"""What a Stage 1 run folder holds beside the checkpoint, and how `--resume` finds it.

`training_state.pt` holds the full-precision weights, the optimizer, the step, the random
state and the best validation so far; it is saved with the checkpoint files as one set
(`rpent_agents.common.atomic_save`), so a run killed at any moment resumes from the last
complete save, and a folder without it is refused by `--resume` with a message saying so.
"""

from __future__ import annotations

from pathlib import Path

import torch

from rpent_agents.common.atomic_save import complete_interrupted_save
from rpent_agents.features.builtin import BuiltinVLA
from rpent_agents.features.checkpoint import load_checkpoint
from rpent_agents.features.rl_token import RLToken
from rpent_agents.stage1.config import Stage1TrainArgs

TRAINING_STATE_FILE = "training_state.pt"


def write_training_state(
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


def checkpoint_metadata(args: Stage1TrainArgs, step: int, val_chunk_mse: float | None) -> dict:
    """What `config.json` says about the run that wrote the weights."""
    return {
        "step": step,
        "data": Path(args.data).name,
        "init_from": str(args.init_from) if args.init_from else None,
        "rlt_alpha": args.rlt_alpha,
        "val_chunk_mse": val_chunk_mse,
    }


def is_resuming(args: Stage1TrainArgs) -> bool:
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


def resumed_models(args: Stage1TrainArgs) -> tuple[BuiltinVLA, RLToken, dict]:
    """The models of the folder being resumed, with their full-precision weights."""
    vla, rl_token, _ = load_checkpoint(args.output_dir)
    state = torch.load(args.output_dir / TRAINING_STATE_FILE, weights_only=True)
    vla.load_state_dict(state["vla"])
    rl_token.load_state_dict(state["rl_token"])
    return vla, rl_token, state
