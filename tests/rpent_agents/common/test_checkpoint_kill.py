"""SIGKILL while Stage 1 and Stage 2 save checkpoints: the last complete save always survives.

The savers (checkpoint_savers.py) run in real processes forked from a forkserver that imported
torch once, save in a loop and report every finished save; the test kills them with SIGKILL
after a seeded random delay (or at a chosen rename), then loads and resumes what is left. A
load must give exactly the last reported save or the one in progress, never a mix of two.
"""

import contextlib
import multiprocessing
import random
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest
import torch
from checkpoint_savers import (
    save_stage2_and_die_at_replace,
    save_stage2_forever,
    stage1_args,
    stage2_learner,
    stage2_modules,
    tiny_cache,
    train_stage1_and_die_at_second_commit,
    train_stage1_forever,
)

from rpent_agents.common.atomic_save import COMMIT_DIR, STAGING_DIR
from rpent_agents.features.checkpoint import (
    WEIGHTS_FILE,
    CheckpointError,
    load_checkpoint,
)
from rpent_agents.stage1.run_state import TRAINING_STATE_FILE
from rpent_agents.stage1.trainer import Stage1Trainer
from rpent_agents.stage2 import load_weights, resume_run, save_run

pytestmark = pytest.mark.subprocess

KILLS = 10
REPORT_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def forkserver():
    context = multiprocessing.get_context("forkserver")
    # Python 3.12's forkserver ignores sys.path: preload what the installed package imports.
    context.set_forkserver_preload(["torch", "rpent_agents.stage1.train", "rpent_agents.stage2"])
    return context


def run_and_kill(context, target, args, rng, saves_before_kill=2):
    """Start `target(*args, reports)`, SIGKILL it at a random moment of a later save.

    Returns:
        The number of the last save the process reported as finished.
    """
    receiver, reports = context.Pipe(duplex=False)
    process = context.Process(target=target, args=(*args, reports), daemon=True)
    process.start()
    reports.close()
    finished_s = []
    while len(finished_s) < saves_before_kill:
        assert receiver.poll(REPORT_TIMEOUT_S), f"the saver died (exit {process.exitcode})"
        last = receiver.recv()
        finished_s.append(time.monotonic())
    save_s = (finished_s[-1] - finished_s[0]) / max(1, saves_before_kill - 1)
    time.sleep(rng.uniform(0, 2 * save_s))
    process.kill()
    process.join()
    assert process.exitcode == -signal.SIGKILL, "the saver ended before the kill"
    with contextlib.suppress(EOFError):  # the reports sent before the kill, then EOF
        while receiver.poll(0):
            last = receiver.recv()
    return last


def pending_phase(folder):
    """Where the kill caught the save: "staged", "committed" or "between" saves."""
    if (folder / COMMIT_DIR).is_dir():
        return "committed"
    return "staged" if (folder / STAGING_DIR).is_dir() else "between"


def assert_stage2_run_is_save(learner, extra, folder):
    """Every part of the resumed run (networks, counters, replay, weights.pt) is one save."""
    number = extra["number"]
    assert learner.update_step == number
    for module in stage2_modules(learner):
        assert all(torch.all(p == number) for p in module.parameters())
    assert learner.replay.total_added == number
    assert torch.all(learner.replay.storage["z_rl"][learner.replay.next_index - 1] == number)
    weights_only = stage2_learner()
    load_weights(weights_only, folder)
    assert all(torch.all(p == number) for p in weights_only.actor.parameters())


def test_stage2_killed_at_random_moments_resumes_from_the_last_complete_save(forkserver, tmp_path):
    rng, phases = random.Random(17), Counter()
    folder = tmp_path / "run"
    for _ in range(KILLS):
        last = run_and_kill(forkserver, save_stage2_forever, (folder,), rng)
        phases[pending_phase(folder)] += 1
        learner, extra = resume_run(folder)
        assert extra["number"] in (last, last + 1), (extra, last)
        assert_stage2_run_is_save(learner, extra, folder)
        assert not (folder / COMMIT_DIR).exists()
        save_run(learner, folder, extra=extra)  # a later save cleans up
        assert sorted(p.name for p in folder.iterdir() if p.name.startswith(".")) == []
    print(f"stage 2 kills by phase: {dict(phases)}")
    assert phases["staged"] > 0  # the kills do land inside saves


@pytest.mark.parametrize(
    ("replace_call", "survivor"),
    [(1, 1), (2, 2), (3, 2), (5, 2)],
    ids=["before-commit", "at-commit", "one-file-moved", "last-file-moved"],
)
def test_stage2_killed_at_each_rename_keeps_one_complete_save(
    forkserver, tmp_path, replace_call, survivor
):
    # os.replace calls of save 2: 1 the replay file inside the staging folder (before the
    # commit), 2-5 moving the 4 committed files into place.
    folder = tmp_path / "run"
    receiver, reports = forkserver.Pipe(duplex=False)
    args = (folder, replace_call, reports)
    process = forkserver.Process(target=save_stage2_and_die_at_replace, args=args)
    process.start()
    process.join()
    assert process.exitcode == -signal.SIGKILL
    assert pending_phase(folder) == ("staged" if survivor == 1 else "committed")
    learner, extra = resume_run(folder)
    assert extra == {"number": survivor} and learner.replay.total_added == survivor


