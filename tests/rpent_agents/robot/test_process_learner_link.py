"""The learner in a child process: stores, updates as owed, publishes, saves, and dies cleanly.

Real spawned learner processes on the CPU (small sizes). The learner is killed with SIGKILL
(mid-run, and at random moments of back-to-back saves), stopped with SIGSTOP, and its parent
is SIGKILLed; no mocks.
"""

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from functools import partial
from pathlib import Path

import numpy as np
import psutil
import pytest
from robot_learner_helpers import (
    DIMS,
    WARMUP_UPDATES,
    TimedLink,
    numbered_transition,
    owed_updates,
    wait_for,
    warmup_config,
)

from rpent_agents.common.atomic_save import COMMIT_DIR, STAGING_DIR
from rpent_agents.robot import (
    LearnerLinkError,
    LearnerLinkOptions,
    LearnerService,
    LearnerSetup,
    ProcessLearnerLink,
    RobotRunState,
)

pytestmark = pytest.mark.subprocess

TRANSITIONS = 10
CALL_BOUND_S = 0.05  # generous: a healthy link's calls take microseconds (the bench measures)


def fresh_link(run_dir, options=None, **config_overrides):
    setup = LearnerSetup(run_dir, warmup_config(**config_overrides), DIMS, device="cpu")
    return ProcessLearnerLink(setup, options)


def collect(link, weights_seen):
    """Poll once; keep the weights; return the status."""
    weights, status = link.poll()
    if weights is not None:
        weights_seen.append(weights)
    return status


def test_learner_updates_as_owed_publishes_weights_and_resumes(tmp_path):
    run_dir = tmp_path / "run"
    options = LearnerLinkOptions(publish_period_s=0.2)
    weights_seen = []
    with fresh_link(run_dir, options) as process_link:
        link = TimedLink(process_link)
        status = collect(link, weights_seen)
        assert (weights_seen[0].version, weights_seen[0].actor_ready) == (1, False)
        assert (status.updates, status.replay_size) == (0, 0)
        for number in range(TRANSITIONS):
            link.send([numbered_transition(number)])
            collect(link, weights_seen)
            assert link.health() is None
            time.sleep(0.05)
        expected_updates = owed_updates(TRANSITIONS)
        wait_for(lambda: collect(link, weights_seen).updates == expected_updates, 60, "updates")
        assert expected_updates / TRANSITIONS >= 4
        time.sleep(3 * options.publish_period_s + 1.0)  # nothing owed: nothing runs
        status = collect(link, weights_seen)
        assert (status.updates, status.updates_owed, status.replay_size) == (
            expected_updates,
            0,
            10,
        )
        assert status.transitions == TRANSITIONS and status.actor_ready
        versions = [weights.version for weights in weights_seen]
        assert versions == sorted(set(versions)) and len(versions) >= 3
        assert all(w.actor_ready == (w.update_step >= WARMUP_UPDATES) for w in weights_seen)
        assert weights_seen[-1].update_step == expected_updates
        state = RobotRunState(env_steps=100, episodes=1, successes=1, intervention_env_steps=20)
        link.end_episode(state)
        wait_for(lambda: collect(link, weights_seen).saved_episodes == 1, 60, "the save's ack")
        assert link.longest_call_s < CALL_BOUND_S
    assert process_link._process.exitcode == 0

    with ProcessLearnerLink(LearnerSetup(run_dir, device="cpu")) as resumed:
        weights, status = resumed.poll()
        assert resumed.run_state == state
        assert (status.replay_size, status.transitions, status.updates, status.saved_episodes) == (
            10, TRANSITIONS, expected_updates, 1,
        )  # fmt: skip
        saved_actor = weights_seen[-1].state_dict
        assert weights.state_dict.keys() == saved_actor.keys()
        assert all(np.array_equal(weights.state_dict[k], saved_actor[k]) for k in saved_actor)
        time.sleep(1.5)
        assert resumed.poll()[1].updates == expected_updates  # the budget was spent


