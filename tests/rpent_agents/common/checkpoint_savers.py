"""Processes that save Stage 1 / Stage 2 checkpoints in a loop until they are killed.

Each one reports every finished save on a pipe (`reports.send(number)`), so the killing test
knows the last complete save. The Stage 2 saver sets every network parameter to the save's
number and stores one transition of that value, so a save whose files mix two saves is visible.
"""

import itertools
import os
import signal
import threading
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from rpent_agents.stage1.config import Stage1TrainArgs
from rpent_agents.stage1.frame_cache import FrameCache
from rpent_agents.stage1.trainer import Stage1Trainer
from rpent_agents.stage2 import RLTDims, RLTTransition, Stage2Config, Stage2Learner, save_run

DIMS = RLTDims(z_dim=4, proprio_dim=2, ref_chunk_len=3, action_dim=2)
STAGE2 = Stage2Config(chunk_len=2, hidden_dim=32, batch_size=8, replay_capacity=64, device="cpu")
IMAGE_SIZE_PX = 16


def stage2_learner() -> Stage2Learner:
    return Stage2Learner(STAGE2, DIMS)


def stage2_modules(learner: Stage2Learner) -> tuple[torch.nn.Module, ...]:
    return learner.actor, learner.critic, learner.target_critic


def numbered_transition(number: int) -> RLTTransition:
    def full(*shape):
        return np.full(shape, number, np.float32)

    return RLTTransition(
        z_rl=full(DIMS.z_dim), proprio=full(DIMS.proprio_dim),
        ref_chunk=full(DIMS.ref_chunk_len, DIMS.action_dim),
        action=full(STAGE2.chunk_len, DIMS.action_dim), rewards=full(STAGE2.chunk_len),
        next_z_rl=full(DIMS.z_dim), next_proprio=full(DIMS.proprio_dim),
        next_ref_chunk=full(DIMS.ref_chunk_len, DIMS.action_dim), done=False,
        intervened=np.zeros(STAGE2.chunk_len, bool),
    )  # fmt: skip


def save_stage2_forever(folder: Path, reports) -> None:
    """Save number 1, 2, 3, ... of a Stage 2 run into `folder`, reporting each."""
    torch.set_num_threads(1)
    learner = stage2_learner()
    for number in itertools.count(1):
        with torch.no_grad():
            for module in stage2_modules(learner):
                for parameter in module.parameters():
                    parameter.fill_(number)
        learner.update_step = number
        learner.add_transitions([numbered_transition(number)])
        save_run(learner, folder, extra={"number": number})
        reports.send(number)


def tiny_cache(path: Path, episodes: int = 3, steps: int = 8) -> Path:
    """A frame cache of random images and actions (Stage 1 learns nothing from it; it saves)."""
    rng = np.random.default_rng(0)
    frames = episodes * steps
    FrameCache(
        image=rng.integers(0, 256, (frames, IMAGE_SIZE_PX, IMAGE_SIZE_PX, 3), dtype=np.uint8),
        wrist_image=rng.integers(0, 256, (frames, IMAGE_SIZE_PX, IMAGE_SIZE_PX, 3), np.uint8),
        state=rng.normal(size=(frames, 9)).astype(np.float32),
        actions=rng.uniform(-1, 1, (frames, 8)).astype(np.float32),
        episode_index=np.repeat(np.arange(episodes), steps),
        task_index=np.zeros(frames, np.int64),
        tasks=["insert the peg in the hole"],
    ).save(path)
    return path


def stage1_args(cache: Path, output_dir: Path, steps: int, val_episodes: int) -> Stage1TrainArgs:
    """Tiny Stage 1 run saving after every step (validation every step when it has some)."""
    args = Stage1TrainArgs(
        data=cache, output_dir=output_dir, steps=steps, batch_size=4, log_every=1, save_every=1,
        val_episodes=val_episodes, device="cpu", warmup_steps=1, resume=True,
    )  # fmt: skip
    args.vla.dim, args.vla.image_size, args.vla.patch_size = 32, IMAGE_SIZE_PX, 8
    args.vla.num_layers, args.vla.num_head_layers = 1, 1
    args.rl_token.prefix_seq_len = 64
    return args


class ReportingTrainer(Stage1Trainer):
    """A Stage 1 trainer that reports the step of every finished save."""

    def __init__(self, args: Stage1TrainArgs, reports) -> None:
        super().__init__(args)
        self.reports = reports

    def save(self, step: int, val_chunk_mse: float | None, best_val: bool) -> None:
        super().save(step, val_chunk_mse, best_val)
        self.reports.send(step)


class TrainerDyingAtItsSecondCommit(ReportingTrainer):
    """A Stage 1 trainer that saves step 1 completely and is killed committing step 2."""

    def save(self, step: int, val_chunk_mse: float | None, best_val: bool) -> None:
        if step == 2:
            die_at_commit()
        super().save(step, val_chunk_mse, best_val)


def train_stage1_and_die_at_second_commit(
    cache: Path, output_dir: Path, val_episodes: int, reports
) -> None:
    """Train two steps, saving after each, and die at the commit of the second save."""
    torch.set_num_threads(1)
    tqdm.set_lock(threading.RLock())
    torch.manual_seed(0)
    args = stage1_args(cache, output_dir, 2, val_episodes)
    TrainerDyingAtItsSecondCommit(args, reports).run()


def train_stage1_forever(cache: Path, output_dir: Path, val_episodes: int, reports) -> None:
    """Train (and save after every step) until killed."""
    torch.set_num_threads(1)
    tqdm.set_lock(threading.RLock())  # not tqdm's semaphore: a killed process leaks it
    torch.manual_seed(0)
    ReportingTrainer(stage1_args(cache, output_dir, 10**9, val_episodes), reports).run()


def die_at_replace(call_number: int) -> None:
    """SIGKILL this process at its `call_number`-th `os.replace` (1 = the first)."""
    replace, calls = os.replace, itertools.count(1)

    def replace_or_die(source, destination):
        if next(calls) == call_number:
            os.kill(os.getpid(), signal.SIGKILL)
        replace(source, destination)

    os.replace = replace_or_die


def die_at_commit() -> None:
    """SIGKILL this process at its next `os.rename`: a staged save's commit point."""

    def rename_and_die(source, destination):
        os.kill(os.getpid(), signal.SIGKILL)

    os.rename = rename_and_die


def save_stage2_and_die_at_replace(folder: Path, call_number: int, reports) -> None:
    """Save number 1 completely, then die inside save number 2 at an `os.replace`."""
    learner = stage2_learner()
    learner.add_transitions([numbered_transition(1)])
    save_run(learner, folder, extra={"number": 1})
    reports.send(1)
    learner.add_transitions([numbered_transition(2)])
    die_at_replace(call_number)
    save_run(learner, folder, extra={"number": 2})
    reports.send(2)
