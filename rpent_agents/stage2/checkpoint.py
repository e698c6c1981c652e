"""Stage 2 checkpoints: a whole run in a folder, or the network weights in one file.

A run folder holds everything a resumed run needs to continue where it stopped:
`stage2_config.json`, `learner_state.pt` (networks, target critic, optimizers, update counter,
schedule, random states and the caller's `extra` counters), `replay.npz` (the replay buffer) and
`weights.pt` (the actor and critic alone, loadable with `load_weights`), plus any files the
caller adds (`rpent-stage2` adds its results). A save replaces all of them as one set
(`rpent_agents.common.atomic_save`: staging folder, fsync, rename): a process killed at any moment
leaves the previous save or the new one, never a mix and never no folder, and `resume_run`
(like every later save) first finishes a save that was committed before the kill.

Example:
    >>> learner = Stage2Learner(Stage2Config(device="cpu"), RLTDims(16, 9, 10, 8))
    >>> import tempfile
    >>> run_dir = Path(tempfile.mkdtemp()) / "run"
    >>> _ = save_run(learner, run_dir, extra={"env_steps": 0})
    >>> resumed, extra = resume_run(run_dir)
    >>> resumed.update_step, extra
    (0, {'env_steps': 0})
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from rpent_agents.common.atomic_save import complete_interrupted_save, staged_save
from rpent_agents.stage2.config import Stage2Config
from rpent_agents.stage2.learner import Stage2Learner
from rpent_agents.stage2.networks import RLTDims

CONFIG_FILE = "stage2_config.json"
STATE_FILE = "learner_state.pt"
REPLAY_FILE = "replay.npz"
WEIGHTS_FILE = "weights.pt"
WEIGHTS_FORMAT = "rpent-stage2-weights-v1"


def _random_states(learner: Stage2Learner) -> dict[str, Any]:
    return {
        "sample": learner.sample_generator.get_state(),
        "sample_device": learner.sample_generator.device.type,
        "noise": learner.noise_generator.get_state(),
        "noise_device": learner.noise_generator.device.type,
    }


def _learner_state(learner: Stage2Learner, extra: dict[str, Any]) -> dict[str, Any]:
    return {
        "dims": dataclasses.asdict(learner.dims),
        "actor": learner.actor.state_dict(),
        "critic": learner.critic.state_dict(),
        "target_critic": learner.target_critic.state_dict(),
        "actor_optimizer": learner.actor_optimizer.state_dict(),
        "critic_optimizer": learner.critic_optimizer.state_dict(),
        "update_step": learner.update_step,
        "schedule": learner.schedule.state_dict(),
        "random": _random_states(learner),
        "extra": extra,
    }


def save_run(
    learner: Stage2Learner,
    folder: Path,
    extra: dict[str, Any] | None = None,
    write_more: Callable[[Path], None] | None = None,
) -> Path:
    """Write the whole run to `folder`, replacing an earlier save there as one set.

    Args:
        learner: The learner to save.
        folder: The run folder.
        extra: The caller's own counters (plain Python values), returned by `resume_run`.
        write_more: Writes the caller's own files into the folder it is given (the staging
            folder); they are installed with the rest of the save.

    Returns:
        `folder`.
    """
    with staged_save(folder) as staging:
        learner.config.to_json(staging / CONFIG_FILE)
        torch.save(_learner_state(learner, extra or {}), staging / STATE_FILE)
        learner.replay.save(staging / REPLAY_FILE)
        save_weights(learner, staging / WEIGHTS_FILE)
        if write_more is not None:
            write_more(staging)
    return Path(folder)


def _restore_random_states(learner: Stage2Learner, states: dict[str, Any]) -> None:
    # A generator state only fits a generator of the same device type; a run resumed on
    # another device keeps its freshly seeded generators.
    for name in ("sample", "noise"):
        generator = getattr(learner, f"{name}_generator")
        if generator.device.type == states[f"{name}_device"]:
            generator.set_state(states[name])


def resume_run(
    folder: Path, device: str | torch.device | None = None
) -> tuple[Stage2Learner, dict[str, Any]]:
    """Rebuild a learner from a run folder written by `save_run`.

    Args:
        folder: The run folder.
        device: Where to put the learner (default: the saved config's device).

    Returns:
        The learner, in the state it was saved in, and the `extra` counters.

    Raises:
        FileNotFoundError: When `folder` lacks one of the run files.
    """
    folder = Path(folder)
    complete_interrupted_save(folder)
    for name in (CONFIG_FILE, STATE_FILE, REPLAY_FILE):
        if not (folder / name).is_file():
            raise FileNotFoundError(
                f"{folder / name} is missing; pass a folder written by save_run "
                "(to load network weights alone use load_weights)"
            )
    config = Stage2Config.from_json(folder / CONFIG_FILE)
    state = torch.load(folder / STATE_FILE, map_location="cpu", weights_only=True)
    learner = Stage2Learner(config, RLTDims(**state["dims"]), device)
    learner.actor.load_state_dict(state["actor"])
    learner.critic.load_state_dict(state["critic"])
    learner.target_critic.load_state_dict(state["target_critic"])
    for optimizer, key in (
        (learner.actor_optimizer, "actor_optimizer"),
        (learner.critic_optimizer, "critic_optimizer"),
    ):
        optimizer.load_state_dict(state[key])
        for group in optimizer.param_groups:  # a run saved on another device: this one's setting
            group["capturable"] = learner.use_cuda_graphs
    learner.update_step = int(state["update_step"])
    learner.schedule.load_state_dict(state["schedule"])
    learner.replay.load(folder / REPLAY_FILE)
    _restore_random_states(learner, state["random"])
    return learner, state["extra"]


def save_weights(learner: Stage2Learner, path: Path) -> None:
    """Write the actor and critic weights (with their sizes) to one file."""
    torch.save(
        {
            "format": WEIGHTS_FORMAT,
            "dims": dataclasses.asdict(learner.dims),
            "chunk_len": learner.config.chunk_len,
            "actor": learner.actor.state_dict(),
            "critic": learner.critic.state_dict(),
        },
        path,
    )


def load_weights(learner: Stage2Learner, path: Path) -> None:
    """Load a weights file (or a run folder's `weights.pt`) into `learner`; resets its target.

    Raises:
        ValueError: When the file is not a Stage 2 weights file or its sizes differ.
    """
    path = Path(path)
    if path.is_dir():
        complete_interrupted_save(path)
        path = path / WEIGHTS_FILE
    weights = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(weights, dict) or weights.get("format") != WEIGHTS_FORMAT:
        raise ValueError(f"{path} is not a Stage 2 weights file (written by save_weights)")
    saved = (RLTDims(**weights["dims"]), weights["chunk_len"])
    if saved != (learner.dims, learner.config.chunk_len):
        raise ValueError(
            f"{path} holds networks for dims {saved[0]} and chunk_len {saved[1]}; this learner "
            f"has {learner.dims} and chunk_len {learner.config.chunk_len}"
        )
    learner.actor.load_state_dict(weights["actor"])
    learner.critic.load_state_dict(weights["critic"])
    learner.target_critic.load_state_dict(learner.critic.state_dict())
