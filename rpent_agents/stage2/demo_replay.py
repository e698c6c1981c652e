"""A fresh Stage 2 run that starts from demonstrations: preloaded, then pretrained on.

`Stage2Config.demo_transitions` names a transitions file (`rpent-demo-transitions` writes one
from a Stage 1 frame cache: `stage2.demo_transitions`); a fresh run loads it into its replay
buffer before its first episode, where the transitions count as stored ones (the schedule's
`learning_starts` and update budget count them; `intervention_batch_share` draws from them,
every step being intervened). `Stage2Config.demo_pretrain_updates` updates (critic and actor,
as every update) then run on them before the first episode, counted against what the
schedule owes, so no robot time is spent on them. A resumed run has them in its saved replay.
Only numpy and torch are imported (the learner runs without gymnasium).
"""

from __future__ import annotations

import logging
from dataclasses import fields
from pathlib import Path

import numpy as np
from tqdm import tqdm

from rpent_agents.common.finite_checks import first_non_finite_entry
from rpent_agents.stage2.learner import Stage2Learner
from rpent_agents.stage2.networks import RLTDims
from rpent_agents.stage2.replay import TRANSITION_FIELDS

logger = logging.getLogger(__name__)
PRETRAIN_ROUND = 100
"""Pretraining updates between two moves of its progress bar."""
MAKE_THEM = (
    "make it with `rpent-demo-transitions --cache demos/peg/frames.npz --output F.npz` "
    "(the run's checkpoint and chunk length)"
)


def check_demo_file(path: Path, dims: RLTDims, chunk_len: int) -> int:
    """Refuse a transitions file a learner of `dims` and `chunk_len` cannot load.

    Returns:
        The transitions it holds.

    Raises:
        FileNotFoundError: When it does not exist.
        ValueError: When it is not a transitions file, holds other sizes, or NaN or inf;
            each message names `Stage2Config.demo_transitions` and the fix.
    """
    where = f"Stage2Config.demo_transitions {path}"
    if not Path(path).is_file():
        raise FileNotFoundError(f"{where} does not exist; {MAKE_THEM}")
    with np.load(path) as data:
        missing = [name for name in (*TRANSITION_FIELDS, "dims") if name not in data.files]
        if missing:
            raise ValueError(f"{where} is not a transitions file (no {missing}); {MAKE_THEM}")
        stored = tuple(int(value) for value in data["dims"])
        expected = (*(getattr(dims, item.name) for item in fields(RLTDims)), chunk_len)
        if stored != expected:
            raise ValueError(
                f"{where} holds (z, proprio, ref_len, action, chunk_len) {stored}; this run's "
                f"are {expected}: convert the cache again with the run's checkpoint and "
                "--chunk-len"
            )
        non_finite = first_non_finite_entry({name: data[name] for name in TRANSITION_FIELDS})
        if non_finite is not None:
            name, index, value = non_finite
            raise ValueError(
                f"{where}: {name}{index} is {value}; refused (one NaN turns the networks "
                "into NaN): convert the cache again, without the broken episode"
            )
        return len(data["done"])


def start_from_demos(learner: Stage2Learner) -> dict[str, float]:
    """Preload a fresh learner's demonstrations and run its pretraining updates.

    Does nothing without `Stage2Config.demo_transitions`.

    Returns:
        The mean scalars of the last round of pretraining updates (empty without them).

    Raises:
        FileNotFoundError, ValueError: As `check_demo_file`; ValueError also when the
            learner's replay is not empty (preload fresh runs only).
    """
    config = learner.config
    if config.demo_transitions is None:
        return {}
    if len(learner.replay) > 0:
        raise ValueError("Stage2Config.demo_transitions preloads a fresh run's empty replay")
    count = check_demo_file(config.demo_transitions, learner.dims, config.chunk_len)
    learner.replay.load(config.demo_transitions)
    logger.info("preloaded %d demonstration transitions", min(count, learner.replay.capacity))
    if config.demo_pretrain_updates == 0:
        return {}
    total, scalars = config.demo_pretrain_updates, {}
    with tqdm(total=total, desc="pretraining on demonstrations", unit="update") as progress:
        for done in range(0, total, PRETRAIN_ROUND):
            scalars = learner.run_updates(min(PRETRAIN_ROUND, total - done))
            progress.update(min(PRETRAIN_ROUND, total - done))
    learner.schedule.record_updates(total)
    return scalars
