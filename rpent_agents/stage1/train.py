"""`rpent-stage1`: train the built-in VLA and its RL token on demonstrations (Stage 1).

The output folder is a checkpoint (`model.safetensors`, `config.json`, `norm_stats.json`) plus
`training_state.pt` for resuming. The arguments are `rpent_agents.stage1.config`'s, the losses
`losses`' (DESIGN.md §4), the batches `sampler`'s, the run `trainer`'s and what `--resume`
reads `run_state`'s. Every save replaces its files as one set
(`rpent_agents.common.atomic_save`): a run killed at any moment (SIGKILL, power cut) leaves the
last complete save, and `--resume` continues from it; a run killed before its first save is
refused by `--resume` with a message saying so.

    rpent-stage1 export-cache --dataset demos/peg --output demos/peg.npz
    rpent-stage1 train --data demos/peg.npz --output-dir checkpoints/peg --steps 3000
    rpent-stage1 train --data exports/run/train --init-from checkpoints/peg --output-dir ft

`--init-from` fine-tunes an existing checkpoint (its weights, shape and norm stats;
`rpent_agents.stage1.fine_tune`).

`--data` takes a `.npz` frame cache or a LeRobot dataset folder. Only torch, numpy,
safetensors, tyro and tqdm are needed to train from a cache (no lerobot, gymnasium or simulator).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import tyro

from rpent_agents.common.cli import command
from rpent_agents.stage1.config import ExportCacheArgs, TrainArgs
from rpent_agents.stage1.frame_cache import cache_from_lerobot
from rpent_agents.stage1.trainer import train

logger = logging.getLogger(__name__)


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
