"""`rpent-stage1`: train the built-in VLA and its RL token on demonstrations (Stage 1).

The output folder is a checkpoint (`model.safetensors`, `config.json`, `norm_stats.json`) plus
`training_state.pt` for resuming. The arguments are `rpent_agents.stage1.config`'s, the losses
`losses`' (DESIGN.md §4), the batches `sampler`'s, the run `trainer`'s and what `--resume`
reads `run_state`'s. Every save replaces its files as one set
(`rpent_agents.common.atomic_save`): a run killed at any moment (SIGKILL, power cut) leaves the
last complete save, and `--resume` continues from it; a run killed before its first save is
refused by `--resume` with a message saying so.

    rpent-stage1 export-cache --dataset demos/peg --output demos/peg.npz
    rpent-stage1 export-cache --from-records runs/fw/vla --output-dir exports/fw/vla
    rpent-stage1 train --data demos/peg.npz --output-dir checkpoints/peg --steps 3000
    rpent-stage1 train --data exports/run/train --init-from checkpoints/peg --output-dir ft

`--init-from` fine-tunes an existing checkpoint (its weights, shape and norm stats;
`rpent_agents.stage1.fine_tune`).

`export-cache --from-records` exports trajectory records under the flywheel rules into
`O/frames.npz` and `O/report.json` (`rpent_agents.stage1.record_export`; no lerobot needed).
`--data` takes a `.npz` frame cache or a LeRobot dataset folder. Only torch, numpy,
safetensors, tyro and tqdm are needed to train from a cache (no lerobot, gymnasium or simulator).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Annotated

import tyro

from rpent_agents.common.cli import command
from rpent_agents.stage1.config import ExportCacheArgs, Stage1TrainArgs
from rpent_agents.stage1.frame_cache import cache_from_lerobot
from rpent_agents.stage1.trainer import train

logger = logging.getLogger(__name__)


def check_export_args(args: ExportCacheArgs) -> None:
    """Refuse an `export-cache` that names not exactly one input with its output.

    Raises:
        ValueError: Naming the options that do not fit together.
    """
    if (args.dataset is None) == (args.from_records is None):
        raise ValueError("export-cache: give either --dataset D --output F.npz or --from-records R")
    if args.dataset is not None and (args.output is None or args.output_dir is not None):
        raise ValueError("export-cache --dataset writes one file: give --output F.npz")
    if args.from_records is not None and (args.output_dir is None or args.output is not None):
        raise ValueError("export-cache --from-records writes a folder: give --output-dir O")
    if args.dataset is not None and args.include_sources:
        raise ValueError("--include-sources is read with --from-records only")


def export_cache(args: ExportCacheArgs) -> Path:
    """Write the frame cache of a LeRobot dataset or of records; returns the cache path.

    Raises:
        ValueError: For options that do not fit together (`check_export_args`).
        FileExistsError: When the output exists.
    """
    check_export_args(args)
    if args.from_records is not None:
        # the recorders package imports gymnasium, which training from a cache does not need
        from recorders.flywheel import REPORT_FILE
        from rpent_agents.stage1.record_export import export_frame_cache

        report = export_frame_cache(
            args.from_records, args.output_dir, args.include_sources, args.read_threads
        )
        print(json.dumps(report.to_json(with_tasks=False), indent=2))
        if report.dataset_dir is None:
            logger.warning("no frame was eligible: %s holds only the report", args.output_dir)
        return Path(report.dataset_dir or Path(report.output_dir) / REPORT_FILE)
    if args.output.exists():
        raise FileExistsError(f"cache {args.output} exists; choose a new path or remove it")
    cache_from_lerobot(args.dataset).save(args.output)
    return args.output


Command = (
    Annotated[ExportCacheArgs, tyro.conf.subcommand("export-cache")]
    | Annotated[Stage1TrainArgs, tyro.conf.subcommand("train")]
)


def main() -> None:
    """Entry point of `rpent-stage1`."""
    with command("rpent-stage1"):
        args = tyro.cli(Command)
        result = export_cache(args) if isinstance(args, ExportCacheArgs) else train(args)
        logger.info("wrote %s", Path(result).resolve())


if __name__ == "__main__":
    main()
