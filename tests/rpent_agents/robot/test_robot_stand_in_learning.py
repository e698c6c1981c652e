"""`rpent-stage2-robot sim-stand-in` learns: its learner's critic ranks the chunks the arm ran
by their return, and the check fails when the TD target's bootstrap has its sign flipped.

The command runs as a subprocess for a few short episodes of the peg task with the embedded
Stage 1 checkpoint, every chunk stored (`always_on`) and the actor never ready (a warm-up of a
million updates): the VLA's reference drives, succeeds in some episodes and not in others, and
the learner, in its own process, updates as fast as it can on what the loop sends, then runs
`FINAL_UPDATES` more after the last episode (`--final-updates`), so that a busy machine, where
it did few beside the loop, still judges a trained learner. The same seed gives the same
episodes whatever the learner does, so the runs differ only by what it learned. From the
saved run folder: the critic's Q of each stored (observation, executed chunk) against its
discounted return rebuilt from the replay's episodes. The learner's process is a
child of the command, out of reach of `monkeypatch`: the flipped run puts td_sign_flip/ on
PYTHONPATH, whose `sitecustomize` patches `losses.td_target` in every process of the run.
"""

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from robot_command_helpers import COMMAND
from scipy.stats import spearmanr

from rpent_agents.stage2.checkpoint import actor_gate, resume_run
from rpent_agents.stage2.losses import discounted_chunk_return
from rpent_agents.stage2.networks import Actor, RLTObs

pytestmark = [pytest.mark.sim, pytest.mark.subprocess, pytest.mark.slow, pytest.mark.timeout(400)]

SIGN_FLIP_SITE = Path(__file__).parent / "td_sign_flip"
SEED = 1
"""Its six episodes (8 chunks at most): success, success, failure, success, success, success."""
FINAL_UPDATES = 1500
"""Updates after the last episode: whatever the learner did beside the loop (fewer on a busy
machine), it is judged after at least these."""
LEARNER_ARGS = [
    "--max-episodes", "6", "--no-record-trajectories", "--final-updates", str(FINAL_UPDATES),
    "--stage2.learning-starts", "2", "--stage2.warmup-updates", "1000000",
    "--stage2.hidden-dim", "64", "--stage2.batch-size", "32",
    "--stage2.replay-capacity", "1000", "--stage2.sample-window", "1000",
]  # fmt: skip
"""A small CPU learner whose actor never drives, which updates as fast as it can and then
`FINAL_UPDATES` more."""
ENV_KWARGS = {"trigger_mode": "always_on", "max_episode_chunks": 8}
LEARNED_RANK_CORRELATION = 0.6
"""Spearman correlation of Q and return the critic must reach (seed 1, 2,212 and 1,556
updates, on an idle and on an overloaded 2-core machine: 0.99 and 1.00 learned; 0.19 and 0.21
with the bootstrap's sign flipped)."""


def run_stand_in(output_dir, flip_td_bootstrap, seed=SEED):
    """The command to its end; with `flip_td_bootstrap`, every process bootstraps on -Q'."""
    path = os.pathsep.join([str(SIGN_FLIP_SITE), os.environ.get("PYTHONPATH", "")])
    flip = "1" if flip_td_bootstrap else "0"
    result = subprocess.run(
        [*COMMAND, "sim-stand-in", "--output-dir", str(output_dir),
         "--env-kwargs", json.dumps(ENV_KWARGS), "--seed", str(seed), *LEARNER_ARGS],
        capture_output=True, text=True, timeout=360,
        env=os.environ | {"PYTHONPATH": path, "RPENT_TEST_FLIP_TD_BOOTSTRAP": flip},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads((output_dir / "results.json").read_text())


def discounted_returns(rewards, done, gamma):
    """Each stored chunk's discounted return to its episode's end (chunks in the order run)."""
    chunk_returns = discounted_chunk_return(rewards, gamma).numpy()
    returns, later = np.zeros(len(chunk_returns)), 0.0
    for index in reversed(range(len(chunk_returns))):
        later = 0.0 if done[index] else later
        returns[index] = chunk_returns[index] + gamma ** rewards.shape[-1] * later
        later = returns[index]
    return returns


def judged_run(output_dir):
    """The saved learner and every chunk it stored, in the order run."""
    learner, _ = resume_run(output_dir / "run", "cpu")
    stored = len(learner.replay)
    assert stored == learner.replay.total_added  # one env, nothing overwritten: in order
    assert learner.update_step >= FINAL_UPDATES
    return learner, {name: values[:stored] for name, values in learner.replay.storage.items()}


def critic_rank_correlation(learner, chunks):
    """Spearman correlation of the critic's Q (its heads' mean) with the chunks' returns."""
    returns = discounted_returns(chunks["rewards"], chunks["done"].numpy(), learner.config.gamma)
    assert 0 < np.count_nonzero(returns) < len(returns)  # successes and failures
    obs = RLTObs(chunks["z_rl"], chunks["proprio"], chunks["ref_chunk"])
    with torch.no_grad():
        q_values = learner.critic(obs, chunks["action"]).mean(dim=-1).numpy()
    rank_correlation = spearmanr(q_values, returns).statistic
    print(f"{learner.update_step} updates: Q-return rank correlation {rank_correlation:.2f}")
    return rank_correlation


def bc_errors(learner, chunks):
    """Mean squared error of the trained and of an untrained actor to the executed chunks."""
    config, obs = learner.config, RLTObs(chunks["z_rl"], chunks["proprio"], chunks["ref_chunk"])
    torch.manual_seed(0)
    untrained = Actor(learner.dims, config.chunk_len, config.hidden_dim, config.actor_layers)
    with torch.no_grad():
        return [
            torch.mean((actor(obs, deterministic=True) - chunks["action"]) ** 2).item()
            for actor in (learner.actor, untrained)
        ]


def test_the_stand_in_learner_values_the_chunks_by_their_return(tmp_path):
    results = run_stand_in(tmp_path / "standin", flip_td_bootstrap=False)
    assert results["episodes"] == 6 and 0 < results["successes"] < 6
    assert results["actor_env_steps"] == 0  # the reference drove every chunk
    gate = {"trigger_mode": "always_on", "missed_grasp_chunks": 4}  # as it acts anywhere
    assert actor_gate(tmp_path / "standin" / "run") == gate
    learner, chunks = judged_run(tmp_path / "standin")
    assert critic_rank_correlation(learner, chunks) >= LEARNED_RANK_CORRELATION
    trained_error, untrained_error = bc_errors(learner, chunks)
    print(f"BC error {trained_error:.3f} trained, {untrained_error:.3f} untrained")
    # The actor copies the reference's chunks (0.11x-0.16x an untrained actor's error here).
    assert trained_error < 0.6 * untrained_error


def test_a_flipped_td_bootstrap_fails_the_learning_check(tmp_path):
    run_stand_in(tmp_path / "standin", flip_td_bootstrap=True)
    learner, chunks = judged_run(tmp_path / "standin")
    assert critic_rank_correlation(learner, chunks) < LEARNED_RANK_CORRELATION