@pytest.fixture(scope="module")
def cache_path(tmp_path_factory):
    return tiny_cache(tmp_path_factory.mktemp("stage1") / "cache.npz")


def assert_stage1_folder_is_one_save(folder, val_episodes):
    vla, rl_token, config = load_checkpoint(folder)  # first: it finishes a committed save
    state = torch.load(folder / TRAINING_STATE_FILE, weights_only=True)
    checkpoint_step = config["metadata"]["step"]
    if val_episodes == 0:  # every save writes both the weights and the resume state
        assert checkpoint_step == state["step"]
    else:  # the weights are those of the best validation so far
        assert checkpoint_step <= state["step"]
    if checkpoint_step == state["step"]:
        for module, key in ((vla, "vla"), (rl_token, "rl_token")):
            weights = module.state_dict().items()
            assert all(torch.equal(value, state[key][name]) for name, value in weights)
    return state["step"]


@pytest.mark.parametrize("val_episodes", [0, 1], ids=["every-save", "best-val"])
def test_stage1_killed_at_random_moments_resumes_from_the_last_complete_save(
    forkserver, cache_path, tmp_path, val_episodes
):
    rng, phases = random.Random(val_episodes), Counter()
    folder = tmp_path / "checkpoint"
    for _ in range(KILLS // 2):
        saver_args = (cache_path, folder, val_episodes)
        last = run_and_kill(forkserver, train_stage1_forever, saver_args, rng)
        phases[pending_phase(folder)] += 1
        step = assert_stage1_folder_is_one_save(folder, val_episodes)
        assert step in (last, last + 1), (step, last)
        trainer = Stage1Trainer(stage1_args(cache_path, folder, step + 1, val_episodes))
        assert trainer.start_step == step
        trainer.run()
        assert assert_stage1_folder_is_one_save(folder, val_episodes) == step + 1
    # Where the kills land depends on the machine's timing (validation can take most of a
    # step): the test below kills a save while it is staged on purpose.
    print(f"stage 1 kills by phase: {dict(phases)}")


@pytest.mark.parametrize("val_episodes", [0, 1], ids=["every-save", "best-val"])
def test_stage1_killed_at_a_staged_save_s_commit_resumes_from_the_save_before(
    forkserver, cache_path, tmp_path, val_episodes
):
    folder = tmp_path / "checkpoint"
    receiver, reports = forkserver.Pipe(duplex=False)
    args = (cache_path, folder, val_episodes, reports)
    process = forkserver.Process(target=train_stage1_and_die_at_second_commit, args=args)
    process.start()
    reports.close()
    process.join()
    assert process.exitcode == -signal.SIGKILL
    assert receiver.recv() == 1  # save 1 finished
    with pytest.raises(EOFError):  # save 2 did not
        receiver.recv()
    assert pending_phase(folder) == "staged"
    assert assert_stage1_folder_is_one_save(folder, val_episodes) == 1
    trainer = Stage1Trainer(stage1_args(cache_path, folder, 2, val_episodes))
    assert trainer.start_step == 1
    trainer.run()
    assert assert_stage1_folder_is_one_save(folder, val_episodes) == 2
    assert not (folder / STAGING_DIR).exists()  # the next save cleaned up


def test_stage1_cli_resumes_a_killed_run_and_refuses_one_killed_before_its_first_save(
    forkserver, cache_path, tmp_path
):
    folder = tmp_path / "checkpoint"
    last = run_and_kill(forkserver, train_stage1_forever, (cache_path, folder, 0), random.Random(3))
    step = assert_stage1_folder_is_one_save(folder, 0)
    assert step >= last
    tiny = [
        "--vla.dim", "32", "--vla.image-size", "16", "--vla.patch-size", "8",
        "--vla.num-layers", "1", "--vla.num-head-layers", "1", "--rl-token.prefix-seq-len", "64",
        "--val-episodes", "0", "--batch-size", "4", "--device", "cpu",
    ]  # fmt: skip

    def cli(output_dir, steps):
        command = [
            sys.executable,
            "-m",
            "rpent_agents.stage1.train",
            "train",
            "--data",
            str(cache_path),
        ]
        command += ["--output-dir", str(output_dir), "--steps", str(steps), "--resume", *tiny]
        return subprocess.run(command, capture_output=True, text=True)

    resumed = cli(folder, step + 2)
    assert resumed.returncode == 0, resumed.stderr
    assert assert_stage1_folder_is_one_save(folder, 0) == step + 2
    never_saved = tmp_path / "never_saved"
    (never_saved / "tensorboard").mkdir(parents=True)  # what a run killed at its start leaves
    refused = cli(never_saved, 2)
    assert refused.returncode != 0
    assert f"{never_saved} holds no {TRAINING_STATE_FILE}" in refused.stderr


def test_a_damaged_weights_file_is_refused_by_name(forkserver, cache_path, tmp_path):
    folder = tmp_path / "checkpoint"
    run_and_kill(forkserver, train_stage1_forever, (cache_path, folder, 0), random.Random(5))
    weights = folder / WEIGHTS_FILE
    weights.write_bytes(weights.read_bytes()[:100])  # truncated by a copy, not by a save
    with pytest.raises(CheckpointError, match=f"{weights}.*truncated or damaged"):
        load_checkpoint(folder)