def test_health_names_a_stalled_then_a_dead_learner(tmp_path):
    options = LearnerLinkOptions(learner_timeout_s=2.0, heartbeat_period_s=0.2)
    with fresh_link(tmp_path / "run", options) as link:
        os.kill(link.pid, signal.SIGSTOP)
        try:
            sentence = wait_for(link.health, 10, "a stalled learner's sentence")
            assert sentence.startswith("the learner sent no heartbeat for ")
        finally:
            os.kill(link.pid, signal.SIGCONT)
        wait_for(lambda: link.health() is None, 10, "heartbeats after SIGCONT")
        os.kill(link.pid, signal.SIGKILL)
        sentence = wait_for(link.health, 10, "a dead learner's sentence")
        assert sentence == "the learner process died (exit code -9)"


def test_a_learner_that_cannot_start_raises_its_error(tmp_path):
    with pytest.raises(LearnerLinkError, match="did not start: FileNotFoundError: .*missing"):
        ProcessLearnerLink(LearnerSetup(tmp_path / "no_run", device="cpu"))


def test_a_learner_slower_than_the_start_wait_names_the_flag_that_waits_longer(tmp_path):
    # a spawned learner imports torch first: seconds, never 0.2 s
    with pytest.raises(LearnerLinkError, match="raise --learner-start-timeout-s"):
        fresh_link(tmp_path / "run", LearnerLinkOptions(start_timeout_s=0.2))


def save_phase(run_dir):
    """Where a kill caught the save: "staged", "committed" or "between" saves."""
    if (run_dir / COMMIT_DIR).is_dir():
        return "committed"
    return "staged" if (run_dir / STAGING_DIR).is_dir() else "between"


def acknowledged_status(link, saves):
    """The link's status once the learner acknowledged `saves` episode saves, else None."""
    status = link.poll()[1]
    return status if status.saved_episodes >= saves else None


def test_learner_killed_during_saves_resumes_from_the_last_complete_one(tmp_path):
    run_dir, rng, phases = tmp_path / "run", random.Random(3), Counter()
    setup = LearnerSetup(run_dir, warmup_config(learning_starts=10**6), DIMS, device="cpu")
    for _ in range(3):
        with ProcessLearnerLink(setup) as link:
            first = link.run_state.episodes + 1
            for episode in range(first, first + 400):  # saves back to back
                link.send([numbered_transition(episode)])
                link.end_episode(RobotRunState(episodes=episode, env_steps=10 * episode))
            acked = wait_for(partial(acknowledged_status, link, first + 1), 60, "two saves")
            time.sleep(rng.uniform(0.0, 0.05))
            os.kill(link.pid, signal.SIGKILL)
            wait_for(link.health, 10, "the learner's death")
        phases[save_phase(run_dir)] += 1
        service = LearnerService.resume(run_dir, device="cpu")
        episodes = service.run_state.episodes
        assert episodes >= acked.saved_episodes and service.saved_episodes == episodes
        assert service.run_state.env_steps == 10 * episodes
        replay = service.learner.replay
        assert replay.total_added == episodes == len(replay)
        assert replay.storage["z_rl"][replay.next_index - 1, 0] == episodes
        setup = LearnerSetup(run_dir, device="cpu")
    assert phases["staged"] + phases["committed"] > 0, phases  # the kills land inside saves


PARENT_SCRIPT = """
import sys, time
from pathlib import Path
from robot_learner_helpers import DIMS, warmup_config
from rpent_agents.robot import LearnerSetup, ProcessLearnerLink
link = ProcessLearnerLink(LearnerSetup(Path(sys.argv[1]), warmup_config(), DIMS, device="cpu"))
print(link.pid, flush=True)
time.sleep(600)
"""


def is_gone(pid):
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_learner_dies_with_its_parent(tmp_path):
    helpers_dir = str(Path(__file__).parent)
    search_path = [helpers_dir, os.environ.get("PYTHONPATH", "")]
    env = os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, search_path))}
    command = [sys.executable, "-c", PARENT_SCRIPT, str(tmp_path / "run")]
    # The killed parent's resource tracker reports its queues' semaphores: kept in the log.
    log_path = tmp_path / "parent.log"
    with log_path.open("w") as log:
        parent = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, text=True, env=env)
    try:
        pid_line = parent.stdout.readline()
        assert pid_line, log_path.read_text()
        learner_pid = int(pid_line)
        assert not is_gone(learner_pid)
    finally:
        parent.kill()
        parent.wait()
    wait_for(lambda: is_gone(learner_pid), 10, "the learner's end")
